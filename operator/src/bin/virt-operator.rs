//! virt-operator: `virt-operator [--image IMAGE] [--namespace NS]`. Installs Ferrovirt from the
//! KubeVirt CRs of its namespace, with the component images of its own registry and tag: those
//! of `--image`, else of `$VIRT_OPERATOR_IMAGE`, else of the image its own Pod runs
//! (`$POD_NAME` in `$POD_NAMESPACE`), so changing the operator Deployment's image upgrades.
//! Certificate lifetimes come from the CR's `certificateRotateStrategy` (KubeVirt's defaults:
//! CA 168h, certificates 24h).
//!
//! It holds the leader Lease `virt-operator` in its namespace while it runs, as KubeVirt's
//! operator does: one replica reconciles at a time, and an operator that cannot renew its Lease
//! (the API server gone for longer than the Lease lasts) exits and is restarted with fresh
//! connections and watches. Without that, an operator whose API server was killed and came back
//! was seen to reconcile nothing more (its CR's observedGeneration stayed behind, a deleted
//! Service was not put back) until it was restarted by hand.

use std::process::ExitCode;

use controller::lease::LeaderLease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use operator::install::OperatorImage;
use operator::reconcile::{run, Context};

const USAGE: &str = "usage: virt-operator [--image IMAGE] [--namespace NAMESPACE]";

/// The image of the operator's own container, read from its Pod.
async fn own_pod_image(client: &kube::Client, namespace: &str) -> Result<String, String> {
    let pod_name = std::env::var("POD_NAME")
        .map_err(|_| "neither --image, $VIRT_OPERATOR_IMAGE nor $POD_NAME is set".to_string())?;
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(&pod_name)
        .await
        .map_err(|e| format!("reading my Pod {namespace}/{pod_name}: {e}"))?;
    let containers = pod.spec.map(|s| s.containers).unwrap_or_default();
    containers
        .iter()
        .find(|c| c.name == "virt-operator")
        .or(containers.first())
        .and_then(|c| c.image.clone())
        .ok_or_else(|| format!("my Pod {pod_name} has no container image"))
}

#[tokio::main]
async fn main() -> ExitCode {
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("info,kube_runtime=warn"),
    )
    .init();
    let mut image = std::env::var("VIRT_OPERATOR_IMAGE")
        .ok()
        .filter(|s| !s.is_empty());
    let mut namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "kubevirt".into());
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            eprintln!("virt-operator: {flag} needs a value\n{USAGE}");
            return ExitCode::from(2);
        };
        match flag.as_str() {
            "--image" => image = Some(value),
            "--namespace" => namespace = value,
            other => {
                eprintln!("virt-operator: unknown flag {other}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("virt-operator: no Kubernetes client: {e}");
            return ExitCode::FAILURE;
        }
    };
    let image = match image {
        Some(image) => image,
        None => match own_pod_image(&client, &namespace).await {
            Ok(image) => image,
            Err(e) => {
                eprintln!("virt-operator: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let Some(own) = OperatorImage::parse(&image) else {
        eprintln!(
            "virt-operator: image {image:?} has no registry path and tag (REGISTRY/NAME:TAG)"
        );
        return ExitCode::from(2);
    };
    let identity = std::env::var("POD_NAME")
        .unwrap_or_else(|_| format!("virt-operator-{}", std::process::id()));
    let lease = LeaderLease::new(client.clone(), &namespace, "virt-operator", &identity);
    lease.acquire().await;
    tokio::spawn(lease.keep());
    log::info!(
        "virt-operator {image}: installing {}/*:{} into {namespace}",
        own.prefix,
        own.tag
    );
    run(Context::new(client, namespace, own)).await;
    ExitCode::SUCCESS
}
