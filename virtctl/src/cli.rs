//! Command-line arguments and the API call each command makes.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use http::Method;
use virt_api::options::{
    MigrateOptions, PauseOptions, RestartOptions, StartOptions, StopOptions, DRY_RUN_ALL,
};
use virt_api::routes::{subresource_path, Subresource};

#[derive(Parser, Debug)]
#[command(
    name = "virtctl",
    version,
    about = "virtctl controls virtual machine related operations on your kubernetes cluster."
)]
pub struct Cli {
    /// Path to the kubeconfig file to use (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the object (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// Whether `pause`/`unpause` name a VM or a VMI (both act on the VMI of that name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    Vm,
    Vmi,
}

#[derive(Subcommand, Debug, PartialEq, Eq)]
pub enum Command {
    /// Start a virtual machine.
    Start {
        name: String,
        /// Start the VM paused.
        #[arg(long)]
        paused: bool,
        #[arg(long)]
        dry_run: bool,
    },
    /// Stop a virtual machine.
    Stop {
        name: String,
        /// Seconds the guest gets to shut down (needs --force).
        #[arg(long, allow_negative_numbers = true)]
        grace_period: Option<i64>,
        /// Stop at once or with the given grace period, also a VM that is already stopping.
        #[arg(long)]
        force: bool,
        #[arg(long)]
        dry_run: bool,
    },
    /// Restart a virtual machine.
    Restart {
        name: String,
        #[arg(long, allow_negative_numbers = true)]
        grace_period: Option<i64>,
        #[arg(long)]
        force: bool,
        #[arg(long)]
        dry_run: bool,
    },
    /// Pause a virtual machine (vm) or instance (vmi).
    Pause {
        target: Target,
        name: String,
        #[arg(long)]
        dry_run: bool,
    },
    /// Unpause a virtual machine (vm) or instance (vmi).
    Unpause {
        target: Target,
        name: String,
        #[arg(long)]
        dry_run: bool,
    },
    /// Connect to the serial console of a virtual machine instance (exit with Ctrl+]).
    Console {
        name: String,
        /// Minutes to wait for the VMI to be running and its console to be reachable.
        #[arg(long, default_value_t = 5)]
        timeout: u64,
    },
    /// Migrate a virtual machine to another node.
    Migrate {
        name: String,
        #[arg(long)]
        dry_run: bool,
    },
    /// Cancel the migration of a virtual machine that is under way.
    MigrateCancel { name: String },
    /// Soft-reboot a virtual machine instance through its guest agent.
    #[command(name = "soft-reboot", alias = "softreboot")]
    Softreboot { name: String },
    /// Print the guest OS information the guest agent reports.
    Guestosinfo { name: String },
    /// Print the client and server versions.
    Version,
}

/// One call to a subresource and how to report its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiCall {
    pub method: Method,
    pub path: String,
    /// JSON body (PUT), empty for GET.
    pub body: Vec<u8>,
    /// Printed on success (`None`: print the response body).
    pub success: Option<String>,
    /// Put before the server's message on failure.
    pub failure: String,
}

/// A command's arguments that make no sense together.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("Can not set gracePeriod without --force=true")]
    GracePeriodWithoutForce,
    /// KubeVirt's words: `Can not force stop without gracePeriod` (or `restart`).
    #[error("Can not force {0} without gracePeriod")]
    ForceWithoutGracePeriod(&'static str),
}

fn dry_run(flag: bool) -> Vec<String> {
    if flag {
        vec![DRY_RUN_ALL.to_string()]
    } else {
        vec![]
    }
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

fn grace(
    grace_period: Option<i64>,
    force: bool,
    verb: &'static str,
) -> Result<Option<i64>, UsageError> {
    match (grace_period, force) {
        (Some(_), false) => Err(UsageError::GracePeriodWithoutForce),
        (None, true) => Err(UsageError::ForceWithoutGracePeriod(verb)),
        (g, _) => Ok(g),
    }
}

fn kind_word(dry: bool) -> &'static str {
    if dry {
        " (dry run)"
    } else {
        ""
    }
}

/// The call a command makes (`None` for console and version, which do more).
pub fn plan(command: &Command, namespace: &str) -> Result<Option<ApiCall>, UsageError> {
    let put =
        |sub: Subresource, name: &str, body: Vec<u8>, success: String, failure: String| ApiCall {
            method: Method::PUT,
            path: subresource_path(namespace, name, sub),
            body,
            success: Some(success),
            failure,
        };
    let call = match command {
        Command::Start {
            name,
            paused,
            dry_run: dry,
        } => put(
            Subresource::Start,
            name,
            json(&StartOptions {
                paused: *paused,
                dry_run: dry_run(*dry),
                ..Default::default()
            }),
            format!("VM {name} was scheduled to start{}", kind_word(*dry)),
            "Error starting VirtualMachine".into(),
        ),
        Command::Stop {
            name,
            grace_period,
            force,
            dry_run: dry,
        } => put(
            Subresource::Stop,
            name,
            json(&StopOptions {
                grace_period: grace(*grace_period, *force, "stop")?,
                dry_run: dry_run(*dry),
                ..Default::default()
            }),
            format!("VM {name} was scheduled to stop{}", kind_word(*dry)),
            if *force {
                "Error force stopping VirtualMachine,".into()
            } else {
                "Error stopping VirtualMachine".into()
            },
        ),
        Command::Restart {
            name,
            grace_period,
            force,
            dry_run: dry,
        } => put(
            Subresource::Restart,
            name,
            json(&RestartOptions {
                grace_period_seconds: grace(*grace_period, *force, "restart")?,
                dry_run: dry_run(*dry),
                ..Default::default()
            }),
            format!("VM {name} was scheduled to restart{}", kind_word(*dry)),
            if *force {
                "Error restarting VirtualMachine,".into()
            } else {
                "Error restarting VirtualMachine".into()
            },
        ),
        Command::Pause {
            target,
            name,
            dry_run: dry,
        }
        | Command::Unpause {
            target,
            name,
            dry_run: dry,
        } => {
            let pause = matches!(command, Command::Pause { .. });
            let (sub, verb, ing) = if pause {
                (Subresource::Pause, "pause", "pausing")
            } else {
                (Subresource::Unpause, "unpause", "unpausing")
            };
            let kind = match target {
                Target::Vm => ("VM", "VirtualMachine"),
                Target::Vmi => ("VMI", "VirtualMachineInstance"),
            };
            put(
                sub,
                name,
                json(&PauseOptions {
                    dry_run: dry_run(*dry),
                    ..Default::default()
                }),
                format!(
                    "{} {name} was scheduled to {verb}{}",
                    kind.0,
                    kind_word(*dry)
                ),
                format!("Error {ing} {} {name}:", kind.1),
            )
        }
        Command::Migrate { name, dry_run: dry } => put(
            Subresource::Migrate,
            name,
            json(&MigrateOptions {
                dry_run: dry_run(*dry),
                ..Default::default()
            }),
            format!("VM {name} was scheduled to migrate{}", kind_word(*dry)),
            "Error migrating VirtualMachine".into(),
        ),
        Command::Softreboot { name } => put(
            Subresource::SoftReboot,
            name,
            Vec::new(),
            format!("VMI {name} was scheduled to softreboot"),
            format!("Error softrebooting VirtualMachineInstance {name}:"),
        ),
        Command::Guestosinfo { name } => ApiCall {
            method: Method::GET,
            path: subresource_path(namespace, name, Subresource::GuestOsInfo),
            body: Vec::new(),
            success: None,
            failure: "Error getting guestosinfo:".into(),
        },
        Command::Console { .. } | Command::Version | Command::MigrateCancel { .. } => {
            return Ok(None)
        }
    };
    Ok(Some(call))
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
