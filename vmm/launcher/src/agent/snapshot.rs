//! What one poll of the guest agent found, and its translation to the `launcher.v1`
//! `GuestAgent` message (pure).

use contract::proto::v1;
use vmm::agent::{Filesystem, GuestInfo, Interface, OsInfo, Timezone, User};

/// What one poll got; a part is `None` when the agent lacks the command or refused it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Polled {
    pub info: Option<GuestInfo>,
    pub os: Option<OsInfo>,
    pub host_name: Option<String>,
    pub timezone: Option<Timezone>,
    pub users: Option<Vec<User>>,
    pub filesystems: Option<Vec<Filesystem>>,
    pub interfaces: Option<Vec<Interface>>,
    pub fsfreeze_status: Option<String>,
}

/// The report of a poll the agent answered.
pub fn connected(polled: Polled) -> v1::GuestAgent {
    let info = polled.info.unwrap_or_default();
    let timezone = polled.timezone.unwrap_or_default();
    v1::GuestAgent {
        connected: true,
        version: info.version,
        supported_commands: info
            .supported_commands
            .into_iter()
            .map(|c| v1::GuestAgentCommand {
                name: c.name,
                enabled: c.enabled,
            })
            .collect(),
        os: polled.os.map(os_info),
        hostname: polled.host_name.unwrap_or_default(),
        timezone: timezone.zone.unwrap_or_default(),
        timezone_offset_seconds: timezone.offset,
        users: polled
            .users
            .unwrap_or_default()
            .into_iter()
            .map(|u| v1::GuestUser {
                user_name: u.user,
                domain: u.domain.unwrap_or_default(),
                login_time: u.login_time,
            })
            .collect(),
        filesystems: polled
            .filesystems
            .unwrap_or_default()
            .into_iter()
            .map(filesystem)
            .collect(),
        interfaces: polled
            .interfaces
            .unwrap_or_default()
            .into_iter()
            .map(interface)
            .collect(),
        fs_freeze_status: polled.fsfreeze_status.unwrap_or_default(),
        error: String::new(),
    }
}

/// While the guest's filesystems are frozen the agent refuses most commands (they would touch
/// the filesystems): the parts they would give are the last report's, not gone.
pub fn keep_while_frozen(mut report: v1::GuestAgent, last: &v1::GuestAgent) -> v1::GuestAgent {
    if report.fs_freeze_status != "frozen" || !last.connected {
        return report;
    }
    if report.os.is_none() {
        report.os.clone_from(&last.os);
    }
    if report.hostname.is_empty() {
        report.hostname.clone_from(&last.hostname);
    }
    if report.timezone.is_empty() {
        report.timezone.clone_from(&last.timezone);
        report.timezone_offset_seconds = last.timezone_offset_seconds;
    }
    if report.users.is_empty() {
        report.users.clone_from(&last.users);
    }
    if report.filesystems.is_empty() {
        report.filesystems.clone_from(&last.filesystems);
    }
    if report.interfaces.is_empty() {
        report.interfaces.clone_from(&last.interfaces);
    }
    report
}

/// The report when the agent did not answer: why, and nothing else (what an earlier poll said
/// may no longer hold).
pub fn disconnected(error: String) -> v1::GuestAgent {
    v1::GuestAgent {
        connected: false,
        error,
        ..v1::GuestAgent::default()
    }
}

/// What of a report is worth a domain event: all of it but the error text (it changes while
/// the agent stays away, between "no socket" and "no answer") and the bytes used on each
/// filesystem (they change with every write in the guest). GetDomain reports both.
pub fn notable(report: &v1::GuestAgent) -> v1::GuestAgent {
    let mut notable = report.clone();
    notable.error.clear();
    for fs in &mut notable.filesystems {
        fs.used_bytes = 0;
    }
    notable
}

fn os_info(os: OsInfo) -> v1::GuestOsInfo {
    v1::GuestOsInfo {
        name: os.name,
        pretty_name: os.pretty_name,
        id: os.id,
        version: os.version,
        version_id: os.version_id,
        kernel_release: os.kernel_release,
        kernel_version: os.kernel_version,
        machine: os.machine,
    }
}

fn filesystem(fs: Filesystem) -> v1::GuestFilesystem {
    v1::GuestFilesystem {
        disk_name: fs.name,
        mount_point: fs.mountpoint,
        file_system_type: fs.fs_type,
        used_bytes: fs.used_bytes.unwrap_or(0),
        total_bytes: fs.total_bytes.unwrap_or(0),
        disks: fs
            .disk
            .into_iter()
            .map(|d| v1::GuestDisk {
                serial: d.serial.unwrap_or_default(),
                bus_type: d.bus_type,
            })
            .collect(),
    }
}

fn interface(interface: Interface) -> v1::GuestInterface {
    v1::GuestInterface {
        name: interface.name,
        mac: interface.hardware_address.unwrap_or_default(),
        ip_addresses: interface
            .ip_addresses
            .into_iter()
            .map(|a| a.ip_address)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use vmm::agent::{FilesystemDisk, InterfaceAddress, SupportedCommand};

    use super::*;

    fn polled() -> Polled {
        Polled {
            info: Some(GuestInfo {
                version: "7.2.15".into(),
                supported_commands: vec![SupportedCommand {
                    name: "guest-get-osinfo".into(),
                    enabled: true,
                }],
            }),
            os: Some(OsInfo {
                id: "debian".into(),
                version_id: "12".into(),
                kernel_release: "6.1.0-28-cloud-amd64".into(),
                ..OsInfo::default()
            }),
            host_name: Some("vmi-debian".into()),
            timezone: Some(Timezone {
                zone: Some("CET".into()),
                offset: 3600,
            }),
            users: Some(vec![User {
                user: "fvuser".into(),
                domain: None,
                login_time: 1.5,
            }]),
            filesystems: Some(vec![Filesystem {
                name: "vda1".into(),
                mountpoint: "/".into(),
                fs_type: "ext4".into(),
                used_bytes: Some(10),
                total_bytes: None,
                disk: vec![FilesystemDisk {
                    serial: Some("rootdisk".into()),
                    bus_type: "virtio".into(),
                    dev: Some("/dev/vda1".into()),
                }],
            }]),
            interfaces: Some(vec![Interface {
                name: "eth0".into(),
                hardware_address: Some("02:00:00:00:00:01".into()),
                ip_addresses: vec![InterfaceAddress {
                    ip_address: "10.0.2.2".into(),
                    ip_address_type: "ipv4".into(),
                    prefix: 24,
                }],
            }]),
            fsfreeze_status: Some("thawed".into()),
        }
    }

    #[test]
    fn a_poll_becomes_the_report() {
        let report = connected(polled());
        assert!(report.connected && report.error.is_empty());
        assert_eq!(report.version, "7.2.15");
        assert_eq!(report.supported_commands[0].name, "guest-get-osinfo");
        let os = report.os.clone().expect("os");
        assert_eq!((os.id.as_str(), os.version_id.as_str()), ("debian", "12"));
        assert_eq!(
            (report.timezone.as_str(), report.timezone_offset_seconds),
            ("CET", 3600)
        );
        assert_eq!(report.users[0].user_name, "fvuser");
        assert_eq!(report.users[0].login_time, 1.5);
        let fs = &report.filesystems[0];
        assert_eq!(
            (
                fs.disk_name.as_str(),
                fs.mount_point.as_str(),
                fs.file_system_type.as_str()
            ),
            ("vda1", "/", "ext4")
        );
        assert_eq!((fs.used_bytes, fs.total_bytes), (10, 0));
        assert_eq!(fs.disks[0].serial, "rootdisk");
        assert_eq!(report.interfaces[0].mac, "02:00:00:00:00:01");
        assert_eq!(report.interfaces[0].ip_addresses, ["10.0.2.2"]);
        assert_eq!(report.fs_freeze_status, "thawed");
    }

    #[test]
    fn missing_parts_are_empty() {
        let report = connected(Polled::default());
        assert!(report.connected);
        assert_eq!(report.os, None);
        assert!(report.users.is_empty() && report.hostname.is_empty());
        let gone = disconnected("no answer".into());
        assert_eq!(
            gone,
            v1::GuestAgent {
                error: "no answer".into(),
                ..v1::GuestAgent::default()
            }
        );
    }

    #[test]
    fn used_bytes_and_errors_are_not_notable() {
        let before = connected(polled());
        let mut after = polled();
        if let Some(fs) = after.filesystems.as_mut() {
            fs[0].used_bytes = Some(20);
        }
        assert_eq!(notable(&before), notable(&connected(after)));
        assert_eq!(
            notable(&disconnected("a".into())),
            notable(&disconnected("b".into()))
        );
        let mut renamed = polled();
        renamed.host_name = Some("other".into());
        assert_ne!(notable(&before), notable(&connected(renamed)));
        assert_ne!(notable(&before), notable(&disconnected(String::new())));
    }

    #[test]
    fn a_frozen_guest_keeps_what_the_agent_said_before() {
        let before = v1::GuestAgent {
            connected: true,
            hostname: "debian".into(),
            os: Some(v1::GuestOsInfo {
                id: "debian".into(),
                ..Default::default()
            }),
            fs_freeze_status: "thawed".into(),
            ..Default::default()
        };
        let frozen = v1::GuestAgent {
            connected: true,
            fs_freeze_status: "frozen".into(),
            ..Default::default()
        };
        let kept = keep_while_frozen(frozen.clone(), &before);
        assert_eq!(
            (kept.hostname.as_str(), kept.fs_freeze_status.as_str()),
            ("debian", "frozen")
        );
        assert_eq!(kept.os, before.os);
        let thawed = v1::GuestAgent {
            fs_freeze_status: "thawed".into(),
            ..frozen
        };
        assert_eq!(keep_while_frozen(thawed.clone(), &before), thawed);
    }
}
