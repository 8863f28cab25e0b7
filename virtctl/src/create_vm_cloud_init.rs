//! `virtctl create vm`'s access credentials (`--access-cred`) and cloud-init volume (`--user`,
//! `--password-file`, `--ssh-key`, `--ga-manage-ssh`, `--cloud-init*`), which access
//! credentials may ask for (the guest agent managing SSH keys, a data source).

use serde_json::{json, Map, Value};

use super::{
    already, split_prefixed_name, Vm, CLOUD_CONFIG, CLOUD_INIT_DISK, CONFIG_DRIVE, NO_CLOUD,
};
use crate::create::{flag_error, Param, Params};

impl Vm<'_> {
    pub(super) fn access_credential(&mut self, text: &str) -> Result<Value, String> {
        const FLAG: &str = "access-cred";
        let fields = [
            ("type", Param::Text),
            ("src", Param::Text),
            ("method", Param::Text),
            ("user", Param::Text),
        ];
        let params = Params::read(FLAG, text, &fields)?;
        let source = params.text("src");
        if source.is_empty() {
            return Err(flag_error(FLAG, "src must be specified"));
        }
        let (namespace, name) = split_prefixed_name(&source)
            .map_err(|e| flag_error(FLAG, format!("src invalid: {e}")))?;
        if !namespace.is_empty() {
            return Err(flag_error(
                FLAG,
                format!("not allowed to specify namespace of secret \"{name}\""),
            ));
        }
        let (kind, method, user) = (
            params.text("type"),
            params.text("method"),
            params.text("user"),
        );
        let secret = json!({ "secret": { "secretName": source } });
        let user_refused = || {
            flag_error(
                FLAG,
                "user cannot be specified with selected access credential type and method",
            )
        };
        match kind.to_lowercase().as_str() {
            "ssh" | "" => {
                let propagation = match method.to_lowercase().as_str() {
                    "ga" | "" => {
                        let user = if user.is_empty() {
                            self.args.user.clone().unwrap_or_default()
                        } else {
                            user
                        };
                        if user.is_empty() {
                            return Err(flag_error(
                                FLAG,
                                "user must be specified with access credential ssh method ga (\"--user\" flag or param \"user\")",
                            ));
                        }
                        // Lets the guest agent write the keys, unless --ga-manage-ssh was given.
                        self.typed.ga_manage_ssh.get_or_insert(true);
                        json!({ "qemuGuestAgent": { "users": [user] } })
                    }
                    m @ (NO_CLOUD | CONFIG_DRIVE) => {
                        if !user.is_empty() {
                            return Err(user_refused());
                        }
                        let current = self.cloud_init.get_or_insert_with(|| m.to_string());
                        if !current.eq_ignore_ascii_case(m) {
                            return Err(flag_error(
                                FLAG,
                                format!(
                                    "method param and value passed to --cloud-init have to match: {m} vs {current}"
                                ),
                            ));
                        }
                        let key = if m == NO_CLOUD { "noCloud" } else { "configDrive" };
                        json!({ key: {} })
                    }
                    _ => {
                        return Err(flag_error(
                            FLAG,
                            format!(
                                "invalid access credentials ssh method \"{method}\", supported values are: ga, nocloud, configdrive"
                            ),
                        ))
                    }
                };
                Ok(json!({
                    "sshPublicKey": { "source": secret, "propagationMethod": propagation }
                }))
            }
            "password" => {
                if !method.is_empty() && !method.eq_ignore_ascii_case("ga") {
                    return Err(flag_error(
                        FLAG,
                        format!(
                            "invalid access credentials password method \"{method}\", supported values are: ga"
                        ),
                    ));
                }
                if !user.is_empty() {
                    return Err(user_refused());
                }
                Ok(json!({
                    "userPassword": {
                        "source": secret,
                        "propagationMethod": { "qemuGuestAgent": {} },
                    }
                }))
            }
            _ => Err(flag_error(
                FLAG,
                format!(
                    "invalid access credential type \"{kind}\", supported values are: ssh, password"
                ),
            )),
        }
    }

    /// The cloud-init user data built from `--user`, `--password-file`, `--ssh-key` and
    /// `--ga-manage-ssh`.
    fn cloud_config(&self) -> Result<String, String> {
        let mut config = CLOUD_CONFIG.to_string();
        if let Some(user) = self.args.user.as_deref().filter(|u| !u.is_empty()) {
            config.push_str(&format!("\nuser: {user}"));
        }
        if let Some(path) = self.args.password_file.as_deref().filter(|p| !p.is_empty()) {
            let data = read_file(path).map_err(|e| flag_error("password-file", e))?;
            let password = String::from_utf8_lossy(&data);
            let password = password.trim();
            if !password.is_empty() {
                config.push_str(&format!(
                    "\npassword: {password}\nchpasswd: {{ expire: False }}"
                ));
            }
        }
        if !self.typed.ssh_keys.is_empty() {
            config.push_str("\nssh_authorized_keys:");
            for key in &self.typed.ssh_keys {
                config.push_str(&format!("\n  - {key}"));
            }
        }
        if self.typed.ga_manage_ssh == Some(true) {
            config.push_str("\nruncmd:\n  - [ setsebool, -P, 'virt_qemu_ga_manage_ssh', 'on' ]");
        }
        Ok(config)
    }

    pub(super) fn cloud_init_volume(&mut self) -> Result<(), String> {
        let args = self.args;
        let data_flags = args.password_file.is_some()
            || !args.ssh_key.is_empty()
            || self.typed.ga_manage_ssh.is_some()
            || args.cloud_init_user_data.is_some()
            || args.cloud_init_network_data.is_some();
        if !data_flags && args.user.is_none() && self.cloud_init.is_none() {
            return Ok(());
        }
        if args.password_file.is_some() {
            self.warnings.push_str(
                "WARNING: --password-file: The password is stored in cleartext in the VM definition!\n",
            );
        }
        if self.volume_exists(CLOUD_INIT_DISK).is_some() {
            return Err(already(CLOUD_INIT_DISK));
        }
        let kind = self.cloud_init.as_deref().unwrap_or(NO_CLOUD);
        let key = match kind.to_lowercase().as_str() {
            NO_CLOUD => "cloudInitNoCloud",
            CONFIG_DRIVE => "cloudInitConfigDrive",
            "none" => {
                if data_flags {
                    self.warnings.push_str(
                        "WARNING: --cloud-init: was set to none, not creating a data source although other cloud-init options were set",
                    );
                }
                return Ok(());
            }
            _ => {
                return Err(flag_error(
                    "cloud-init",
                    format!(
                        "invalid cloud-init data source type \"{kind}\", supported values are: nocloud, configdrive, none"
                    ),
                ))
            }
        };
        let mut source = Map::new();
        let network = args.cloud_init_network_data.as_deref().unwrap_or_default();
        if !network.is_empty() {
            source.insert("networkDataBase64".into(), network.into());
        }
        match args
            .cloud_init_user_data
            .as_deref()
            .filter(|d| !d.is_empty())
        {
            Some(data) => {
                source.insert("userDataBase64".into(), data.into());
            }
            None => {
                let config = self.cloud_config()?;
                // Only the header and no network data: nothing asked for, unless the data
                // source itself was.
                if self.cloud_init.is_none() && config == CLOUD_CONFIG && network.is_empty() {
                    return Ok(());
                }
                source.insert("userData".into(), config.into());
            }
        }
        self.volumes
            .push(json!({ "name": CLOUD_INIT_DISK, key: source }));
        Ok(())
    }
}

/// A file's content; errors as Go's `os.ReadFile` words them (`open PATH: no such file or
/// directory`, `read PATH: is a directory`).
fn read_file(path: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let go_error = |op: &str, e: std::io::Error| {
        let text = e.to_string();
        let text = text.split(" (os error").next().unwrap_or_default();
        let mut chars = text.chars();
        let first = chars.next().map(|c| c.to_lowercase().to_string());
        format!(
            "{op} {path}: {}{}",
            first.unwrap_or_default(),
            chars.as_str()
        )
    };
    let mut file = std::fs::File::open(path).map_err(|e| go_error("open", e))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .map_err(|e| go_error("read", e))?;
    Ok(data)
}
