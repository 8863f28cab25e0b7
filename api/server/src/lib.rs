//! virt-api: the admission webhooks of every kubevirt.io kind and the aggregated API
//! `subresources.kubevirt.io/v1`, served over HTTPS.
//!
//! - [`admission`]: AdmissionReview in, defaults as a JSON patch or a denial with field paths out.
//! - [`routes`], [`discovery`]: the URL space and the discovery documents of the aggregated API.
//! - [`auth`], [`tls`]: front-proxy authentication and SubjectAccessReview authorization.
//! - [`vm_actions`], [`vmi_actions`]: what each subresource does.
//! - [`expand`]: `expand-vm-spec` and `virtualmachines/{name}/expand-spec`.
//! - [`handler_client`], [`console`], [`websocket`]: reaching virt-handler, and the relay of the
//!   console, VNC and port-forwards.
//! - [`manifests`]: the objects that install virt-api, for the operator and the test harness.
//! - [`options`]: the request bodies, shared with virtctl.
#![forbid(unsafe_code)]

pub mod admission;
pub mod auth;
pub mod console;
pub mod discovery;
pub mod expand;
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
/// shape of KubeVirt's `version.Info`. The commit, its tree state and the build date come from
/// the environment of the build (`hack/images.sh` sets them from git: the date is the commit's,
/// so a rebuild of the same commit answers the same); a build without them says "unknown".
/// `compiler` is the truth, `rustc`: KubeVirt's is Go's `gc`.
pub fn version_info() -> serde_json::Value {
    serde_json::json!({
        "gitVersion": concat!("v", env!("CARGO_PKG_VERSION")),
        "gitCommit": option_env!("FERROVIRT_GIT_COMMIT").unwrap_or("unknown"),
        "gitTreeState": option_env!("FERROVIRT_GIT_TREE_STATE").unwrap_or("unknown"),
        "buildDate": option_env!("FERROVIRT_BUILD_DATE").unwrap_or("unknown"),
        "goVersion": "",
        "compiler": "rustc",
        "platform": platform(std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// `os/arch` as Go and Kubernetes name them (`linux/amd64`, not Rust's `linux/x86_64`).
fn platform(os: &str, arch: &str) -> String {
    let arch = match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("{os}/{arch}")
}

#[cfg(test)]
mod version_tests {
    #[test]
    fn platform_uses_go_architecture_names() {
        assert_eq!(super::platform("linux", "x86_64"), "linux/amd64");
        assert_eq!(super::platform("linux", "aarch64"), "linux/arm64");
        assert_eq!(super::platform("linux", "s390x"), "linux/s390x");
    }
}
