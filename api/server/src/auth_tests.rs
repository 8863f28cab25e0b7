use http::{HeaderMap, HeaderValue};

use super::*;
use crate::routes::Subresource;

fn config() -> RequestHeaderConfig {
    let data = Some(
        [
            (
                "requestheader-client-ca-file",
                "-----BEGIN CERTIFICATE-----\n",
            ),
            ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            (
                "requestheader-extra-headers-prefix",
                r#"["X-Remote-Extra-"]"#,
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    let cm = ConfigMap {
        data,
        ..Default::default()
    };
    RequestHeaderConfig::from_configmap(&cm).unwrap()
}

#[test]
fn configmap_without_ca_is_an_error() {
    let cm = ConfigMap::default();
    assert!(matches!(
        RequestHeaderConfig::from_configmap(&cm),
        Err(RequestHeaderConfigError::NoClientCa)
    ));
}

#[test]
fn user_groups_and_extra_come_from_the_headers() {
    let mut headers = HeaderMap::new();
    headers.insert("x-remote-user", HeaderValue::from_static("alice"));
    headers.append("x-remote-group", HeaderValue::from_static("devs"));
    headers.append(
        "x-remote-group",
        HeaderValue::from_static("system:authenticated"),
    );
    headers.append("x-remote-extra-scopes%2fa", HeaderValue::from_static("x"));
    let user = user_from_headers(&config(), &headers).unwrap();
    assert_eq!(user.name, "alice");
    assert_eq!(user.groups, vec!["devs", "system:authenticated"]);
    assert_eq!(user.extra["scopes/a"], vec!["x"]);
    assert!(user_from_headers(&config(), &HeaderMap::new()).is_none());
}

#[test]
fn allowed_names() {
    let c = config();
    assert!(c.name_allowed(Some("front-proxy-client")));
    assert!(!c.name_allowed(Some("mallory")));
    assert!(!c.name_allowed(None));
    let open = RequestHeaderConfig {
        allowed_names: vec![],
        ..c
    };
    assert!(open.name_allowed(None));
}

#[test]
fn access_review_for_console_is_get_on_the_subresource() {
    let user = User {
        name: "alice".into(),
        groups: vec!["devs".into()],
        extra: Default::default(),
    };
    let request = SubresourceRequest {
        namespace: "ns".into(),
        name: "testvm".into(),
        subresource: Subresource::Console,
    };
    let access = Access::subresource(&request);
    let sar = serde_json::to_value(access_review(&user, &access)).unwrap();
    assert_eq!(
        sar["spec"]["resourceAttributes"],
        serde_json::json!({
            "namespace": "ns", "verb": "get", "group": "subresources.kubevirt.io",
            "version": "v1", "resource": "virtualmachineinstances",
            "subresource": "console", "name": "testvm"
        })
    );
    assert_eq!(sar["spec"]["user"], "alice");
    assert_eq!(sar["spec"]["groups"], serde_json::json!(["devs"]));
    let stop = SubresourceRequest {
        subresource: Subresource::Stop,
        ..request.clone()
    };
    let sar = access_review(&user, &Access::subresource(&stop));
    let attrs = sar.spec.resource_attributes.unwrap();
    assert_eq!(attrs.verb.as_deref(), Some("update"));
    assert_eq!(attrs.resource.as_deref(), Some("virtualmachines"));
    let message = denial_message(&user, &access, None);
    assert!(message.contains("cannot get resource \"virtualmachineinstances/console\""));
}

fn alice() -> User {
    User {
        name: "alice".into(),
        groups: vec!["devs".into()],
        extra: Default::default(),
    }
}

#[test]
fn access_review_for_expand_spec_is_get_on_the_vm_subresource() {
    let request = SubresourceRequest {
        namespace: "ns".into(),
        name: "testvm".into(),
        subresource: Subresource::ExpandSpec,
    };
    let sar =
        serde_json::to_value(access_review(&alice(), &Access::subresource(&request))).unwrap();
    assert_eq!(
        sar["spec"]["resourceAttributes"],
        serde_json::json!({
            "namespace": "ns", "verb": "get", "group": "subresources.kubevirt.io",
            "version": "v1", "resource": "virtualmachines",
            "subresource": "expand-spec", "name": "testvm"
        })
    );
}

#[test]
fn access_review_for_vnc_and_its_screenshot_is_get_on_vnc() {
    for subresource in [Subresource::Vnc, Subresource::VncScreenshot] {
        let request = SubresourceRequest {
            namespace: "ns".into(),
            name: "testvm".into(),
            subresource,
        };
        let sar =
            serde_json::to_value(access_review(&alice(), &Access::subresource(&request))).unwrap();
        assert_eq!(
            sar["spec"]["resourceAttributes"],
            serde_json::json!({
                "namespace": "ns", "verb": "get", "group": "subresources.kubevirt.io",
                "version": "v1", "resource": "virtualmachineinstances",
                "subresource": "vnc", "name": "testvm"
            }),
            "{subresource:?}"
        );
    }
}

#[test]
fn access_review_for_expand_vm_spec_is_update_without_subresource_or_name() {
    let access = Access::expand_vm_spec("ns");
    let sar = serde_json::to_value(access_review(&alice(), &access)).unwrap();
    // No subresource and no name: KubeVirt leaves both empty, so they are absent.
    assert_eq!(
        sar["spec"]["resourceAttributes"],
        serde_json::json!({
            "namespace": "ns", "verb": "update", "group": "subresources.kubevirt.io",
            "version": "v1", "resource": "expand-vm-spec"
        })
    );
    assert_eq!(sar["spec"]["user"], "alice");
    assert_eq!(
        denial_message(&alice(), &access, Some("no RBAC policy matched")),
        "expand-vm-spec.subresources.kubevirt.io is forbidden: User \"alice\" cannot update \
         resource \"expand-vm-spec\" in API group \"subresources.kubevirt.io\" in the namespace \
         \"ns\": no RBAC policy matched"
    );
}

#[test]
fn common_name_of_a_real_certificate() {
    use base64::Engine;
    let der = base64::engine::general_purpose::STANDARD
        .decode(include_str!("testdata/front-proxy-client.b64").trim())
        .unwrap();
    assert_eq!(
        certificate_common_name(&der).as_deref(),
        Some("front-proxy-client")
    );
    assert_eq!(certificate_common_name(b"\x30\x03"), None);
}
