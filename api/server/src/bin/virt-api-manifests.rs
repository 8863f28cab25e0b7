//! Prints the manifests that install virt-api (YAML documents), for the harness and for humans.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use clap::Parser;
use virt_api::manifests::{all, InstallConfig, WebhookTarget};

#[derive(Parser, Debug)]
#[command(
    name = "virt-api-manifests",
    about = "Print virt-api's install manifests as YAML"
)]
struct Args {
    #[arg(long, default_value = "kubevirt")]
    namespace: String,
    #[arg(long, default_value = "registry.k8s.io/ferrovirt/virt-api:latest")]
    image: String,
    /// PEM file of the CA that signed virt-api's serving certificate.
    #[arg(long)]
    ca_bundle: PathBuf,
    /// Point the webhooks at this URL base instead of the virt-api Service.
    #[arg(long)]
    webhook_url: Option<String>,
}

fn main() {
    let args = Args::parse();
    let ca_bundle = match std::fs::read(&args.ca_bundle) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("reading {}: {e}", args.ca_bundle.display());
            std::process::exit(1);
        }
    };
    let config = InstallConfig {
        namespace: args.namespace,
        image: args.image,
        ca_bundle,
        webhook_target: args
            .webhook_url
            .map_or(WebhookTarget::Service, WebhookTarget::Url),
    };
    let objects = match all(&config) {
        Ok(objects) => objects,
        Err(e) => {
            eprintln!("encoding the manifests: {e}");
            std::process::exit(1);
        }
    };
    for object in objects {
        match serde_yaml::to_string(&object) {
            Ok(text) => print!("---\n{text}"),
            Err(e) => {
                eprintln!("encoding YAML: {e}");
                std::process::exit(1);
            }
        }
    }
}
