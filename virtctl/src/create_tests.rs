//! The expected manifests are what KubeVirt's virtctl (v1.9.0-beta.0.1264+d923fdb815cd20)
//! prints for the same flags.

use clap::Parser;

use super::*;
use crate::cli::{Cli, Command, CreateKind};

fn parse(args: &[&str]) -> (CreateKind, Option<String>) {
    let cli = Cli::try_parse_from(std::iter::once("virtctl").chain(args.iter().copied()))
        .expect("parses");
    match cli.command {
        Command::Create { kind: Some(kind) } => (kind, cli.namespace),
        other => panic!("not a create command: {other:?}"),
    }
}

/// What `virtctl ARGS` prints (or the error), with `abcde` as the random part of a name.
fn run(args: &[&str]) -> Result<String, String> {
    let (kind, namespace) = parse(args);
    match &kind {
        CreateKind::Instancetype(a) => instancetype(a, namespace.as_deref(), "abcde"),
        CreateKind::Preference(a) => preference(a, namespace.as_deref(), "abcde"),
        CreateKind::Vm(_) => panic!("create vm is tested in create_vm_tests.rs"),
    }
}

fn ok(args: &[&str]) -> String {
    run(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn err(args: &[&str]) -> String {
    run(args).expect_err("refused")
}

#[test]
fn instancetype_default_is_cluster_wide_with_a_random_name() {
    assert_eq!(
        ok(&["create", "instancetype", "--cpu", "2", "--memory", "256Mi"]),
        "apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterInstancetype
metadata:
  name: clusterinstancetype-abcde
spec:
  cpu:
    guest: 2
  memory:
    guest: 256Mi
"
    );
    let namespaced = ok(&[
        "create",
        "instancetype",
        "--namespaced",
        "--cpu",
        "2",
        "--memory",
        "256Mi",
    ]);
    assert!(namespaced.contains("kind: VirtualMachineInstancetype\n"));
    assert!(namespaced.contains("  name: instancetype-abcde\n"));
    assert!(!namespaced.contains("namespace:"));
}

#[test]
fn instancetype_with_every_flag_matches_kubevirt() {
    assert_eq!(
        ok(&[
            "create",
            "instancetype",
            "--cpu",
            "4",
            "--memory",
            "1.5Gi",
            "--name",
            "big",
            "-n",
            "team",
            "--gpu",
            "name:gpu1,devicename:nvidia.com/TU104GL",
            "--hostdevice",
            "name:hd1,devicename:vendor.com/dev",
            "--iothreadspolicy",
            "shared",
        ]),
        "apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineInstancetype
metadata:
  name: big
  namespace: team
spec:
  cpu:
    guest: 4
  gpus:
  - deviceName: nvidia.com/TU104GL
    name: gpu1
  hostDevices:
  - deviceName: vendor.com/dev
    name: hd1
  ioThreadsPolicy: shared
  memory:
    guest: 1536Mi
"
    );
}

#[test]
fn instancetype_repeated_flags() {
    let out = ok(&[
        "create",
        "instancetype",
        "--cpu",
        "2",
        "--cpu",
        "3",
        "--memory",
        "1000000",
        "--name",
        "a",
        "--name",
        "b",
        "--gpu",
        "name:g1,devicename:d1",
        "--gpu",
        "name:x,devicename:d2,name:g2",
    ]);
    assert_eq!(
        out,
        "apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterInstancetype
metadata:
  name: b
spec:
  cpu:
    guest: 3
  gpus:
  - deviceName: d1
    name: g1
  - deviceName: d2
    name: g2
  memory:
    guest: 1M
"
    );
}

#[test]
fn instancetype_empty_name_and_odd_names() {
    let out = ok(&[
        "create",
        "instancetype",
        "--cpu",
        "2",
        "--memory",
        "1Gi",
        "--name",
        "",
    ]);
    assert!(out.contains("\nmetadata: {}\n"), "{out}");
    let out = ok(&[
        "create",
        "instancetype",
        "--cpu",
        "2",
        "--memory",
        "1Gi",
        "--name",
        "yes",
    ]);
    assert!(out.contains("  name: \"yes\"\n"), "{out}");
    let out = ok(&[
        "create",
        "instancetype",
        "--cpu",
        "2",
        "--memory",
        "100",
        "--name",
        "123",
    ]);
    assert!(out.contains("  name: \"123\"\n"), "{out}");
    assert!(out.contains("    guest: \"100\"\n"), "{out}");
    let out = ok(&[
        "create",
        "instancetype",
        "--cpu",
        "2",
        "--memory",
        "1Gi",
        "--name",
        "a: b",
    ]);
    assert!(out.contains("  name: 'a: b'\n"), "{out}");
}

#[test]
fn instancetype_cpu_is_read_as_go_reads_a_uint32() {
    let guest = |cpu: &str| {
        let out = ok(&[
            "create",
            "instancetype",
            "--cpu",
            cpu,
            "--memory",
            "1Gi",
            "--name",
            "a",
        ]);
        out.lines()
            .skip_while(|l| *l != "  cpu:")
            .nth(1)
            .map(str::to_string)
            .unwrap_or_default()
    };
    assert_eq!(guest("0x10"), "    guest: 16");
    assert_eq!(guest("010"), "    guest: 8");
    assert_eq!(guest("1_0"), "    guest: 10");
    assert_eq!(guest("0b101"), "    guest: 5");
    assert_eq!(guest("4294967295"), "    guest: 4294967295");
    for (cpu, why) in [
        ("-1", "invalid syntax"),
        ("+3", "invalid syntax"),
        ("x", "invalid syntax"),
        ("", "invalid syntax"),
        ("08", "invalid syntax"),
        ("1__0", "invalid syntax"),
        ("_1", "invalid syntax"),
        ("4294967296", "value out of range"),
    ] {
        assert_eq!(
            err(&["create", "instancetype", "--cpu", cpu, "--memory", "1Gi"]),
            format!(
                "invalid argument \"{cpu}\" for \"--cpu\" flag: strconv.ParseUint: parsing \"{cpu}\": {why}"
            )
        );
    }
}

#[test]
fn instancetype_refusals_in_kubevirts_words_and_order() {
    assert_eq!(
        err(&["create", "instancetype"]),
        "required flag(s) \"cpu\", \"memory\" not set"
    );
    assert_eq!(
        err(&["create", "instancetype", "--cpu", "2"]),
        "required flag(s) \"memory\" not set"
    );
    assert_eq!(
        err(&["create", "instancetype", "--memory", "1Gi"]),
        "required flag(s) \"cpu\" not set"
    );
    // A bad --cpu value is reported before missing flags, as pflag parses first.
    assert!(err(&["create", "instancetype", "--cpu", "x"]).starts_with("invalid argument"));
    // Memory is checked before cpu, both before the optional flags.
    assert_eq!(
        err(&[
            "create", "instancetype", "--cpu", "0", "--memory", "bad", "--gpu", "x"
        ]),
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
    assert_eq!(
        err(&["create", "instancetype", "--cpu", "2", "--memory", "1e"]),
        "unable to parse quantity's suffix"
    );
    assert_eq!(
        err(&[
            "create",
            "instancetype",
            "--cpu",
            "0",
            "--memory",
            "1Gi",
            "--gpu",
            "x"
        ]),
        "cpu value must be greater than zero"
    );
    let base = ["create", "instancetype", "--cpu", "2", "--memory", "1Gi"];
    let with = |extra: &[&str]| err(&[&base[..], extra].concat());
    assert_eq!(
        with(&["--iothreadspolicy", "bad"]),
        "failed to parse \"--iothreadspolicy\" flag: IOThread must be of value auto or shared"
    );
    assert_eq!(
        with(&["--iothreadspolicy", ""]),
        "failed to parse \"--iothreadspolicy\" flag: IOThread must be of value auto or shared"
    );
    for (value, message) in [
        ("name:gpu1", "deviceName must be specified"),
        ("devicename:x", "name must be specified"),
        ("name:,devicename:x", "name must be specified"),
        ("name:a,devicename:b,x:y,z:w", "unknown param(s): x:y,z:w"),
        ("nocolon", "params need to have at least one colon: nocolon"),
        (",", "params need to have at least one colon: "),
        ("", "params may not be empty"),
    ] {
        assert_eq!(
            with(&["--gpu", value]),
            format!("failed to parse \"--gpu\" flag: {message}")
        );
        assert_eq!(
            with(&["--hostdevice", value]),
            format!("failed to parse \"--hostdevice\" flag: {message}")
        );
    }
    // A value may hold colons after the first.
    assert!(
        ok(&[&base[..], &["--gpu", "name:a,devicename:b:c"]].concat())
            .contains("  - deviceName: b:c\n    name: a\n")
    );
}

#[test]
fn preference_default_and_namespaced() {
    assert_eq!(
        ok(&["create", "preference"]),
        "apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterPreference
metadata:
  name: clusterpreference-abcde
spec: {}
"
    );
    assert_eq!(
        ok(&["create", "preference", "--namespaced"]),
        "apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachinePreference
metadata:
  name: preference-abcde
spec: {}
"
    );
    assert_eq!(
        ok(&[
            "create",
            "preference",
            "--name",
            "p1",
            "-n",
            "ns",
            "--cpu-topology",
            "spread",
            "--machine-type",
            "q35",
            "--volume-storage-class",
            "local",
        ]),
        "apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachinePreference
metadata:
  name: p1
  namespace: ns
spec:
  cpu:
    preferredCPUTopology: spread
  machine:
    preferredMachineType: q35
  volumes:
    preferredStorageClassName: local
"
    );
}

#[test]
fn preference_empty_values_match_kubevirt() {
    assert_eq!(
        ok(&[
            "create",
            "preference",
            "--name",
            "fedora",
            "--cpu-topology",
            "preferSockets",
            "--machine-type",
            "pc-q35-rhel9.2.0",
            "--volume-storage-class",
            "",
        ]),
        "apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterPreference
metadata:
  name: fedora
spec:
  cpu:
    preferredCPUTopology: preferSockets
  machine:
    preferredMachineType: pc-q35-rhel9.2.0
  volumes: {}
"
    );
}

#[test]
fn preference_cpu_topologies() {
    for topology in CPU_TOPOLOGIES {
        let out = ok(&["create", "preference", "--cpu-topology", topology]);
        assert!(out.contains(&format!("    preferredCPUTopology: {topology}\n")));
    }
    for bad in ["Sockets", "", "numa"] {
        assert_eq!(
            err(&["create", "preference", "--cpu-topology", bad]),
            "failed to parse \"--cpu-topology\" flag: CPU topology must have a value of sockets, cores, threads or spread"
        );
    }
}

#[test]
fn arguments_are_ignored_and_the_namespace_flag_anywhere() {
    let (kind, namespace) = parse(&["-n", "ns", "create", "preference", "x", "y"]);
    assert_eq!(namespace.as_deref(), Some("ns"));
    let CreateKind::Preference(args) = kind else {
        panic!("not a preference");
    };
    assert_eq!(args.args, ["x", "y"]);
    assert!(ok(&["create", "preference", "x", "--namespace", "ns"]).contains("  namespace: ns\n"));
    // An empty namespace is no namespace.
    let out = ok(&["create", "preference", "-n", ""]);
    assert!(
        out.contains("kind: VirtualMachineClusterPreference\n"),
        "{out}"
    );
}

#[test]
fn random_names_use_kubevirts_alphabet() {
    let suffix = random_suffix();
    assert_eq!(suffix.len(), 5);
    assert!(suffix
        .chars()
        .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
}
