//! `virtctl ssh` and `virtctl scp`: the local OpenSSH client (`ssh`, `scp`) with a
//! `ProxyCommand` that is this virtctl's `port-forward --stdio=true` to the guest's SSH port,
//! as KubeVirt's virtctl runs them with `--local-ssh` (its default, and the only mode here).
//! ssh and scp see the host as `TYPE.NAME.NAMESPACE` (scp reads a `/` before the `:` as a local
//! path). Keys are the user's: `--identity-file`, or ssh's own defaults; host keys are remembered in
//! `--known-hosts` (KubeVirt's default `~/.ssh/kubevirt_known_hosts`). ssh's exit code is
//! virtctl's.

use std::path::{Path, PathBuf};

use crate::cli::SshArgs;
use crate::portforward::Target;

/// What `ssh` and `scp` share.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SshOptions {
    pub username: Option<String>,
    pub port: u16,
    pub identity_file: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    /// Options given to ssh as they are (`-t "-o StrictHostKeyChecking=no"`).
    pub local_ssh_opts: Vec<String>,
}

impl SshArgs {
    /// The options, or why they cannot be honoured.
    pub fn options(&self) -> Result<SshOptions, String> {
        if !self.local_ssh {
            return Err(
                "--local-ssh=false (virtctl's built-in SSH client) is not supported by ferrovirt's \
                 virtctl: it runs the local ssh client"
                    .into(),
            );
        }
        Ok(SshOptions {
            username: self.username.clone(),
            port: self.port,
            identity_file: self.identity_file.clone(),
            known_hosts: self.known_hosts.clone(),
            local_ssh_opts: self
                .local_ssh_opts
                .iter()
                .flat_map(|o| o.split_whitespace().map(str::to_string).collect::<Vec<_>>())
                .collect(),
        })
    }
}

/// A `[USER@]TYPE/NAME[.NAMESPACE]` destination: the user (from it or `--username`) and target.
pub fn parse_destination(
    text: &str,
    username: Option<&str>,
) -> Result<(Option<String>, Target), String> {
    let (user, target) = match text.split_once('@') {
        Some((user, target)) => (Some(user.to_string()), target),
        None => (username.map(str::to_string), text),
    };
    Ok((user, Target::parse(target)?))
}

/// Single quotes for the shell that runs the ProxyCommand.
fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// The host name ssh and scp are given: `TYPE.NAME.NAMESPACE`, without the `/` of the target,
/// which scp would take for a local path; the ProxyCommand names the target itself.
fn host_alias(target: &Target, namespace: &str) -> String {
    target.display(namespace).replacen('/', ".", 1)
}

/// The `-o` options that make ssh (or scp) reach `target` (`TYPE/NAME.NAMESPACE`) through
/// virtctl.
pub fn proxy_options(
    virtctl: &Path,
    kubeconfig: Option<&Path>,
    target: &str,
    options: &SshOptions,
) -> Vec<String> {
    let mut proxy = vec![quote(&virtctl.to_string_lossy())];
    if let Some(kubeconfig) = kubeconfig {
        proxy.push("--kubeconfig".into());
        proxy.push(quote(&kubeconfig.to_string_lossy()));
    }
    proxy.extend([
        "port-forward".into(),
        "--stdio=true".into(),
        quote(target),
        options.port.to_string(),
    ]);
    let mut args = vec![
        "-o".to_string(),
        format!("ProxyCommand={}", proxy.join(" ")),
    ];
    let known_hosts = options.known_hosts.clone().or_else(|| {
        std::env::var_os("HOME").map(|h| Path::new(&h).join(".ssh/kubevirt_known_hosts"))
    });
    if let Some(known_hosts) = known_hosts {
        args.push("-o".into());
        args.push(format!("UserKnownHostsFile={}", known_hosts.display()));
    }
    if let Some(identity) = &options.identity_file {
        args.push("-i".into());
        args.push(identity.display().to_string());
    }
    args.extend(options.local_ssh_opts.iter().cloned());
    args
}

/// `user@host` or `host`.
fn login(user: Option<&str>, host: &str) -> String {
    match user {
        Some(user) => format!("{user}@{host}"),
        None => host.to_string(),
    }
}

/// The `ssh` command line for `destination` (resolved in `namespace`) running `command`.
pub fn ssh_args(
    virtctl: &Path,
    kubeconfig: Option<&Path>,
    namespace: &str,
    destination: &str,
    command: Option<&str>,
    options: &SshOptions,
) -> Result<Vec<String>, String> {
    let (user, target) = parse_destination(destination, options.username.as_deref())?;
    let namespace = target.namespace.as_deref().unwrap_or(namespace);
    let mut args = proxy_options(virtctl, kubeconfig, &target.display(namespace), options);
    args.push(login(user.as_deref(), &host_alias(&target, namespace)));
    if let Some(command) = command {
        args.push(command.to_string());
    }
    Ok(args)
}

/// The `scp` command line copying `source` to `destination`, one of which is
/// `[USER@]TYPE/NAME[.NAMESPACE]:PATH`.
pub fn scp_args(
    virtctl: &Path,
    kubeconfig: Option<&Path>,
    namespace: &str,
    source: &str,
    destination: &str,
    recursive: bool,
    options: &SshOptions,
) -> Result<Vec<String>, String> {
    // A remote side has a '/' before its ':' (`vmi/name:path`); a local path has none there.
    let remote = |text: &str| {
        let (before, path) = text.split_once(':')?;
        before
            .contains('/')
            .then_some((before.to_string(), path.to_string()))
    };
    let (remote_side, to_guest) = match (remote(source), remote(destination)) {
        (Some(r), None) => (r, false),
        (None, Some(r)) => (r, true),
        _ => {
            return Err("exactly one of source and destination must be a VM or VMI \
                 ([USER@]TYPE/NAME[.NAMESPACE]:PATH)"
                .into())
        }
    };
    let (user, target) = parse_destination(&remote_side.0, options.username.as_deref())?;
    let namespace = target.namespace.as_deref().unwrap_or(namespace);
    let mut args = proxy_options(virtctl, kubeconfig, &target.display(namespace), options);
    if recursive {
        args.push("-r".into());
    }
    let host = host_alias(&target, namespace);
    let guest = format!("{}:{}", login(user.as_deref(), &host), remote_side.1);
    if to_guest {
        args.extend([source.to_string(), guest]);
    } else {
        args.extend([guest, destination.to_string()]);
    }
    Ok(args)
}

/// Runs `program` with `args`; its exit code.
pub fn run(program: &str, args: &[String]) -> Result<i32, String> {
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .map_err(|e| format!("running the local {program} (OpenSSH client): {e}"))?;
    Ok(status.code().unwrap_or(255))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> SshOptions {
        SshOptions {
            port: 22,
            known_hosts: Some("/tmp/kh".into()),
            ..SshOptions::default()
        }
    }

    #[test]
    fn ssh_goes_through_port_forward_stdio() {
        let args = ssh_args(
            Path::new("/usr/bin/virtctl"),
            Some(Path::new("/etc/kc")),
            "default",
            "fvuser@vmi/debian",
            Some("id -un"),
            &SshOptions {
                identity_file: Some("/k/id".into()),
                local_ssh_opts: vec!["-o".into(), "StrictHostKeyChecking=no".into()],
                ..options()
            },
        )
        .unwrap();
        assert_eq!(
            args,
            [
                "-o",
                "ProxyCommand='/usr/bin/virtctl' --kubeconfig '/etc/kc' port-forward --stdio=true 'vmi/debian.default' 22",
                "-o",
                "UserKnownHostsFile=/tmp/kh",
                "-i",
                "/k/id",
                "-o",
                "StrictHostKeyChecking=no",
                "fvuser@vmi.debian.default",
                "id -un"
            ]
        );
        let args = ssh_args(
            Path::new("/v"),
            None,
            "default",
            "vm/x.other",
            None,
            &SshOptions {
                username: Some("root".into()),
                port: 2222,
                ..options()
            },
        )
        .unwrap();
        assert!(args[1].ends_with("'vm/x.other' 2222"), "{args:?}");
        assert_eq!(args.last().unwrap(), "root@vm.x.other");
        assert!(ssh_args(Path::new("/v"), None, "d", "debian", None, &options()).is_err());
    }

    #[test]
    fn scp_has_one_remote_side() {
        let to = scp_args(
            Path::new("/v"),
            None,
            "ns",
            "./file",
            "u@vmi/a:/tmp/file",
            false,
            &options(),
        )
        .unwrap();
        assert_eq!(&to[to.len() - 2..], ["./file", "u@vmi.a.ns:/tmp/file"]);
        let from = scp_args(
            Path::new("/v"),
            None,
            "ns",
            "vm/a.b:x",
            ".",
            true,
            &options(),
        )
        .unwrap();
        assert_eq!(&from[from.len() - 3..], ["-r", "vm.a.b:x", "."]);
        for (source, destination) in [("a", "b"), ("vmi/a:x", "vmi/b:y")] {
            assert!(scp_args(
                Path::new("/v"),
                None,
                "ns",
                source,
                destination,
                false,
                &options()
            )
            .is_err());
        }
    }

    #[test]
    fn quotes_survive_the_shell() {
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}
