//! Command-line arguments and the API call each command makes.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use http::Method;
use virt_api::options::{
    MigrateOptions, PauseOptions, RestartOptions, StartOptions, StopOptions, DRY_RUN_ALL,
};
use virt_api::routes::{subresource_path, Subresource};

#[path = "cli_vm.rs"]
mod vm;
pub use vm::VmArgs;
use vm::{VM_ABOUT, VM_EXAMPLES};

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

/// The options `ssh` and `scp` share, with KubeVirt's names.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct SshArgs {
    /// Set the user name used to log in.
    #[arg(short = 'l', long)]
    pub username: Option<String>,
    /// Specify a port on the VM to send SSH traffic to.
    #[arg(short = 'p', long, default_value_t = 22)]
    pub port: u16,
    /// Specify a path to a private key to use for authentication.
    #[arg(short = 'i', long)]
    pub identity_file: Option<PathBuf>,
    /// Specify a path to the known_hosts file (default ~/.ssh/kubevirt_known_hosts).
    #[arg(long)]
    pub known_hosts: Option<PathBuf>,
    /// Use the local ssh client (the only mode Ferrovirt's virtctl has).
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_value = "true",
          default_missing_value = "true")]
    pub local_ssh: bool,
    /// Additional options for the local ssh client (repeatable).
    #[arg(short = 't', long, allow_hyphen_values = true)]
    pub local_ssh_opts: Vec<String>,
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
    /// Reset a virtual machine instance (a hardware reset: the guest starts over at once, as
    /// after pressing the reset button).
    Reset { name: String },
    /// Print the guest OS information the guest agent reports.
    Guestosinfo { name: String },
    /// Return full list of logged in users on the guest machine.
    Userlist { name: String },
    /// Forward local ports to a virtualmachine or virtualmachineinstance
    /// (`TYPE/NAME[.NAMESPACE] [PROTOCOL/]LOCAL[:REMOTE]...`).
    #[command(name = "port-forward")]
    PortForward {
        /// Use stdin/stdout for the connection (one port only), as ssh's ProxyCommand.
        #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_value = "false",
              default_missing_value = "true")]
        stdio: bool,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        address: String,
        target: String,
        #[arg(required = true)]
        ports: Vec<String>,
    },
    /// Open a SSH connection to a virtual machine instance (`[USER@]TYPE/NAME[.NAMESPACE]`),
    /// through the local ssh client.
    Ssh {
        destination: String,
        #[command(flatten)]
        ssh: SshArgs,
        /// Specify a command to execute in the VM.
        #[arg(short = 'c', long)]
        command: Option<String>,
    },
    /// SCP files from/to a virtual machine instance (one side `[USER@]TYPE/NAME[.NAMESPACE]:PATH`),
    /// through the local scp client.
    Scp {
        source: String,
        destination: String,
        #[command(flatten)]
        ssh: SshArgs,
        /// Recursively copy entire directories.
        #[arg(short = 'r', long)]
        recursive: bool,
    },
    /// Return full list of filesystems available on the guest machine.
    Fslist { name: String },
    /// Print the client and server versions.
    Version,
    /// Open a vnc connection to a virtual machine instance.
    #[command(
        override_usage = "virtctl vnc (VMI) [flags]\n       virtctl vnc [command]",
        after_help = VNC_EXAMPLES,
        subcommand_negates_reqs = true
    )]
    Vnc(VncArgs),
    /// Return the VirtualMachine object with expanded instancetype and preference.
    #[command(
        override_usage = "virtctl expand (VM) [flags]",
        after_help = EXPAND_EXAMPLES,
        args_override_self = true,
        next_display_order = 10
    )]
    Expand(ExpandArgs),
    /// Create a manifest for the specified Kind.
    Create {
        #[command(subcommand)]
        kind: Option<CreateKind>,
    },
}

const EXPAND_EXAMPLES: &str = "Examples:
  #Expand a virtual machine called 'myvm'.
  virtctl expand --vm myvm

  # Expand a virtual machine from file called myvm.yaml.
  virtctl expand --file myvm.yaml

  # Expand a virtual machine from stdin. Press Ctrl+D (Unix) or Ctrl+Z (Windows) to signal the end of input.
  virtctl expand --file -

  # Expand a virtual machine called myvm and display output in json format.
  virtctl expand --vm myvm --output json";

const VNC_EXAMPLES: &str = "Examples:
  # Connect to 'testvmi' via remote-viewer:
   virtctl vnc testvmi";

const SCREENSHOT_EXAMPLES: &str = "Examples:
   # Take a VNC screenshot of 'testvmi' in png format:
   virtctl vnc screenshot testvmi -f screenshot.png

   # Take a VNC screenshot of 'testvmi' in png format and pipe it through \"display\" to show it right away:
   virtctl vnc screenshot testvmi -f - | display";

/// The VNC viewers `--vnc-type` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VncType {
    /// TigerVNC's vncviewer.
    Tiger,
    /// Chicken (macOS).
    Chicken,
    /// RealVNC's VNC Viewer (macOS).
    Real,
    /// virt-viewer's remote-viewer.
    RemoteViewer,
}

/// `virtctl vnc`'s flags (checked, before connecting, by `vnc::Options::from_args`).
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct VncArgs {
    #[command(subcommand)]
    pub command: Option<VncCommand>,
    /// The VMI.
    #[arg(value_name = "VMI", required = true)]
    pub name: Option<String>,
    /// More arguments, which `vnc` refuses (KubeVirt's words: it accepts 1).
    #[arg(hide = true)]
    pub extra: Vec<String>,
    /// --address=127.0.0.1: Setting this will change the listening address of the VNC server. Example: --address=0.0.0.0 will make the server listen on all interfaces.
    #[arg(long, value_name = "string", default_value = "127.0.0.1")]
    pub address: String,
    /// --port=0: Assigning a port value to this will try to run the proxy on the given port if the port is accessible; If unassigned, the proxy will run on a random port
    #[arg(
        long,
        value_name = "int",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub port: u16,
    /// --preserve-session: This option will preserve an existing VNC session instead of dropping it.
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value = "false", default_missing_value = "true")]
    pub preserve_session: bool,
    /// --proxy-only=false: Setting this true will run only the virtctl vnc proxy and show the port where VNC viewers can connect
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value = "false", default_missing_value = "true")]
    pub proxy_only: bool,
    /// --vnc-path=/path/to/vnc: Specify the path to the VNC viewer executable. Optional if the binary is in $PATH
    #[arg(long, value_name = "string")]
    pub vnc_path: Option<PathBuf>,
    /// --vnc-type=tiger: Specify the type of VNC viewer to use (tiger, chicken, real, remote-viewer). If --vnc-path is not provided, the binary is looked up in $PATH
    #[arg(long, value_name = "string", hide_possible_values = true)]
    pub vnc_type: Option<VncType>,
}

/// `virtctl vnc`'s subcommands.
#[derive(Subcommand, Clone, Debug, PartialEq, Eq)]
pub enum VncCommand {
    /// Create a VNC screenshot of a virtual machine instance.
    #[command(override_usage = "virtctl vnc screenshot (VMI) [flags]", after_help = SCREENSHOT_EXAMPLES)]
    Screenshot(ScreenshotArgs),
}

/// `virtctl vnc screenshot`'s flags.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct ScreenshotArgs {
    /// The VMI.
    #[arg(value_name = "VMI")]
    pub name: String,
    /// where to store the VNC screenshot in PNG format. User '-' for stdout
    #[arg(
        short = 'f',
        long,
        value_name = "string",
        required = true,
        allow_hyphen_values = true
    )]
    pub file: String,
    /// move the cursor to wake up the screen in case of screensavers
    #[arg(short = 'm', long, action = clap::ArgAction::Set, num_args = 0..=1,
          require_equals = true, default_value = "false", default_missing_value = "true")]
    pub move_cursor: bool,
}

/// `virtctl expand`'s flags (checked, with KubeVirt's messages, by `expand::validate`).
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpandArgs {
    /// Specify VirtualMachine name that should be expanded. Mutually exclusive with "--file" flag.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub vm: Option<String>,
    /// If present, the Virtual Machine spec in provided file will be expanded. Mutually exclusive with "--vm" flag.
    #[arg(short = 'f', long, value_name = "string", allow_hyphen_values = true)]
    pub file: Option<String>,
    /// Specify a format that will be used to display output.
    #[arg(
        short = 'o',
        long,
        value_name = "string",
        default_value = "yaml",
        allow_hyphen_values = true
    )]
    pub output: String,
    /// Arguments, which expand refuses (it takes flags only).
    #[arg(hide = true)]
    pub args: Vec<String>,
}

/// The manifests `virtctl create` writes.
#[derive(Subcommand, Debug, PartialEq, Eq)]
pub enum CreateKind {
    /// Create VirtualMachineInstancetype or VirtualMachineClusterInstancetype manifest.
    #[command(
        after_help = INSTANCETYPE_EXAMPLES,
        args_override_self = true,
        next_display_order = 10
    )]
    Instancetype(InstancetypeArgs),
    /// Create a VirtualMachinePreference or VirtualMachineClusterPreference manifest.
    #[command(
        after_help = PREFERENCE_EXAMPLES,
        args_override_self = true,
        next_display_order = 10
    )]
    Preference(PreferenceArgs),
    /// Create a VirtualMachine manifest.
    #[command(
        long_about = VM_ABOUT,
        after_help = VM_EXAMPLES,
        args_override_self = true,
        next_display_order = 10
    )]
    Vm(Box<VmArgs>),
}

const INSTANCETYPE_EXAMPLES: &str = "Examples:
  # Create a manifest for a ClusterInstancetype with a random name:
  virtctl create instancetype --cpu 2 --memory 256Mi

  # Create a manifest for a ClusterInstancetype with a specified name:
  virtctl create instancetype --name my-instancetype --cpu 2 --memory 256Mi

  # Create a manifest for a ClusterInstancetype with a specified gpu:
  virtctl create instancetype --cpu 2 --memory 256Mi --gpu name:gpu1,devicename:nvidia

  # Create a manifest for a Instancetype with a specified name and cpu:
  virtctl create instancetype --namespaced --name my-instancetype --cpu 2 --memory 256Mi

  # Create a manifest for a ClusterInstancetype and use it to create a resource with kubectl
  virtctl create instancetype --cpu 2 --memory 256Mi | kubectl create -f -";

const PREFERENCE_EXAMPLES: &str = "Examples:
  # Create a manifest for a ClusterPreference with a random name:
  virtctl create preference

  # Create a manifest for a ClusterPreference with a specified CPU topology:
  virtctl create preference --cpu-topology sockets

  # Create a manifest for a Preference with a specified CPU topology:
  virtctl create preference --cpu-topology sockets --namespaced

  # Create a manifest for a ClusterPreference and use it to create a resource with kubectl
  virtctl create preference --volume-storage-class hostpath-provisioner | kubectl create -f -";

/// `virtctl create instancetype`'s flags. `--cpu` and `--memory` are required, checked (with
/// KubeVirt's messages) by `create::instancetype`.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct InstancetypeArgs {
    /// Specify the count of CPUs of the Instancetype.
    #[arg(long, value_name = "uint32", allow_hyphen_values = true)]
    pub cpu: Option<String>,
    /// Specify the list of vGPUs to passthrough. Can be provided multiple times.
    #[arg(long, value_name = "stringArray", allow_hyphen_values = true)]
    pub gpu: Vec<String>,
    /// Specify list of HostDevices to passthrough. Can be provided multiple times.
    #[arg(long, value_name = "stringArray", allow_hyphen_values = true)]
    pub hostdevice: Vec<String>,
    /// Specify IOThreadsPolicy to be used. Only valid values are "auto" and "shared".
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub iothreadspolicy: Option<String>,
    /// Specify the amount of memory of the Instancetype.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub memory: Option<String>,
    /// Specify the name of the Instancetype.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub name: Option<String>,
    /// Specify if VirtualMachineInstancetype should be created. By default VirtualMachineClusterInstancetype is created.
    #[arg(long)]
    pub namespaced: bool,
    /// Arguments, which KubeVirt's virtctl ignores.
    #[arg(hide = true)]
    pub args: Vec<String>,
}

/// `virtctl create preference`'s flags.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct PreferenceArgs {
    /// Defines the preferred guest visible CPU topology.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub cpu_topology: Option<String>,
    /// Defines the preferred machine type to use.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub machine_type: Option<String>,
    /// Specify the name of the Preference.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub name: Option<String>,
    /// Specify if VirtualMachinePreference should be created. By default VirtualMachineClusterPreference is created.
    #[arg(long)]
    pub namespaced: bool,
    /// Defines the preferred storage class
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub volume_storage_class: Option<String>,
    /// Arguments, which KubeVirt's virtctl ignores.
    #[arg(hide = true)]
    pub args: Vec<String>,
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

/// The call a command makes (`None` for console, vnc (not `vnc screenshot`, a GET of a PNG),
/// migrate-cancel and version, which do more; for expand, whose call `expand::call` makes once
/// the file is read; and for create, which makes none).
pub fn plan(command: &Command, namespace: &str) -> Result<Option<ApiCall>, UsageError> {
    let put =
        |sub: Subresource, name: &str, body: Vec<u8>, success: String, failure: String| ApiCall {
            method: Method::PUT,
            path: subresource_path(namespace, name, sub),
            body,
            success: Some(success),
            failure,
        };
    // The guest agent's answers, printed as they come (JSON).
    let get = |name: &str, sub: Subresource, what: &str| ApiCall {
        method: Method::GET,
        path: subresource_path(namespace, name, sub),
        body: Vec::new(),
        success: None,
        failure: format!("Error getting {what}:"),
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
            format!("VMI {name} was scheduled to soft-reboot"),
            format!("Error soft rebooting VirtualMachineInstance {name}:"),
        ),
        // "reseting" is KubeVirt's spelling.
        Command::Reset { name } => put(
            Subresource::Reset,
            name,
            Vec::new(),
            format!("VMI {name} was scheduled to reset"),
            format!("Error reseting VirtualMachineInstance {name}:"),
        ),
        Command::Guestosinfo { name } => get(name, Subresource::GuestOsInfo, "guestosinfo"),
        Command::Userlist { name } => get(name, Subresource::UserList, "userlist"),
        Command::Fslist { name } => get(name, Subresource::FilesystemList, "filesystemlist"),
        Command::Vnc(VncArgs {
            command: Some(VncCommand::Screenshot(args)),
            ..
        }) => ApiCall {
            method: Method::GET,
            path: format!(
                "{}?moveCursor={}",
                subresource_path(namespace, &args.name, Subresource::VncScreenshot),
                args.move_cursor
            ),
            body: Vec::new(),
            success: None,
            failure: format!("Can't access VMI {}:", args.name),
        },
        Command::Console { .. }
        | Command::Vnc(_)
        | Command::PortForward { .. }
        | Command::Ssh { .. }
        | Command::Scp { .. }
        | Command::Version
        | Command::MigrateCancel { .. }
        | Command::Expand(_)
        | Command::Create { .. } => return Ok(None),
    };
    Ok(Some(call))
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
