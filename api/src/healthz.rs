//! `/healthz` as KubeVirt's virt-api, virt-controller and virt-handler answer it: a JSON object
//! with the API server's connectivity and version, and `config-resource-version`, the
//! resourceVersion of the KubeVirt CR whose configuration the component has in force.
//! KubeVirt's functional tests change the KubeVirt CR and then poll every component's
//! `https://<pod>:8443/healthz` until that version is at least the one they wrote.
//!
//! - [`ConfigVersion`]: where a component's answer reads that resourceVersion from.
//! - [`body`]: the answer, pure.
//! - [`answer`] (feature `client`): asks the API server for its version and answers.
//! - [`server`] (feature `healthz-server`): an HTTPS listener on [`PORT`] with a self-signed
//!   certificate, for the components that serve nothing else there (virt-controller and
//!   virt-handler; virt-api answers on its own server).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::version::Info;
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::kubevirt::{in_force, KubeVirt};

#[cfg(feature = "healthz-server")]
pub mod server;

/// The port KubeVirt's components answer `/healthz` on (HTTPS).
pub const PORT: u16 = 8443;

/// The JSON key KubeVirt's tests read.
pub const CONFIG_RESOURCE_VERSION: &str = "config-resource-version";

/// Reports the resourceVersion of the KubeVirt CR whose configuration is in force in this
/// process ("" before any was read, as KubeVirt's). Components that read their configuration
/// from a reflector's store at each use build it with [`ConfigVersion::of_kubevirts`]: what the
/// store holds is what the next use applies, so the store's CR is the one in force.
#[derive(Clone)]
pub struct ConfigVersion(Arc<dyn Fn() -> String + Send + Sync>);

impl ConfigVersion {
    /// From a function that says the resourceVersion in force.
    pub fn new(version: impl Fn() -> String + Send + Sync + 'static) -> Self {
        ConfigVersion(Arc::new(version))
    }

    /// From a function that lists the KubeVirt CRs the component reads its configuration from
    /// (a reflector store's `state`): the resourceVersion of the one [`in_force`] picks.
    pub fn of_kubevirts(
        kubevirts: impl Fn() -> Vec<Arc<KubeVirt>> + Send + Sync + 'static,
    ) -> Self {
        ConfigVersion::new(move || resource_version_in_force(&kubevirts()))
    }

    /// The resourceVersion in force now.
    pub fn get(&self) -> String {
        (self.0)()
    }
}

impl std::fmt::Debug for ConfigVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ConfigVersion").field(&self.get()).finish()
    }
}

/// The resourceVersion of the CR [`in_force`] picks of `kubevirts`, "" without one.
pub fn resource_version_in_force(kubevirts: &[Arc<KubeVirt>]) -> String {
    in_force(kubevirts)
        .and_then(|kv| kv.resource_version())
        .unwrap_or_default()
}

/// The answer, as KubeVirt's `KubeConnectionHealthzFuncFactory` gives it: 200 with
/// `{"apiserver": {"connectivity": "ok", "version": ...}, "config-resource-version": ...}`
/// when the API server answered its version, 500 with `connectivity: failed` and the error
/// otherwise.
pub fn body(apiserver: Result<&Info, &str>, config_resource_version: &str) -> (u16, Value) {
    let (status, apiserver) = match apiserver {
        Ok(version) => (200, json!({"connectivity": "ok", "version": version})),
        Err(error) => (500, json!({"connectivity": "failed", "error": error})),
    };
    (
        status,
        json!({"apiserver": apiserver, CONFIG_RESOURCE_VERSION: config_resource_version}),
    )
}

/// How long the API server may take to answer its version.
pub const APISERVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks the API server for its version and answers (status and JSON body). The configuration's
/// version is read first, so the answer never claims more than was in force when asked.
#[cfg(feature = "client")]
pub async fn answer(client: &kube::Client, config: &ConfigVersion) -> (u16, Vec<u8>) {
    let config_resource_version = config.get();
    let version = match tokio::time::timeout(APISERVER_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(version)) => Ok(version),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no answer from the API server within {APISERVER_TIMEOUT:?}"
        )),
    };
    let (status, value) = body(
        version.as_ref().map_err(String::as_str),
        &config_resource_version,
    );
    (status, value.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::kubevirt::KubeVirtSpec;

    fn kubevirt(name: &str, created: i64, resource_version: &str) -> Arc<KubeVirt> {
        let mut kv = KubeVirt::new(name, KubeVirtSpec::default());
        kv.metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kubevirt".into()),
            resource_version: Some(resource_version.into()),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(created).expect("timestamp"),
            )),
            ..ObjectMeta::default()
        };
        Arc::new(kv)
    }

    fn version() -> Info {
        Info {
            git_version: "v1.36.0".into(),
            major: "1".into(),
            minor: "36".into(),
            ..Info::default()
        }
    }

    #[test]
    fn healthy_answer_has_kubevirts_shape() {
        let (status, value) = body(Ok(&version()), "4711");
        assert_eq!(status, 200);
        assert_eq!(value["config-resource-version"], "4711");
        assert_eq!(value["apiserver"]["connectivity"], "ok");
        assert_eq!(value["apiserver"]["version"]["gitVersion"], "v1.36.0");
        assert_eq!(value["apiserver"]["version"]["major"], "1");
    }

    #[test]
    fn unreachable_apiserver_is_500_and_still_reports_the_config() {
        let (status, value) = body(Err("connection refused"), "12");
        assert_eq!(status, 500);
        assert_eq!(
            value,
            json!({
                "apiserver": {"connectivity": "failed", "error": "connection refused"},
                "config-resource-version": "12",
            })
        );
    }

    #[test]
    fn without_a_kubevirt_the_version_is_an_empty_string() {
        let config = ConfigVersion::of_kubevirts(Vec::new);
        assert_eq!(config.get(), "");
        // Still a string: KubeVirt's tests type-assert it.
        assert!(body(Ok(&version()), &config.get()).1["config-resource-version"].is_string());
    }

    #[test]
    fn the_version_follows_what_the_store_holds() {
        let store = Arc::new(std::sync::Mutex::new(vec![kubevirt("kubevirt", 10, "100")]));
        let read = store.clone();
        let config = ConfigVersion::of_kubevirts(move || {
            read.lock().map(|kvs| kvs.clone()).unwrap_or_default()
        });
        assert_eq!(config.get(), "100");
        if let Ok(mut kvs) = store.lock() {
            *kvs = vec![kubevirt("kubevirt", 10, "101")];
        }
        assert_eq!(config.get(), "101");
    }

    #[test]
    fn the_version_is_that_of_the_cr_in_force_whatever_the_order() {
        let old = kubevirt("kubevirt", 10, "7");
        let new = kubevirt("another", 20, "900");
        assert_eq!(resource_version_in_force(&[new.clone(), old.clone()]), "7");
        assert_eq!(resource_version_in_force(&[old, new]), "7");
    }
}
