//! virt-handler: device plugins, node labels and heartbeat, and the VMIs of this node.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let Ok(node) = std::env::var("NODE_NAME") else {
        eprintln!("virt-handler: NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)");
        return ExitCode::FAILURE;
    };
    let client = match api::client_metrics::client().await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("virt-handler: no Kubernetes client: {e}");
            return ExitCode::FAILURE;
        }
    };
    handler::run::run_handler(client, node).await;
    ExitCode::SUCCESS
}
