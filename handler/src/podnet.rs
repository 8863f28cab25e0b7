//! virt-handler's part of the pod network ([`contract::podnet`]): before it asks a launcher to
//! run a VMI with a masquerade interface, it makes the tap device, the gateway address, IPv4
//! forwarding and NAT in the launcher Pod's network namespace, so that the launcher Pod needs
//! neither `CAP_NET_ADMIN` nor the unsafe sysctl `net.ipv4.ip_forward`.
//!
//! The launcher is found by its socket: `SO_PEERCRED` of a connection to it gives its PID on
//! the host (virt-handler runs with `hostPID`) and its user, who owns the tap. Two commands run
//! through `nsenter` (busybox's, in virt-handler's image) in the launcher's mount and network
//! namespaces, with the launcher image's `ip` and `iptables-restore`; forwarding (and, for a
//! launcher that is not root, the lowest port its user may bind, so that it binds DHCP's) are
//! sysctls of the launcher's network namespace, written through virt-handler's own `/proc` (a
//! Pod's is read-only) by a thread that joins that namespace.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use api::VirtualMachineInstance;
use contract::podnet::{
    self, CommandError, CommandLine, MasqueradePlan, PlanError, DHCP_SERVER_PORT,
    IP_FORWARD_SYSCTL, TAP_DEVICE, UNPRIVILEGED_PORT_SYSCTL,
};
use kube::ResourceExt;

/// Why the launcher's pod network could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PodNetError {
    #[error("cannot find the launcher's process through {0}")]
    Peer(PathBuf, #[source] std::io::Error),
    #[error("in the launcher's namespaces (nsenter: busybox in virt-handler's image)")]
    Command(#[from] CommandError),
    #[error("setting the sysctls of the launcher's network namespace")]
    Sysctl(#[source] std::io::Error),
}

/// The launcher process serving `socket`: (host PID, user ID).
pub fn launcher_process(socket: &Path) -> Result<(u32, u32), PodNetError> {
    let stream =
        UnixStream::connect(socket).map_err(|e| PodNetError::Peer(socket.to_path_buf(), e))?;
    let cred = rustix::net::sockopt::socket_peercred(&stream)
        .map_err(|e| PodNetError::Peer(socket.to_path_buf(), e.into()))?;
    Ok((cred.pid.as_raw_nonzero().get() as u32, cred.uid.as_raw()))
}

/// `command` run in process `pid`'s network namespace, and in its mount namespace too when
/// `mount` (to use the launcher image's programs), by `nsenter`.
pub fn in_namespaces(pid: u32, mount: bool, command: &CommandLine) -> CommandLine {
    let mut nsenter = vec![
        "nsenter".to_string(),
        "-t".into(),
        pid.to_string(),
        "-n".into(),
    ];
    if mount {
        nsenter.push("-m".into());
    }
    nsenter.push("--".into());
    command.run_by(nsenter)
}

/// The sysctls of the launcher's network namespace: IPv4 forwarding and, for a launcher that is
/// not root, the lowest port its user may bind, so that it binds DHCP's (ports from it up are no
/// longer reserved to root in the Pod's network namespace, as KubeVirt's non-root launcher Pod
/// asks with the safe sysctl; virt-handler sets it, so the Pod asks for none).
pub fn namespace_sysctls(uid: u32) -> Vec<(&'static str, String)> {
    let mut settings = vec![(IP_FORWARD_SYSCTL, "1".to_string())];
    if uid != 0 {
        settings.push((UNPRIVILEGED_PORT_SYSCTL, DHCP_SERVER_PORT.to_string()));
    }
    settings
}

/// Writes `settings` in the network namespace of process `pid` without starting a program: from
/// a thread of its own that joins that namespace and then ends (`/proc/sys/net` is the network
/// namespace of the thread that opens it).
pub fn write_sysctls_in<S: AsRef<str> + Send + 'static>(
    pid: u32,
    settings: Vec<(S, String)>,
) -> std::io::Result<()> {
    let namespace = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    let writer = std::thread::Builder::new()
        .name("netns-sysctl".into())
        .spawn(move || -> std::io::Result<()> {
            use std::os::fd::AsFd;
            rustix::thread::move_into_link_name_space(
                namespace.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            for (name, value) in settings {
                let path = format!("/proc/sys/{}", name.as_ref().replace('.', "/"));
                std::fs::write(&path, &value).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("writing {value} to {path}: {e}"))
                })?;
            }
            Ok(())
        })?;
    writer
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The commands that make the tap and NAT of `plan` in the namespaces of launcher `pid` run by
/// `uid` ([`MasqueradePlan::setup_commands`], with the launcher image's programs).
pub fn prepare_commands(plan: &MasqueradePlan, pid: u32, uid: u32) -> Vec<CommandLine> {
    plan.setup_commands(Some(uid))
        .iter()
        .map(|c| in_namespaces(pid, true, c))
        .collect()
}

/// What [`prepare`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Prepared {
    /// The VMI has no masquerade interface on the pod network (or a plan the launcher refuses
    /// with the reason): nothing to do.
    NotNeeded,
    /// The tap was there already (an earlier pass, or a launcher that made its own).
    Already,
    /// Made now.
    Done,
}

/// Prepares the pod network of `vmi` in the namespaces of the launcher serving `socket`, once:
/// a launcher whose network namespace has the tap is left alone. A failed command (or the
/// tap's sysctl) removes the tap again, so that the next pass starts over.
pub fn prepare(vmi: &VirtualMachineInstance, socket: &Path) -> Result<Prepared, PodNetError> {
    let plan = match api::masquerade::plan(vmi, TAP_DEVICE) {
        Ok(plan) => plan,
        Err(PlanError::NoInterface | PlanError::Cidr(_)) => return Ok(Prepared::NotNeeded),
    };
    let (pid, uid) = launcher_process(socket)?;
    let dev = std::fs::read_to_string(format!("/proc/{pid}/net/dev"))
        .map_err(|e| PodNetError::Peer(socket.to_path_buf(), e))?;
    if podnet::lists_interface(&dev, &plan.tap) {
        return Ok(Prepared::Already);
    }
    write_sysctls_in(pid, namespace_sysctls(uid)).map_err(PodNetError::Sysctl)?;
    let remove_tap = || {
        let remove = CommandLine::new(["ip", "link", "del", &plan.tap]);
        let _ = podnet::run_command(&in_namespaces(pid, true, &remove));
    };
    for command in prepare_commands(&plan, pid, uid) {
        if let Err(e) = podnet::run_command(&command) {
            remove_tap();
            return Err(e.into());
        }
    }
    // The tap exists now: it may carry what the Pod's localhost sends to the guest.
    let localnet = vec![(podnet::route_localnet_sysctl(&plan.tap), "1".to_string())];
    if let Err(e) = write_sysctls_in(pid, localnet) {
        remove_tap();
        return Err(PodNetError::Sysctl(e));
    }
    Ok(Prepared::Done)
}

/// [`prepare`] on a blocking thread, logging what it did.
pub async fn prepare_blocking(
    vmi: &VirtualMachineInstance,
    socket: &Path,
) -> Result<Prepared, PodNetError> {
    let (owned, path, name) = (vmi.clone(), socket.to_path_buf(), vmi.name_any());
    let prepared = tokio::task::spawn_blocking(move || prepare(&owned, &path))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
    if prepared == Prepared::Done {
        log::info!("{name}: made {TAP_DEVICE}, its address, forwarding and NAT in the launcher's network namespace");
    }
    Ok(prepared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarding_uses_the_handlers_proc_and_the_rest_the_launchers_programs() {
        let plan = MasqueradePlan::new(
            TAP_DEVICE,
            podnet::DEFAULT_CIDR,
            [2, 0, 0, 0, 0, 1],
            vec![],
            "vm".into(),
        )
        .unwrap();
        let lines: Vec<String> = prepare_commands(&plan, 4242, 107)
            .iter()
            .map(|c| c.argv.join(" "))
            .collect();
        assert_eq!(
            lines,
            [
                "nsenter -t 4242 -n -m -- ip -batch -",
                "nsenter -t 4242 -n -m -- iptables-restore --noflush",
            ]
        );
        let commands = prepare_commands(&plan, 4242, 107);
        assert!(commands[0]
            .stdin
            .starts_with("tuntap add dev tap0 mode tap user 107\n"));
        assert_eq!(commands[1].stdin, plan.setup_commands(None)[1].stdin);
        assert_eq!(
            namespace_sysctls(107),
            [
                ("net.ipv4.ip_forward", "1".to_string()),
                ("net.ipv4.ip_unprivileged_port_start", "67".to_string())
            ]
        );
        // A root launcher binds port 67 anyway.
        assert_eq!(
            namespace_sysctls(0),
            [("net.ipv4.ip_forward", "1".to_string())]
        );
    }

    #[test]
    fn sysctls_of_a_process_that_is_gone_are_refused() {
        let gone = u32::MAX - 1;
        let err = write_sysctls_in(gone, namespace_sysctls(107)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    }

    #[test]
    fn the_launchers_process_is_the_sockets_server() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("launcher.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let (pid, uid) = launcher_process(&socket).unwrap();
        assert_eq!(pid, std::process::id());
        assert_eq!(uid, rustix::process::getuid().as_raw());
        let missing = launcher_process(&dir.path().join("none.sock")).unwrap_err();
        assert!(missing.to_string().contains("none.sock"), "{missing}");
    }

    #[test]
    fn a_vmi_without_masquerade_needs_nothing() {
        let vmi = VirtualMachineInstance::new("v", Default::default());
        let prepared = prepare(&vmi, Path::new("/nonexistent/launcher.sock")).unwrap();
        assert_eq!(prepared, Prepared::NotNeeded);
    }
}
