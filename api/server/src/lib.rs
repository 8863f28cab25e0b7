//! virt-api: the admission webhooks of every kubevirt.io kind and the aggregated API
//! `subresources.kubevirt.io/v1`, served over HTTPS.
//!
//! - [`admission`]: AdmissionReview in, defaults as a JSON patch or a denial with field paths out.
//! - [`routes`], [`discovery`]: the URL space and the discovery documents of the aggregated API.
//! - [`auth`], [`tls`]: front-proxy authentication and SubjectAccessReview authorization.
//! - [`vm_actions`], [`vmi_actions`]: what each subresource does.
//! - [`handler_client`], [`console`], [`websocket`]: reaching virt-handler, and the console relay.
//! - [`manifests`]: the objects that install virt-api, for the operator and the test harness.
//! - [`options`]: the request bodies, shared with virtctl.
#![forbid(unsafe_code)]

pub mod admission;
pub mod auth;
pub mod console;
pub mod discovery;
pub mod handler_client;
pub mod manifests;
pub mod options;
pub mod routes;
pub mod server;
pub mod status;
pub mod tls;
pub mod vm_actions;
pub mod vmi_actions;
pub mod websocket;

/// The version of this build, answered at `/apis/subresources.kubevirt.io/v1/version` in the
/// shape of KubeVirt's `version.Info`.
pub fn version_info() -> serde_json::Value {
    serde_json::json!({
        "gitVersion": concat!("v", env!("CARGO_PKG_VERSION")),
        "gitCommit": option_env!("FERROVIRT_GIT_COMMIT").unwrap_or(""),
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}
