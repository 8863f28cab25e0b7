//! The guest's SMBIOS system information: the cluster's settings (the KubeVirt CR's
//! `spec.configuration.smbios` over KubeVirt's defaults "KubeVirt", "None" and "KubeVirt",
//! which virt-handler sends with the VMI) and the VMI's `firmware.uuid` and `firmware.serial`,
//! so that `/sys/class/dmi/id/` in the guest reads as it does on KubeVirt.
//!
//! The UUID is `firmware.uuid` when set (a VM's VMI always has one: virt-controller derives it
//! from the VM's name; virt-api refused a malformed one), otherwise the VMI's `metadata.uid`, as
//! KubeVirt's domain UUID is (a uid that is not a UUID, which only a hand-made VMI given to the
//! launcher directly can have, leaves the UUID unset).

use api::kubevirt::SmbiosConfiguration;
use api::VirtualMachineInstance;
use contract::proto::v1::SmbiosSettings;
use vmm::config::SmbiosConfig;

/// The cluster's SMBIOS settings; an empty string is a field left unspecified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSmbios(pub SmbiosSettings);

/// KubeVirt's defaults: what a launcher uses when virt-handler sends no settings.
impl Default for ClusterSmbios {
    fn default() -> Self {
        ClusterSmbios(SmbiosSettings {
            manufacturer: SmbiosConfiguration::DEFAULT_MANUFACTURER.into(),
            product: SmbiosConfiguration::DEFAULT_PRODUCT.into(),
            family: SmbiosConfiguration::DEFAULT_FAMILY.into(),
            ..SmbiosSettings::default()
        })
    }
}

impl From<&SmbiosSettings> for ClusterSmbios {
    fn from(settings: &SmbiosSettings) -> Self {
        ClusterSmbios(settings.clone())
    }
}

fn set(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

/// The SMBIOS config of `vmi` in a cluster with `cluster`'s settings.
pub fn smbios(vmi: &VirtualMachineInstance, cluster: &ClusterSmbios) -> SmbiosConfig {
    let firmware = vmi.spec.domain.firmware.as_ref();
    let field = |value: Option<&Option<String>>| set(value?.as_deref()?);
    let settings = &cluster.0;
    SmbiosConfig {
        uuid: field(firmware.map(|f| &f.uuid)).or_else(|| {
            let uid = vmi.metadata.uid.as_ref();
            uid.filter(|u| contract::smbios::parse_uuid(u).is_some())
                .cloned()
        }),
        serial: field(firmware.map(|f| &f.serial)),
        manufacturer: set(&settings.manufacturer),
        product: set(&settings.product),
        version: set(&settings.version),
        sku: set(&settings.sku),
        family: set(&settings.family),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(firmware: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "v", "uid": "11111111-2222-4333-8444-555555555555"},
            "spec": {"domain": {"devices": {}, "firmware": firmware}}
        }))
        .unwrap()
    }

    #[test]
    fn the_firmware_uuid_and_serial_else_the_vmis_uid() {
        let kubevirt = ClusterSmbios::default();
        let given = smbios(
            &vmi(serde_json::json!({
                "uuid": "5d307ca9-b3ef-428c-8861-06e72d69f223", "serial": "s-1"
            })),
            &kubevirt,
        );
        assert_eq!(
            given.uuid.as_deref(),
            Some("5d307ca9-b3ef-428c-8861-06e72d69f223")
        );
        assert_eq!(given.serial.as_deref(), Some("s-1"));
        assert_eq!(
            (
                given.manufacturer.as_deref(),
                given.product.as_deref(),
                given.family.as_deref(),
                given.version.as_deref(),
                given.sku.as_deref()
            ),
            (Some("KubeVirt"), Some("None"), Some("KubeVirt"), None, None)
        );
        // A clone's emptied fields count as unset.
        let cleared = smbios(
            &vmi(serde_json::json!({"uuid": "", "serial": ""})),
            &kubevirt,
        );
        assert_eq!(
            cleared.uuid.as_deref(),
            Some("11111111-2222-4333-8444-555555555555")
        );
        assert_eq!(cleared.serial, None);
        let mut odd_uid = vmi(serde_json::json!({}));
        odd_uid.metadata.uid = Some("u1".into());
        assert_eq!(smbios(&odd_uid, &kubevirt).uuid, None);
    }

    #[test]
    fn the_clusters_settings_as_virt_handler_sends_them() {
        let cluster = ClusterSmbios::from(&SmbiosSettings {
            manufacturer: "Acme".into(),
            product: String::new(),
            version: "1.2".into(),
            sku: "s-9".into(),
            family: "Rockets".into(),
        });
        let config = smbios(&vmi(serde_json::json!({})), &cluster);
        assert_eq!(config.manufacturer.as_deref(), Some("Acme"));
        assert_eq!(config.product, None, "an empty product is unspecified");
        assert_eq!(config.version.as_deref(), Some("1.2"));
        assert_eq!(config.sku.as_deref(), Some("s-9"));
        assert_eq!(config.family.as_deref(), Some("Rockets"));
    }
}
