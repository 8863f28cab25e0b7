//! The guest agent's subresources: what the launcher last heard from the guest agent
//! (`Domain.guest_agent`), in KubeVirt's JSON types:
//!
//! - `guestosinfo`: `v1.VirtualMachineInstanceGuestAgentInfo` (agent version and commands,
//!   hostname, OS, timezone, users, filesystems, freeze status);
//! - `userlist`: `v1.VirtualMachineInstanceGuestOSUserList`;
//! - `filesystemlist`: `v1.VirtualMachineInstanceFileSystemList`.
//!
//! Without a connected agent each answers 409 with KubeVirt's message.

use contract::proto::v1::{GuestAgent, GuestFilesystem, GuestUser};
use http::StatusCode;
use serde_json::{json, Value};

/// KubeVirt's message when the VMI has no connected guest agent.
pub const NO_AGENT: &str = "VMI does not have guest agent connected";

/// Which guest-agent subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestInfoKind {
    OsInfo,
    UserList,
    FilesystemList,
}

impl GuestInfoKind {
    /// The kind named by the last path segment.
    pub fn parse(name: &str) -> Option<GuestInfoKind> {
        match name {
            "guestosinfo" => Some(GuestInfoKind::OsInfo),
            "userlist" => Some(GuestInfoKind::UserList),
            "filesystemlist" => Some(GuestInfoKind::FilesystemList),
            _ => None,
        }
    }
}

/// The JSON body of `kind` from what the agent said; 409 when it is not connected.
pub fn render(
    kind: GuestInfoKind,
    agent: Option<&GuestAgent>,
) -> Result<Value, (StatusCode, String)> {
    let agent = agent
        .filter(|a| a.connected)
        .ok_or_else(|| (StatusCode::CONFLICT, NO_AGENT.to_string()))?;
    Ok(match kind {
        GuestInfoKind::OsInfo => agent_info(agent),
        GuestInfoKind::UserList => json!({
            "metadata": {},
            "items": agent.users.iter().map(user).collect::<Vec<_>>(),
        }),
        GuestInfoKind::FilesystemList => json!({
            "metadata": {},
            "items": agent.filesystems.iter().map(filesystem).collect::<Vec<_>>(),
        }),
    })
}

fn agent_info(agent: &GuestAgent) -> Value {
    let os = agent.os.clone().unwrap_or_default();
    let mut info = json!({
        "guestAgentVersion": agent.version,
        "supportedCommands": agent
            .supported_commands
            .iter()
            .map(|c| json!({"name": c.name, "enabled": c.enabled}))
            .collect::<Vec<_>>(),
        "hostname": agent.hostname,
        "os": {
            "name": os.name,
            "kernelRelease": os.kernel_release,
            "version": os.version,
            "prettyName": os.pretty_name,
            "versionId": os.version_id,
            "kernelVersion": os.kernel_version,
            "machine": os.machine,
            "id": os.id,
        },
        "timezone": format!("{}, {}", agent.timezone, agent.timezone_offset_seconds),
        "userList": agent.users.iter().map(user).collect::<Vec<_>>(),
        "fsInfo": {"disks": agent.filesystems.iter().map(filesystem).collect::<Vec<_>>()},
    });
    if !agent.fs_freeze_status.is_empty() {
        info["fsFreezeStatus"] = json!(agent.fs_freeze_status);
    }
    info
}

fn user(user: &GuestUser) -> Value {
    let mut value = json!({"userName": user.user_name, "loginTime": user.login_time});
    if !user.domain.is_empty() {
        value["domain"] = json!(user.domain);
    }
    value
}

fn filesystem(fs: &GuestFilesystem) -> Value {
    json!({
        "diskName": fs.disk_name,
        "mountPoint": fs.mount_point,
        "fileSystemType": fs.file_system_type,
        "usedBytes": fs.used_bytes,
        "totalBytes": fs.total_bytes,
        "disk": fs
            .disks
            .iter()
            .map(|d| json!({"serial": d.serial, "busType": d.bus_type}))
            .collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use contract::proto::v1::{GuestAgentCommand, GuestDisk, GuestOsInfo};

    use super::*;

    fn agent() -> GuestAgent {
        GuestAgent {
            connected: true,
            version: "7.2.15".into(),
            supported_commands: vec![GuestAgentCommand {
                name: "guest-get-osinfo".into(),
                enabled: true,
            }],
            os: Some(GuestOsInfo {
                name: "Debian GNU/Linux".into(),
                pretty_name: "Debian GNU/Linux 12 (bookworm)".into(),
                id: "debian".into(),
                version: "12 (bookworm)".into(),
                version_id: "12".into(),
                kernel_release: "6.1.0-28-cloud-amd64".into(),
                kernel_version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1".into(),
                machine: "x86_64".into(),
            }),
            hostname: "debian".into(),
            timezone: "UTC".into(),
            timezone_offset_seconds: 0,
            users: vec![GuestUser {
                user_name: "fvuser".into(),
                domain: String::new(),
                login_time: 1_700_000_000.5,
            }],
            filesystems: vec![GuestFilesystem {
                disk_name: "vda1".into(),
                mount_point: "/".into(),
                file_system_type: "ext4".into(),
                used_bytes: 1 << 30,
                total_bytes: 4 << 30,
                disks: vec![GuestDisk {
                    serial: "rootdisk".into(),
                    bus_type: "virtio".into(),
                }],
            }],
            interfaces: vec![],
            fs_freeze_status: "thawed".into(),
            error: String::new(),
        }
    }

    #[test]
    fn without_a_connected_agent_each_kind_is_a_conflict() {
        let mut gone = agent();
        gone.connected = false;
        for kind in [
            GuestInfoKind::OsInfo,
            GuestInfoKind::UserList,
            GuestInfoKind::FilesystemList,
        ] {
            for agent in [None, Some(&gone)] {
                assert_eq!(
                    render(kind, agent),
                    Err((StatusCode::CONFLICT, NO_AGENT.to_string()))
                );
            }
        }
    }

    #[test]
    fn kubevirts_shapes() {
        let agent = agent();
        let info = render(GuestInfoKind::OsInfo, Some(&agent)).unwrap();
        assert_eq!(info["guestAgentVersion"], "7.2.15");
        assert_eq!(info["os"]["versionId"], "12");
        assert_eq!(info["os"]["prettyName"], "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(info["timezone"], "UTC, 0");
        assert_eq!(info["fsFreezeStatus"], "thawed");
        assert_eq!(info["supportedCommands"][0]["enabled"], true);
        assert_eq!(info["fsInfo"]["disks"][0]["mountPoint"], "/");

        let users = render(GuestInfoKind::UserList, Some(&agent)).unwrap();
        assert_eq!(users["items"][0]["userName"], "fvuser");
        assert_eq!(users["items"][0]["loginTime"], 1_700_000_000.5);
        assert!(users["items"][0].get("domain").is_none());

        let fs = render(GuestInfoKind::FilesystemList, Some(&agent)).unwrap();
        assert_eq!(fs["items"][0]["diskName"], "vda1");
        assert_eq!(fs["items"][0]["fileSystemType"], "ext4");
        assert_eq!(fs["items"][0]["totalBytes"], 4u64 << 30);
        assert_eq!(fs["items"][0]["disk"][0]["serial"], "rootdisk");
        assert_eq!(fs["items"][0]["disk"][0]["busType"], "virtio");
    }

    #[test]
    fn paths() {
        assert_eq!(
            GuestInfoKind::parse("userlist"),
            Some(GuestInfoKind::UserList)
        );
        assert_eq!(GuestInfoKind::parse("console"), None);
    }
}
