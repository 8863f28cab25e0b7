//! The typed replies of the guest agent commands the launcher runs, with QGA's field names
//! (`pretty-name`, `used-bytes`, ...). A missing optional field is its default, never an error;
//! a field of the wrong type makes the whole reply an [`super::AgentError::Shape`].
//!
//! The guest writes every byte of them: each type's `bounded` cuts its strings to
//! [`MAX_STRING`] bytes and its lists to [`MAX_LIST`] entries ([`MAX_COMMANDS`] for the agent's
//! command list, which is longer than that in current agents), so that what the launcher keeps
//! and reports stays small whatever the guest sends.

use serde::Deserialize;

/// The longest string kept from a reply, in bytes.
pub const MAX_STRING: usize = 256;
/// The most entries kept from a list in a reply.
pub const MAX_LIST: usize = 64;
/// The most entries kept from `guest-info`'s command list (QEMU 8's agent has about 60).
pub const MAX_COMMANDS: usize = 128;

/// `s` cut to at most `max` bytes, at a character boundary.
pub fn bounded_string(mut s: String, max: usize) -> String {
    if s.len() > max {
        let cut = (0..=max)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s.truncate(cut);
    }
    s
}

fn bound(s: &mut String) {
    *s = bounded_string(std::mem::take(s), MAX_STRING);
}

fn bound_option(s: &mut Option<String>) {
    if let Some(s) = s {
        bound(s);
    }
}

/// `list` cut to `max` entries, each bounded by `each`.
fn bounded_list<T>(mut list: Vec<T>, max: usize, each: impl FnMut(T) -> T) -> Vec<T> {
    list.truncate(max);
    list.into_iter().map(each).collect()
}

/// `guest-info`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GuestInfo {
    pub version: String,
    pub supported_commands: Vec<SupportedCommand>,
}

/// One entry of `guest-info`'s command list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct SupportedCommand {
    pub name: String,
    pub enabled: bool,
}

impl GuestInfo {
    pub fn bounded(mut self) -> GuestInfo {
        bound(&mut self.version);
        self.supported_commands =
            bounded_list(self.supported_commands, MAX_COMMANDS, |mut command| {
                bound(&mut command.name);
                command
            });
        self
    }

    /// Whether the agent has `command` and it is enabled.
    pub fn supports(&self, command: &str) -> bool {
        self.supported_commands
            .iter()
            .any(|c| c.name == command && c.enabled)
    }
}

/// `guest-get-osinfo` (os-release and uname).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct OsInfo {
    pub name: String,
    pub pretty_name: String,
    pub id: String,
    pub version: String,
    pub version_id: String,
    pub kernel_release: String,
    pub kernel_version: String,
    pub machine: String,
}

impl OsInfo {
    pub fn bounded(mut self) -> OsInfo {
        for field in [
            &mut self.name,
            &mut self.pretty_name,
            &mut self.id,
            &mut self.version,
            &mut self.version_id,
            &mut self.kernel_release,
            &mut self.kernel_version,
            &mut self.machine,
        ] {
            bound(field);
        }
        self
    }
}

/// `guest-get-host-name`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub(super) struct HostName {
    host_name: String,
}

impl HostName {
    pub(super) fn bounded(self) -> String {
        bounded_string(self.host_name, MAX_STRING)
    }
}

/// `guest-get-timezone`: the zone's name (not every guest knows it) and its offset from UTC.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Timezone {
    pub zone: Option<String>,
    /// Seconds east of UTC.
    pub offset: i64,
}

impl Timezone {
    pub fn bounded(mut self) -> Timezone {
        bound_option(&mut self.zone);
        self
    }
}

/// One entry of `guest-get-users`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct User {
    pub user: String,
    /// The Windows domain; none on Linux.
    pub domain: Option<String>,
    /// Seconds since the epoch, with a fraction.
    pub login_time: f64,
}

impl User {
    pub fn bounded_list(users: Vec<User>) -> Vec<User> {
        bounded_list(users, MAX_LIST, |mut user| {
            bound(&mut user.user);
            bound_option(&mut user.domain);
            user
        })
    }
}

/// One entry of `guest-get-fsinfo`: a mounted filesystem.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Filesystem {
    /// The device's name in the guest (`vda1`).
    pub name: String,
    pub mountpoint: String,
    #[serde(rename = "type")]
    pub fs_type: String,
    pub used_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
    pub disk: Vec<FilesystemDisk>,
}

/// A disk under a filesystem (`GuestDiskAddress`); the launcher keeps its serial and bus.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct FilesystemDisk {
    pub serial: Option<String>,
    pub bus_type: String,
    /// The device node (`/dev/vda1`).
    pub dev: Option<String>,
}

impl Filesystem {
    pub fn bounded_list(filesystems: Vec<Filesystem>) -> Vec<Filesystem> {
        bounded_list(filesystems, MAX_LIST, |mut fs| {
            bound(&mut fs.name);
            bound(&mut fs.mountpoint);
            bound(&mut fs.fs_type);
            fs.disk = bounded_list(fs.disk, MAX_LIST, |mut disk| {
                bound_option(&mut disk.serial);
                bound(&mut disk.bus_type);
                bound_option(&mut disk.dev);
                disk
            });
            fs
        })
    }
}

/// One entry of `guest-network-get-interfaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Interface {
    pub name: String,
    pub hardware_address: Option<String>,
    pub ip_addresses: Vec<InterfaceAddress>,
}

/// An address of an interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct InterfaceAddress {
    pub ip_address: String,
    /// `ipv4` or `ipv6`.
    pub ip_address_type: String,
    pub prefix: i64,
}

impl Interface {
    pub fn bounded_list(interfaces: Vec<Interface>) -> Vec<Interface> {
        bounded_list(interfaces, MAX_LIST, |mut interface| {
            bound(&mut interface.name);
            bound_option(&mut interface.hardware_address);
            interface.ip_addresses =
                bounded_list(interface.ip_addresses, MAX_LIST, |mut address| {
                    bound(&mut address.ip_address);
                    bound(&mut address.ip_address_type);
                    address
                });
            interface
        })
    }
}
