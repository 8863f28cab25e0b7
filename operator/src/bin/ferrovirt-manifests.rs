//! Prints the install manifests as YAML: `ferrovirt-manifests [--namespace NS]
//! [--image-prefix PREFIX] [--tag TAG] [--pull-policy POLICY]`.

use std::process::ExitCode;

use operator::manifests::{render, to_yaml, InstallConfig};

fn main() -> ExitCode {
    let mut cfg = InstallConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            eprintln!("ferrovirt-manifests: {flag} needs a value");
            return ExitCode::from(2);
        };
        match flag.as_str() {
            "--namespace" => cfg.namespace = value,
            "--image-prefix" => cfg.image_prefix = value,
            "--tag" => cfg.image_tag = value,
            "--pull-policy" => cfg.image_pull_policy = value,
            other => {
                eprintln!("ferrovirt-manifests: unknown flag {other}");
                return ExitCode::from(2);
            }
        }
    }
    match to_yaml(&render(&cfg)) {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferrovirt-manifests: {e}");
            ExitCode::FAILURE
        }
    }
}
