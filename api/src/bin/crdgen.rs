//! Writes the CRDs of the kubevirt.io kinds as YAML to stdout, or to the file given as argument.

use std::process::ExitCode;

fn main() -> ExitCode {
    let yaml = match api::crd::to_yaml() {
        Ok(yaml) => yaml,
        Err(e) => {
            eprintln!("crdgen: cannot serialise the CRDs: {e}");
            return ExitCode::FAILURE;
        }
    };
    match std::env::args().nth(1) {
        None => {
            use std::io::Write;
            if let Err(e) = std::io::stdout().write_all(yaml.as_bytes()) {
                eprintln!("crdgen: cannot write to stdout: {e}");
                return ExitCode::FAILURE;
            }
        }
        Some(path) => {
            if let Err(e) = std::fs::write(&path, yaml) {
                eprintln!("crdgen: cannot write {path}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
