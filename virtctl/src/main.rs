//! virtctl's entry point: parse, run one command, exit 0 on success and 1 with the error on
//! stderr otherwise (as KubeVirt's virtctl does).
#![forbid(unsafe_code)]

use std::time::Duration;

use clap::{CommandFactory, Parser};
use virtctl::cli::{plan, Cli, Command, CreateKind, VncArgs, VncCommand};
use virtctl::client::{self, CallError};
use virtctl::console::{self, SessionEnd};
use virtctl::portforward::{self, PortMapping, Target};
use virtctl::{create, create_vm, expand, ssh, vnc};

/// `virtctl create ...`: prints a manifest; no cluster involved.
fn create(kind: Option<&CreateKind>, namespace: Option<&str>) -> Result<(), String> {
    let suffix = create::random_suffix();
    let manifest = match kind {
        Some(CreateKind::Instancetype(args)) => create::instancetype(args, namespace, &suffix)?,
        Some(CreateKind::Preference(args)) => create::preference(args, namespace, &suffix)?,
        Some(CreateKind::Vm(args)) => {
            let mut warnings = String::new();
            let manifest =
                create_vm::vm(args, namespace, &mut create::random_suffix, &mut warnings);
            eprint!("{warnings}");
            manifest?
        }
        None => {
            // As KubeVirt's virtctl: `create` alone prints its usage.
            let mut command = Cli::command();
            command.build();
            let help = command
                .find_subcommand_mut("create")
                .map(|c| c.render_help().to_string())
                .unwrap_or_default();
            print!("{help}");
            return Ok(());
        }
    };
    print!("{manifest}");
    Ok(())
}

/// This virtctl's path, for ssh's ProxyCommand.
fn self_path() -> Result<std::path::PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("finding virtctl's own path: {e}"))
}

/// Ends virtctl with the exit code of the ssh or scp it ran.
fn exit_with(code: i32) -> Result<(), String> {
    if code == 0 {
        return Ok(());
    }
    std::process::exit(code)
}

async fn run(cli: Cli) -> Result<(), String> {
    // What needs no cluster, or is checked before connecting to one.
    let mut expand_request = None;
    let mut vnc_options = None;
    match &cli.command {
        Command::Create { kind } => return create(kind.as_ref(), cli.namespace.as_deref()),
        Command::Expand(args) => {
            let request = expand::validate(args)?;
            let vm = match &request.source {
                expand::Source::File(path) => Some(expand::read_vm(path)?),
                expand::Source::Vm(_) => None,
            };
            expand_request = Some((request, vm));
        }
        Command::Vnc(args @ VncArgs { command: None, .. }) => {
            vnc_options = Some(vnc::Options::from_args(args, cfg!(target_os = "macos"))?);
        }
        _ => {}
    }
    let streaming = matches!(
        cli.command,
        Command::Console { .. }
            | Command::PortForward { .. }
            | Command::Vnc(VncArgs { command: None, .. })
    );
    let config = client::config(cli.kubeconfig.as_deref(), streaming)
        .await
        .map_err(|e| e.to_string())?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let kube = client::client(config).map_err(|e| e.to_string())?;
    if let Some((request, vm)) = expand_request {
        let call = expand::call(&request.source, &namespace, vm.as_ref());
        let body = client::send(&kube, &call)
            .await
            .map_err(|e| format!("{} {e}", call.failure))?;
        let text =
            expand::render(&body, request.output).map_err(|e| format!("{} {e}", call.failure))?;
        print!("{text}");
        return Ok(());
    }
    match &cli.command {
        Command::Console { name, timeout } => {
            let end = console::run(&kube, &namespace, name, Duration::from_secs(timeout * 60))
                .await
                .map_err(|e| e.to_string())?;
            match end {
                SessionEnd::Escape => Ok(()),
                SessionEnd::Disconnected => Err("websocket: close 1006 (abnormal closure)".into()),
            }
        }
        Command::PortForward {
            stdio,
            address,
            target,
            ports,
        } => {
            let target = Target::parse(target)?;
            let ports = ports
                .iter()
                .map(|p| PortMapping::parse(p))
                .collect::<Result<Vec<_>, _>>()?;
            let namespace = target.namespace.clone().unwrap_or(namespace);
            match (stdio, ports.as_slice()) {
                (true, [port]) => portforward::stdio(&kube, &namespace, &target, port).await,
                (true, _) => Err("--stdio forwards exactly one port".into()),
                (false, _) => {
                    portforward::listen(&kube, &namespace, &target, &ports, address).await
                }
            }
        }
        Command::Ssh {
            destination,
            ssh: args,
            command,
        } => {
            let args = ssh::ssh_args(
                &self_path()?,
                cli.kubeconfig.as_deref(),
                &namespace,
                destination,
                command.as_deref(),
                &args.options()?,
            )?;
            exit_with(ssh::run("ssh", &args)?)
        }
        Command::Scp {
            source,
            destination,
            ssh: args,
            recursive,
        } => {
            let args = ssh::scp_args(
                &self_path()?,
                cli.kubeconfig.as_deref(),
                &namespace,
                source,
                destination,
                *recursive,
                &args.options()?,
            )?;
            exit_with(ssh::run("scp", &args)?)
        }
        Command::Vnc(VncArgs {
            command: Some(VncCommand::Screenshot(args)),
            ..
        }) => {
            let call = plan(&cli.command, &namespace)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "nothing to do".to_string())?;
            let png = client::send_bytes(&kube, &call)
                .await
                .map_err(|e| format!("{} {e}", call.failure))?;
            vnc::write_screenshot(&args.file, &png, &mut std::io::stdout())
        }
        Command::Vnc(VncArgs { name, .. }) => {
            let (Some(name), Some(options)) = (name, &vnc_options) else {
                return Err("vnc: accepts 1 arg(s), received 0".into());
            };
            vnc::run(&kube, &namespace, name, options).await
        }
        Command::MigrateCancel { name } => {
            let said = virtctl::migrate_cancel::run(&kube, &namespace, name).await?;
            println!("{said}");
            Ok(())
        }
        Command::Version => {
            println!(
                "Client Version: version.Info{{GitVersion:\"v{}\", Compiler:\"rustc\", Platform:\"{}/{}\"}}",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH
            );
            let call = virtctl::cli::ApiCall {
                method: http::Method::GET,
                path: "/apis/subresources.kubevirt.io/v1/version".into(),
                body: Vec::new(),
                success: None,
                failure: "Could not get server version:".into(),
            };
            let body = client::send(&kube, &call)
                .await
                .map_err(|e| format!("{} {e}", call.failure))?;
            let info: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            println!(
                "Server Version: version.Info{{GitVersion:{}, GitCommit:{}, Compiler:{}, Platform:{}}}",
                info["gitVersion"], info["gitCommit"], info["compiler"], info["platform"]
            );
            Ok(())
        }
        command => {
            let call = plan(command, &namespace)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "nothing to do".to_string())?;
            match client::send(&kube, &call).await {
                Ok(body) => {
                    match &call.success {
                        Some(message) => println!("{message}"),
                        None => println!("{body}"),
                    }
                    Ok(())
                }
                Err(CallError::Server(message)) => Err(format!("{} {message}", call.failure)),
                Err(e) => Err(format!("{} {e}", call.failure)),
            }
        }
    }
}

#[tokio::main]
async fn main() {
    // Usage errors exit 1, as KubeVirt's virtctl (cobra) does; clap's own would be 2. Help and
    // --version still print and exit 0.
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        let code = if e.use_stderr() { 1 } else { 0 };
        let _ = e.print();
        std::process::exit(code);
    });
    if let Err(message) = run(cli).await {
        eprintln!("{message}");
        std::process::exit(1);
    }
}
