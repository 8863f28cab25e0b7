//! Messages and output are KubeVirt's virtctl's for the same flags, files and server answers.

use clap::Parser;

use super::*;
use crate::cli::{Cli, Command};

fn args(argv: &[&str]) -> ExpandArgs {
    let cli = Cli::try_parse_from(std::iter::once("virtctl").chain(argv.iter().copied()))
        .expect("parses");
    match cli.command {
        Command::Expand(args) => args,
        other => panic!("not expand: {other:?}"),
    }
}

fn check(argv: &[&str]) -> Result<Request, String> {
    validate(&args(argv))
}

#[test]
fn flags() {
    assert_eq!(
        check(&["expand", "--vm", "myvm"]),
        Ok(Request {
            source: Source::Vm("myvm".into()),
            output: Output::Yaml
        })
    );
    assert_eq!(
        check(&["expand", "-f", "vm.yaml", "-o", "json"]),
        Ok(Request {
            source: Source::File("vm.yaml".into()),
            output: Output::Json
        })
    );
    assert_eq!(
        check(&["expand", "--file", "-", "--output=yaml"]),
        Ok(Request {
            source: Source::File("-".into()),
            output: Output::Yaml
        })
    );
    // The last of a repeated flag counts.
    assert_eq!(
        check(&["expand", "--vm", "a", "--vm", "b"]).map(|r| r.source),
        Ok(Source::Vm("b".into()))
    );
}

#[test]
fn refusals_in_kubevirts_words_and_order() {
    let neither = "error invalid arguments - VirtualMachine name or file must be provided";
    let both = "if any flags in the group [file vm] are set none of the others can be; [file vm] were all set";
    for (argv, message) in [
        (&["expand"][..], neither.to_string()),
        (&["expand", "--vm", ""], neither.into()),
        (&["expand", "--file", ""], neither.into()),
        (&["expand", "--vm", "", "--file", ""], neither.into()),
        (&["expand", "--vm", "a", "--file", "b"], both.into()),
        (&["expand", "--vm", "a", "--file", ""], both.into()),
        (
            &["expand", "--vm", "a", "-o", "xml"],
            "error not supported output format defined: xml".into(),
        ),
        (
            &["expand", "--vm", "a", "--output", "JSON"],
            "error not supported output format defined: JSON".into(),
        ),
        (
            &["expand", "--vm", "a", "-o", ""],
            "error not supported output format defined: ".into(),
        ),
        // The output format is checked before the flag group.
        (
            &["expand", "--vm", "a", "--file", "b", "-o", "xml"],
            "error not supported output format defined: xml".into(),
        ),
        (
            &["expand", "--vm", "a", "extra"],
            "accepts 0 arg(s), received 1".into(),
        ),
        (&["expand", "x", "y"], "accepts 0 arg(s), received 2".into()),
    ] {
        assert_eq!(check(argv), Err(message), "{argv:?}");
    }
}

#[test]
fn calls() {
    let c = call(&Source::Vm("myvm".into()), "ns1", None);
    assert_eq!(c.method, Method::GET);
    assert_eq!(
        c.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/ns1/virtualmachines/myvm/expand-spec"
    );
    assert!(c.body.is_empty());
    assert_eq!(
        c.failure,
        "error expanding VirtualMachine - myvm in namespace - ns1:"
    );
    let vm = serde_json::json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "filevm"}, "spec": {"template": {}}});
    let c = call(&Source::File("vm.yaml".into()), "default", Some(&vm));
    assert_eq!(c.method, Method::PUT);
    assert_eq!(
        c.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/default/expand-vm-spec"
    );
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&c.body).expect("JSON body"),
        vm
    );
    assert_eq!(
        c.failure,
        "error expanding VirtualMachine - filevm in namespace - default:"
    );
}

#[test]
fn decoding_files() {
    let yaml = b"apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm1\nspec:\n  runStrategy: Halted\n---\nkind: Ignored\n";
    let vm = decode_vm(yaml).expect("YAML");
    assert_eq!(vm_name(&vm), "vm1");
    assert_eq!(vm["spec"]["runStrategy"], "Halted");
    let vm = decode_vm(b" \n{\"metadata\": {\"name\": \"j\"}}\n{\"trailing\": 1}").expect("JSON");
    assert_eq!(vm, serde_json::json!({"metadata": {"name": "j"}}));
    assert_eq!(vm_name(&serde_json::json!({})), "");
    for (data, message) in [
        (&b""[..], "error decoding VirtualMachine EOF".to_string()),
        (b"  \n", "error decoding VirtualMachine EOF".into()),
        (
            b"[1,2]",
            "error decoding VirtualMachine error unmarshaling JSON: while decoding JSON: json: \
             cannot unmarshal array into Go value of type v1.VirtualMachine"
                .into(),
        ),
        (
            b"\"str\"\n",
            "error decoding VirtualMachine error unmarshaling JSON: while decoding JSON: json: \
             cannot unmarshal string into Go value of type v1.VirtualMachine"
                .into(),
        ),
    ] {
        assert_eq!(decode_vm(data), Err(message), "{data:?}");
    }
    let error = decode_vm(b"a: [\n").expect_err("bad YAML");
    assert!(
        error.starts_with("error decoding VirtualMachine error converting YAML to JSON: "),
        "{error}"
    );
    let error = decode_vm(b"{\"a\": ").expect_err("bad JSON");
    assert!(
        error.starts_with("error decoding VirtualMachine "),
        "{error}"
    );
}

#[test]
fn reading_files() {
    assert_eq!(
        read_vm("/nonexistent/vm.yaml"),
        Err("error reading file open /nonexistent/vm.yaml: no such file or directory".into())
    );
    assert_eq!(
        read_vm("/"),
        Err("error reading file read /: is a directory".into())
    );
}

#[test]
fn rendering() {
    let body = r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"vm1","namespace":"default","creationTimestamp":"2024-05-01T10:00:00Z","labels":{"kubevirt.io/size":"2"}},"spec":{"runStrategy":"Always","template":{"spec":{"domain":{"cpu":{"sockets":2},"memory":{"guest":"2Gi"},"devices":{"interfaces":[{"name":"default","masquerade":{}}]}}}}}}"#;
    assert_eq!(
        render(body, Output::Yaml),
        Ok("apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  creationTimestamp: \"2024-05-01T10:00:00Z\"
  labels:
    kubevirt.io/size: \"2\"
  name: vm1
  namespace: default
spec:
  runStrategy: Always
  template:
    spec:
      domain:
        cpu:
          sockets: 2
        devices:
          interfaces:
          - masquerade: {}
            name: default
        memory:
          guest: 2Gi
"
        .to_string())
    );
    let json = render(body, Output::Json).expect("JSON");
    assert!(json.starts_with(
        "{\n \"kind\": \"VirtualMachine\",\n \"apiVersion\": \"kubevirt.io/v1\",\n \"metadata\": {\n  \"creationTimestamp\": \"2024-05-01T10:00:00Z\",\n"
    ));
    assert!(json.ends_with("\n}"), "no newline at the end, as KubeVirt");
    // kind and apiVersion are set when the server left them out.
    assert!(render(r#"{"metadata":{}}"#, Output::Yaml)
        .expect("YAML")
        .starts_with("apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {}\n"));
    assert!(render("[]", Output::Yaml).is_err());
    assert!(render("not json", Output::Yaml).is_err());
}
