//! virt-api: parses flags, reads the requestheader settings from kube-system, and serves.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use virt_api::admission::AdmissionConfig;
use virt_api::auth::{RequestHeaderConfig, AUTH_CONFIGMAP};
use virt_api::handler_client::{HandlerClient, HANDLER_PORT};
use virt_api::server::{serve, ServerState};

#[derive(Parser, Debug)]
#[command(
    name = "virt-api",
    version,
    about = "KubeVirt-compatible admission webhooks and subresource API"
)]
struct Args {
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "0.0.0.0:8443")]
    listen: SocketAddr,
    /// PEM certificate chain of the serving certificate.
    #[arg(long)]
    tls_cert_file: PathBuf,
    /// PEM private key of the serving certificate.
    #[arg(long)]
    tls_key_file: PathBuf,
    /// Namespace of the virt-handler Pods (and of virt-api's ServiceAccount).
    #[arg(long, default_value = "kubevirt")]
    handler_namespace: String,
    /// Port of virt-handler's subresource server.
    #[arg(long, default_value_t = HANDLER_PORT)]
    handler_port: u16,
    /// File holding the token virt-handler expects.
    #[arg(long)]
    handler_token_file: Option<PathBuf>,
    /// Users allowed to change a VMI's terminationGracePeriodSeconds (virt-api's own account;
    /// default: system:serviceaccount:<handler-namespace>:virt-api).
    #[arg(long = "privileged-user")]
    privileged_users: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("connecting to kube-apiserver")]
    Client(#[source] kube::Error),
    #[error("reading ConfigMap {}/{}", AUTH_CONFIGMAP.0, AUTH_CONFIGMAP.1)]
    AuthConfigMap(#[source] kube::Error),
    #[error("requestheader settings")]
    RequestHeader(#[from] virt_api::auth::RequestHeaderConfigError),
    #[error("TLS")]
    Tls(#[from] virt_api::tls::TlsConfigError),
    #[error("reading the handler token {0}")]
    Token(PathBuf, #[source] std::io::Error),
    #[error("serving")]
    Serve(#[from] virt_api::server::ServeError),
}

fn print_chain(error: &dyn std::error::Error) {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    log::error!("{text}");
}

async fn run(args: Args) -> Result<(), StartError> {
    let client = Client::try_default().await.map_err(StartError::Client)?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), AUTH_CONFIGMAP.0);
    let cm = configmaps
        .get(AUTH_CONFIGMAP.1)
        .await
        .map_err(StartError::AuthConfigMap)?;
    let request_header = RequestHeaderConfig::from_configmap(&cm)?;
    let tls = virt_api::tls::server_config(
        &args.tls_cert_file,
        &args.tls_key_file,
        Some(&request_header.client_ca_pem),
    )?;
    let token = match &args.handler_token_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| StartError::Token(path.clone(), e))?
            .trim()
            .to_string(),
        None => String::new(),
    };
    let privileged_users = if args.privileged_users.is_empty() {
        vec![format!(
            "system:serviceaccount:{}:{}",
            args.handler_namespace,
            virt_api::manifests::NAME
        )]
    } else {
        args.privileged_users
    };
    let state = Arc::new(ServerState {
        handlers: HandlerClient {
            client: client.clone(),
            namespace: args.handler_namespace,
            port: args.handler_port,
            token,
        },
        client,
        request_header,
        admission: AdmissionConfig { privileged_users },
    });
    serve(args.listen, tls, state).await?;
    Ok(())
}

#[tokio::main]
async fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    if let Err(e) = run(args).await {
        print_chain(&e);
        std::process::exit(1);
    }
}
