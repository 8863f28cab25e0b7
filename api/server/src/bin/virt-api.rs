//! virt-api: parses flags, reads the requestheader settings from kube-system, and serves.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use api::healthz::ConfigVersion;
use api::KubeVirt;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{reflector, watcher, WatchStreamExt};
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
    /// Directory of the client certificate presented to virt-handler and the CA virt-handler's
    /// certificate must chain to (`tls.crt`, `tls.key`, `ca.crt`: the
    /// `kubevirt-virt-handler-certs` Secret).
    #[arg(long, default_value = virt_api::tls::DEFAULT_HANDLER_CERT_DIR)]
    handler_cert_dir: PathBuf,
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
    #[error("TLS to virt-handler")]
    HandlerTls(#[source] virt_api::tls::TlsConfigError),
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
    let handler_tls = virt_api::tls::handler_client_config(&args.handler_cert_dir)
        .map_err(StartError::HandlerTls)?;
    let privileged_users = if args.privileged_users.is_empty() {
        vec![format!(
            "system:serviceaccount:{}:{}",
            args.handler_namespace,
            virt_api::manifests::NAME
        )]
    } else {
        args.privileged_users
    };
    let kubevirts = watch_kubevirts(client.clone(), &args.handler_namespace);
    let config_version = {
        let kubevirts = kubevirts.clone();
        ConfigVersion::of_kubevirts(move || kubevirts.state())
    };
    let state = Arc::new(ServerState {
        handlers: HandlerClient {
            client: client.clone(),
            namespace: args.handler_namespace,
            port: args.handler_port,
            tls: handler_tls,
        },
        client,
        request_header,
        admission: AdmissionConfig { privileged_users },
        config_version,
        kubevirts: Arc::new(move || kubevirts.state()),
    });
    serve(args.listen, tls, state).await?;
    Ok(())
}

/// Watches the KubeVirt CR of the install namespace in the background, for the resourceVersion
/// `/healthz` reports and the configuration a new VMI's defaults follow.
fn watch_kubevirts(client: Client, namespace: &str) -> reflector::Store<KubeVirt> {
    let (kubevirts, writer) = reflector::store::<KubeVirt>();
    tokio::spawn(
        watcher(
            Api::<KubeVirt>::namespaced(client, namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .for_each(|_| futures::future::ready(())),
    );
    kubevirts
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
