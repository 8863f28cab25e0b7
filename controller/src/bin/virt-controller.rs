//! virt-controller: leader election, then the VM and VMI controllers.

use std::process::ExitCode;

use api::healthz::ConfigVersion;
use controller::config::ClusterConfig;
use controller::lease::LeaderLease;

#[tokio::main]
async fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let client = match api::client_metrics::client().await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("virt-controller: no Kubernetes client: {e}");
            return ExitCode::FAILURE;
        }
    };
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "kubevirt".into());
    let identity = std::env::var("POD_NAME")
        .unwrap_or_else(|_| format!("virt-controller-{}", std::process::id()));
    // The configuration and `/healthz` before leader election: KubeVirt's tests ask every
    // replica which KubeVirt CR it has applied.
    let kubevirts = controller::run::watch_kubevirts(client.clone());
    let store = kubevirts.clone();
    api::healthz::server::spawn(
        "virt-controller",
        client.clone(),
        ConfigVersion::of_kubevirts(move || store.state()),
    );
    let lease = LeaderLease::new(client.clone(), &namespace, "virt-controller", &identity);
    lease.acquire().await;
    tokio::spawn(lease.keep());
    tokio::spawn(controller::node::watch_heartbeats(client.clone()));
    controller::metrics::spawn(client.clone());
    controller::run::run_controllers(client, ClusterConfig::from_env(), kubevirts).await;
    ExitCode::SUCCESS
}
