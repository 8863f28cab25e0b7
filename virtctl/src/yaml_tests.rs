//! Expected texts are what KubeVirt's virtctl (v1.9.0-beta.0.1264+d923fdb815cd20) printed for
//! the same values.

use serde_json::json;

use super::*;

/// How a string is written as the value of `k`.
fn scalar(text: &str) -> String {
    let out = to_yaml(&json!({ "k": text }));
    out.strip_prefix("k: ").unwrap_or(&out).to_string()
}

#[test]
fn strings_that_read_back_as_something_else_are_double_quoted() {
    for (text, written) in [
        ("plain", "plain"),
        ("2Gi", "2Gi"),
        ("100m", "100m"),
        ("pc-q35-rhel9.2.0", "pc-q35-rhel9.2.0"),
        (
            "0b5e2f5c-4a1c-4c5e-9a57-1f6f3b0d2a11",
            "0b5e2f5c-4a1c-4c5e-9a57-1f6f3b0d2a11",
        ),
        ("", "\"\""),
        ("yes", "\"yes\""),
        ("on", "\"on\""),
        ("true", "\"true\""),
        ("null", "\"null\""),
        ("~", "\"~\""),
        ("2", "\"2\""),
        ("12345", "\"12345\""),
        ("-1", "\"-1\""),
        ("1.5", "\"1.5\""),
        ("1e5", "\"1e5\""),
        ("010", "\"010\""),
        ("08", "\"08\""),
        ("0x1F", "\"0x1F\""),
        (".inf", "\".inf\""),
        ("2024-01-02", "\"2024-01-02\""),
        ("2024-05-01T10:00:00Z", "\"2024-05-01T10:00:00Z\""),
        ("2024-1-2 10:00:00", "\"2024-1-2 10:00:00\""),
        ("a: b", "'a: b'"),
        ("#x", "'#x'"),
        ("'q'", "'''q'''"),
        ("it's", "it's"),
        ("é ü", "é ü"),
    ] {
        assert_eq!(scalar(text), format!("{written}\n"), "{text:?}");
    }
}

#[test]
fn collections_and_literal_blocks() {
    let user_data = "#cloud-config\npassword: fedora\nruncmd:\n  - dnf install -y nginx && systemctl start nginx\n";
    assert_eq!(
        to_yaml(&json!({
            "metadata": {"labels": {"kubevirt.io/size": "2", "app": "web"}, "generation": 1},
            "spec": {
                "disks": [{"name": "a", "disk": {"bus": "virtio"}}],
                "interfaces": [{"name": "default", "masquerade": {}}],
                "volumes": [{"name": "c", "cloudInitNoCloud": {"userData": user_data}}],
                "empty": [],
                "nothing": null,
            },
            "status": {},
        })),
        "metadata:
  generation: 1
  labels:
    app: web
    kubevirt.io/size: \"2\"
spec:
  disks:
  - disk:
      bus: virtio
    name: a
  empty: []
  interfaces:
  - masquerade: {}
    name: default
  nothing: null
  volumes:
  - cloudInitNoCloud:
      userData: |
        #cloud-config
        password: fedora
        runcmd:
          - dnf install -y nginx && systemctl start nginx
    name: c
status: {}
"
    );
    assert_eq!(to_yaml(&json!({})), "{}\n");
}

#[test]
fn json_is_indented_by_one_space() {
    assert_eq!(
        to_json(&json!({"b": [1, {"x": null}], "a": {}, "c": [], "s": "x"})),
        r#"{
 "a": {},
 "b": [
  1,
  {
   "x": null
  }
 ],
 "c": [],
 "s": "x"
}"#
    );
}
