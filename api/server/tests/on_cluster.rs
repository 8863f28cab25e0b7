//! virt-api against the real kube-apiserver of the local cluster (`tests/cluster/cluster.sh`).
//!
//! virt-api runs as a process on the host, with a certificate made here for
//! `virt-api.<namespace>.svc` and 127.0.0.1. The webhooks are registered by URL and limited
//! to a namespace made for this run (a `namespaceSelector`), so nothing else in the cluster
//! depends on this process; the APIService points at a selector-less Service whose
//! EndpointSlice names the host (kube-apiserver runs with `--enable-aggregator-routing`).
//! Everything registered is removed when the test ends, whatever its outcome.
//!
//! Then, with kubectl and virtctl: every fixture that validation refuses is refused by
//! `kubectl apply` with the same field paths, defaults are applied, a VMI spec update is
//! refused, discovery lists the subresources, a user without `virtualmachineinstances/console`
//! gets 403 (from kube-apiserver, and from virt-api's own SubjectAccessReview), and
//! `virtctl start`/`stop`/`restart`/`version` work on a VM, and `virtctl console` reaches a
//! VMI's console through kube-apiserver, virt-api and a stand-in for virt-handler (a Pod
//! object on a node that does not exist, whose status names the host as its IP).

mod common;

use common::{Cluster, Run};
use serde_json::Value;

#[test]
fn virt_api_on_the_local_cluster() {
    let cluster = Cluster::connect();
    let run = Run::start(&cluster);

    webhooks_refuse_what_validation_refuses(&run);
    defaults_are_applied(&run);
    vmi_spec_update_is_refused(&run);
    discovery_lists_the_subresources(&run);
    console_needs_its_own_permission(&run);
    virtctl_drives_a_vm(&run);
    console_is_relayed_through_kube_apiserver(&run);
}

fn webhooks_refuse_what_validation_refuses(run: &Run) {
    let mut refused = 0;
    for (name, object) in common::fixtures() {
        let Ok(mut parsed) = api::object::KubeVirtObject::from_value(object.clone()) else {
            continue; // a kind Ferrovirt does not serve (no CRD, no webhook)
        };
        parsed.apply_defaults();
        let out = run.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &object);
        match parsed.validate() {
            Ok(()) => assert!(out.ok, "{name} should be accepted: {}", out.stderr),
            Err(errors) => {
                refused += 1;
                assert!(!out.ok, "{name} should be refused");
                // A 422 denial reads as kube-apiserver's own validation errors do.
                assert!(
                    out.stderr.contains("The request is invalid"),
                    "{name}: {}",
                    out.stderr
                );
                for e in &errors {
                    assert!(
                        out.stderr.contains(&format!("{}: ", e.field)),
                        "{name}: kubectl does not show {}: {}",
                        e.field,
                        out.stderr
                    );
                }
            }
        }
    }
    assert!(refused > 0, "some fixtures are refused by validation");
}

fn defaults_are_applied(run: &Run) {
    let (_, vm) = common::fixtures()
        .into_iter()
        .find(|(n, _)| n == "vm-demo.yaml")
        .expect("vm-demo.yaml manifest");
    let out = run.kubectl_stdin(
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        &vm,
    );
    assert!(out.ok, "{}", out.stderr);
    let created: Value = serde_json::from_str(&out.stdout).expect("kubectl prints JSON");
    let mut expected = api::object::KubeVirtObject::from_value(vm).expect("a VM");
    expected.apply_defaults();
    let expected = expected.to_value().expect("JSON");
    assert_eq!(created["spec"], expected["spec"]);
}

fn vmi_spec_update_is_refused(run: &Run) {
    let (_, vmi) = common::fixtures()
        .into_iter()
        .find(|(n, _)| n == "vmi-demo.yaml")
        .expect("vmi-demo.yaml manifest");
    let out = run.kubectl_stdin(&["create", "-f", "-"], &vmi);
    assert!(out.ok, "{}", out.stderr);
    let name = vmi["metadata"]["name"].as_str().expect("a name");
    let out = run.kubectl(&[
        "patch",
        "vmi",
        name,
        "--type=merge",
        "-p",
        r#"{"spec":{"domain":{"cpu":{"cores":3}}}}"#,
    ]);
    assert!(!out.ok, "a VMI spec change must be refused");
    assert!(
        out.stderr
            .contains("spec: the spec of a VirtualMachineInstance cannot be changed"),
        "{}",
        out.stderr
    );
    let out = run.kubectl(&["label", "vmi", name, "test=relabelled"]);
    assert!(out.ok, "metadata changes stay allowed: {}", out.stderr);
}

fn discovery_lists_the_subresources(run: &Run) {
    let out = run.kubectl(&["get", "--raw", "/apis/subresources.kubevirt.io/v1"]);
    assert!(out.ok, "{}", out.stderr);
    let list: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let names: Vec<&str> = list["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for expected in [
        "virtualmachineinstances/console",
        "virtualmachineinstances/vnc",
        "virtualmachineinstances/vnc/screenshot",
        "virtualmachineinstances/pause",
        "virtualmachines/start",
        "virtualmachines/migrate",
    ] {
        assert!(names.contains(&expected), "{expected} not in {names:?}");
    }
    // Discovery clients read the group without errors (kubectl fails on a broken one).
    let out = run.kubectl(&["api-resources", "--api-group=subresources.kubevirt.io"]);
    assert!(out.ok, "{}", out.stderr);
    let out = run.kubectl(&["get", "--raw", "/apis/subresources.kubevirt.io/v1/version"]);
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stdout.contains("gitVersion"), "{}", out.stdout);
}

fn console_needs_its_own_permission(run: &Run) {
    let ns = &run.namespace;
    // alice may read VMIs but not open their consoles; bob may open consoles.
    let rbac = format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[
  {{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{{"name":"vmi-reader","namespace":"{ns}"}},
    "rules":[{{"apiGroups":["kubevirt.io"],"resources":["virtualmachineinstances"],"verbs":["get","list"]}}]}},
  {{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{{"name":"console-user","namespace":"{ns}"}},
    "rules":[{{"apiGroups":["subresources.kubevirt.io"],"resources":["virtualmachineinstances/console"],"verbs":["get"]}}]}},
  {{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{{"name":"alice","namespace":"{ns}"}},
    "roleRef":{{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"vmi-reader"}},
    "subjects":[{{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"alice"}}]}},
  {{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{{"name":"bob","namespace":"{ns}"}},
    "roleRef":{{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"console-user"}},
    "subjects":[{{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"bob"}}]}}]}}"#
    );
    let out = run.kubectl_stdin(
        &["apply", "-f", "-"],
        &serde_json::from_str(&rbac).expect("JSON"),
    );
    assert!(out.ok, "{}", out.stderr);
    let path = format!(
        "/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/testvmi/console"
    );

    // Through kube-apiserver (which authorizes aggregated resources first).
    let out = run.kubectl(&["--as=alice", "get", "--raw", &path]);
    assert!(!out.ok);
    assert!(
        out.stderr.contains("Forbidden") || out.stderr.contains("forbidden"),
        "{}",
        out.stderr
    );

    // Straight to virt-api as the front proxy: its own SubjectAccessReview decides.
    let alice = run.as_front_proxy(&path, "alice");
    assert_eq!(alice.code, 403, "{}", alice.body);
    assert!(
        alice
            .body
            .contains("cannot get resource \\\"virtualmachineinstances/console\\\""),
        "{}",
        alice.body
    );
    let bob = run.as_front_proxy(&path, "bob");
    assert_ne!(bob.code, 403, "bob may use the console: {}", bob.body);
    assert_eq!(
        bob.code, 400,
        "a plain GET is not a WebSocket: {}",
        bob.body
    );

    // Without the front proxy's certificate nobody is believed.
    let anonymous = run.without_client_certificate(&path, "bob");
    assert_eq!(anonymous.code, 401, "{}", anonymous.body);
}

fn virtctl_drives_a_vm(run: &Run) {
    let (_, vm) = common::fixtures()
        .into_iter()
        .find(|(n, _)| n == "vm-demo.yaml")
        .expect("vm-demo.yaml manifest");
    let out = run.kubectl_stdin(&["create", "-f", "-"], &vm);
    assert!(out.ok, "{}", out.stderr);
    let strategy = || {
        run.kubectl(&["get", "vm", "vm-demo", "-o", "jsonpath={.spec.runStrategy}"])
            .stdout
    };
    assert_eq!(strategy(), "Halted");

    let out = run.virtctl(&["start", "vm-demo"]);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "VM vm-demo was scheduled to start");
    assert_eq!(strategy(), "Always");

    let out = run.virtctl(&["start", "vm-demo"]);
    assert!(!out.ok, "starting an Always VM again is refused");
    assert!(
        out.stderr.contains("Error starting VirtualMachine"),
        "{}",
        out.stderr
    );

    let out = run.virtctl(&["stop", "vm-demo"]);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "VM vm-demo was scheduled to stop");
    assert_eq!(strategy(), "Halted");

    let out = run.virtctl(&["restart", "vm-demo"]);
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("Halted does not support manual restart"),
        "{}",
        out.stderr
    );

    let out = run.virtctl(&["pause", "vmi", "no-such-vmi"]);
    assert!(!out.ok);
    assert!(out.stderr.contains("not found"), "{}", out.stderr);

    let out = run.virtctl(&["version"]);
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stdout.contains("Server Version"), "{}", out.stdout);
}

fn console_is_relayed_through_kube_apiserver(run: &Run) {
    use std::io::{Read, Write};

    let node = "virt-api-test-no-such-node";
    // The handler Pod virt-api looks up: never run (its node does not exist), its status
    // pointing at the fake handler on the host.
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "fake-virt-handler", "labels": {"kubevirt.io": "virt-handler"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "none"}]},
    });
    let out = run.kubectl_stdin(&["create", "-f", "-"], &pod);
    assert!(out.ok, "{}", out.stderr);
    let out = run.kubectl(&[
        "patch",
        "pod",
        "fake-virt-handler",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}]}}"#,
    ]);
    assert!(out.ok, "{}", out.stderr);

    let (_, mut vmi) = common::fixtures()
        .into_iter()
        .find(|(n, _)| n == "vmi-demo.yaml")
        .expect("vmi-demo.yaml manifest");
    vmi["metadata"]["name"] = serde_json::json!("console-vmi");
    let out = run.kubectl_stdin(&["create", "-f", "-"], &vmi);
    assert!(out.ok, "{}", out.stderr);
    let status = format!(r#"{{"status":{{"phase":"Running","nodeName":"{node}"}}}}"#);
    let out = run.kubectl(&[
        "patch",
        "vmi",
        "console-vmi",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status,
    ]);
    assert!(out.ok, "{}", out.stderr);

    let uid = run
        .kubectl(&[
            "get",
            "vmi",
            "console-vmi",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .stdout;
    let handler = run.fake_handler(3);

    // pause and unpause go to the handler of the VMI's node.
    let out = run.virtctl(&["pause", "vmi", "console-vmi"]);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "VMI console-vmi was scheduled to pause");
    let paused = r#"{"status":{"conditions":[{"type":"Paused","status":"True"}]}}"#;
    let out = run.kubectl(&[
        "patch",
        "vmi",
        "console-vmi",
        "--subresource=status",
        "--type=merge",
        "-p",
        paused,
    ]);
    assert!(out.ok, "{}", out.stderr);
    let out = run.virtctl(&["pause", "vmi", "console-vmi"]);
    assert!(!out.ok, "pausing a paused VMI is refused");
    assert!(
        out.stderr.contains("VMI is already paused"),
        "{}",
        out.stderr
    );
    let out = run.virtctl(&["unpause", "vmi", "console-vmi"]);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(
        out.stdout.trim(),
        "VMI console-vmi was scheduled to unpause"
    );

    let mut virtctl = run.virtctl_piped(&["console", "console-vmi", "--timeout", "1"]);
    let mut stdin = virtctl.stdin.take().expect("stdin");
    let mut stdout = virtctl.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |text: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !String::from_utf8_lossy(&seen).contains(text) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(chunk) => seen.extend_from_slice(&chunk),
                Err(_) => panic!(
                    "virtctl console never printed {text:?}; it printed {:?}",
                    String::from_utf8_lossy(&seen)
                ),
            }
        }
    };
    wait_for("fake-guest login: ");
    stdin.write_all(b"root\r").expect("typing");
    stdin.flush().expect("typing");
    wait_for("echo:root");
    stdin.write_all(&[0x1d]).expect("Ctrl+]");
    stdin.flush().expect("typing");
    let status = virtctl.wait().expect("virtctl ends");
    let mut stderr = String::new();
    if let Some(mut e) = virtctl.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(
        status.success(),
        "Ctrl+] ends virtctl console cleanly: {stderr}"
    );
    assert!(
        stderr.contains("Successfully connected to console-vmi console"),
        "{stderr}"
    );

    let sessions = handler.join().expect("the fake handler");
    assert!(
        sessions[0]
            .request
            .starts_with(&format!("PUT /v1/vmis/{uid}/pause ")),
        "{}",
        sessions[0].request
    );
    assert!(
        sessions[1]
            .request
            .starts_with(&format!("PUT /v1/vmis/{uid}/unpause ")),
        "{}",
        sessions[1].request
    );
    let session = &sessions[2];
    assert!(
        session
            .request
            .starts_with(&format!("GET /v1/vmis/{uid}/console ")),
        "{}",
        session.request
    );
    assert_eq!(session.typed, b"root\r");
    assert!(
        sessions.iter().all(|s| s.client_certificate),
        "virt-api presents its client certificate to virt-handler"
    );
    let request = session.request.to_ascii_lowercase();
    assert!(request.contains("upgrade: ferrovirt-console"), "{request}");
}
