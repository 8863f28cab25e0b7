//! Writes the release manifests: `ferrovirt-release --output-dir DIR [--namespace NS]
//! [--image-prefix PREFIX] [--tag TAG] [--pull-policy POLICY]` writes
//! `DIR/ferrovirt-operator.yaml` and `DIR/kubevirt-cr.yaml` and prints their paths.

use std::path::PathBuf;
use std::process::ExitCode;

use operator::manifests::{to_yaml, InstallConfig};
use operator::release::{kubevirt_cr, operator_manifest};

const USAGE: &str = "usage: ferrovirt-release --output-dir DIR [--namespace NS] \
                     [--image-prefix PREFIX] [--tag TAG] [--pull-policy POLICY]";

fn main() -> ExitCode {
    let mut cfg = InstallConfig::default();
    let mut dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            eprintln!("ferrovirt-release: {flag} needs a value\n{USAGE}");
            return ExitCode::from(2);
        };
        match flag.as_str() {
            "--output-dir" => dir = Some(PathBuf::from(value)),
            "--namespace" => cfg.namespace = value,
            "--image-prefix" => cfg.image_prefix = value,
            "--tag" => cfg.image_tag = value,
            "--pull-policy" => cfg.image_pull_policy = value,
            other => {
                eprintln!("ferrovirt-release: unknown flag {other}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(dir) = dir else {
        eprintln!("ferrovirt-release: --output-dir is required\n{USAGE}");
        return ExitCode::from(2);
    };
    let files = [
        ("ferrovirt-operator.yaml", to_yaml(&operator_manifest(&cfg))),
        ("kubevirt-cr.yaml", to_yaml(&[kubevirt_cr(&cfg)])),
    ];
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("ferrovirt-release: creating {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for (name, yaml) in files {
        let path = dir.join(name);
        let written = yaml
            .map_err(|e| e.to_string())
            .and_then(|y| std::fs::write(&path, y).map_err(|e| e.to_string()));
        if let Err(e) = written {
            eprintln!("ferrovirt-release: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
