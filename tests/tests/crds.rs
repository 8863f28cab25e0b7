//! The generated CRDs on a real kube-apiserver: accepted by server-side apply, Established, and
//! published in the OpenAPI v3 document with the descriptions `kubectl explain` shows.

use std::time::Duration;

use ferrovirt_tests::{client, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::Api;

#[tokio::test]
async fn crds_are_accepted_established_and_explained() {
    let client = client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("ferrovirt-tests").force();
    for crd in api::crd::all() {
        let name = crd.metadata.name.clone().expect("CRDs are named");
        crds.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("the API server refused {name}: {e}"));
        wait_for(
            &format!("{name} to be Established"),
            Duration::from_secs(30),
            || async {
                let crd = crds.get(&name).await.ok()?;
                let conditions = crd.status?.conditions?;
                conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            },
        )
        .await;
    }

    let request = http_get("/openapi/v3/apis/kubevirt.io/v1");
    let document: serde_json::Value = client
        .request(request)
        .await
        .expect("OpenAPI v3 of kubevirt.io/v1");
    let schemas = &document["components"]["schemas"];
    // The API server names CRD schemas by the reversed group: io.kubevirt.v1.<Kind>.
    let vm = schemas
        .get("io.kubevirt.v1.VirtualMachine")
        .expect("the VirtualMachine schema is published");
    let domain = &vm["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
        ["properties"]["domain"];
    assert!(
        domain["description"]
            .as_str()
            .is_some_and(|d| d.contains("hardware")),
        "spec.template.spec.domain has its description: {domain}"
    );
    assert!(domain["properties"]["devices"]["properties"]["disks"].is_object());
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path)
        .body(Vec::new())
        .expect("a GET request")
}
