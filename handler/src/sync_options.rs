//! The options virt-handler gives a launcher with a VMI (`SyncOptions`, for a VMI to start and
//! for a migration target alike): what the KubeVirt CR in force says that the VMI does not.

use api::kubevirt::{KubeVirt, SmbiosConfiguration};
use contract::proto::v1::{SmbiosSettings, SyncOptions};

/// The options of the KubeVirt CR in force (`api::kubevirt::in_force`; KubeVirt's defaults when
/// there is none): `developerConfiguration.useEmulation` and the `smbios` settings.
pub fn sync_options(kubevirt: Option<&KubeVirt>, notify_socket: String) -> SyncOptions {
    let configuration = kubevirt.and_then(|kv| kv.spec.configuration.as_ref());
    let use_emulation = configuration
        .and_then(|c| c.developer_configuration.as_ref())
        .and_then(|d| d.use_emulation)
        == Some(true);
    let smbios = SmbiosConfiguration::in_force(configuration.and_then(|c| c.smbios.as_ref()));
    let text = |value: Option<String>| value.unwrap_or_default();
    SyncOptions {
        use_emulation,
        notify_socket,
        smbios: Some(SmbiosSettings {
            manufacturer: text(smbios.manufacturer),
            product: text(smbios.product),
            version: text(smbios.version),
            sku: text(smbios.sku),
            family: text(smbios.family),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubevirt(configuration: serde_json::Value) -> KubeVirt {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"configuration": configuration}
        }))
        .unwrap()
    }

    #[test]
    fn the_crs_settings_over_kubevirts_defaults() {
        let defaults = sync_options(None, "/n".into());
        assert!(!defaults.use_emulation);
        assert_eq!(defaults.notify_socket, "/n");
        assert_eq!(
            defaults.smbios,
            Some(SmbiosSettings {
                manufacturer: "KubeVirt".into(),
                product: "None".into(),
                family: "KubeVirt".into(),
                ..SmbiosSettings::default()
            })
        );
        let kv = kubevirt(serde_json::json!({
            "developerConfiguration": {"useEmulation": true},
            "smbios": {"manufacturer": "Acme", "sku": "s-1"}
        }));
        let options = sync_options(Some(&kv), String::new());
        assert!(options.use_emulation);
        assert_eq!(
            options.smbios,
            Some(SmbiosSettings {
                manufacturer: "Acme".into(),
                product: "None".into(),
                sku: "s-1".into(),
                family: "KubeVirt".into(),
                ..SmbiosSettings::default()
            })
        );
    }
}
