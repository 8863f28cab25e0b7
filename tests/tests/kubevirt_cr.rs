//! The KubeVirt CR's spec is the release manifest's (`kubevirt-cr.yaml`, as hack/up.sh
//! installs it): every test and script that changes the CR puts it back. hack/test.sh runs this
//! again as its last step, after the operator's tests and KubeVirt's suite; it holds the cluster
//! lock shared, so it never reads the CR half-way through another test's change.

use ferrovirt_tests::cluster_lock::kubevirt_spec;
use ferrovirt_tests::{ClusterLock, RELEASE_DIR};

#[tokio::test]
async fn the_kubevirt_cr_spec_is_the_release_manifests() {
    let _shared = ClusterLock::shared().await;
    let path = format!("{RELEASE_DIR}/kubevirt-cr.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (hack/up.sh writes it)"));
    let mut manifest: serde_json::Value =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let want = manifest["spec"].take();
    let live = kubevirt_spec().expect("the KubeVirt CR kubevirt/kubevirt (run hack/up.sh)");
    assert_eq!(
        live, want,
        "the KubeVirt CR's spec is not the release manifest's: a test or script left a change\n\
         live:     {live}\nmanifest: {want}"
    );
}
