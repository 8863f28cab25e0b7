//! The guest's SMBIOS system information: `firmware.uuid` and `firmware.serial`, with
//! KubeVirt's default manufacturer, product and family (virt-launcher's `SMBIOS` defaults,
//! "KubeVirt", "None" and "KubeVirt"), so that `/sys/class/dmi/id/` in the guest reads as it
//! does on KubeVirt.
//!
//! The UUID is `firmware.uuid` when set (a VM's VMI always has one: virt-controller derives it
//! from the VM's name; virt-api refused a malformed one), otherwise the VMI's `metadata.uid`, as
//! KubeVirt's domain UUID is (a uid that is not a UUID, which only a hand-made VMI given to the
//! launcher directly can have, leaves the UUID unset).

use api::VirtualMachineInstance;
use vmm::config::SmbiosConfig;

/// KubeVirt's default SMBIOS manufacturer and family.
pub const MANUFACTURER: &str = "KubeVirt";
/// KubeVirt's default SMBIOS product.
pub const PRODUCT: &str = "None";

/// The SMBIOS config of `vmi`.
pub fn smbios(vmi: &VirtualMachineInstance) -> SmbiosConfig {
    let firmware = vmi.spec.domain.firmware.as_ref();
    let set = |value: Option<&String>| value.filter(|v| !v.is_empty()).cloned();
    SmbiosConfig {
        uuid: set(firmware.and_then(|f| f.uuid.as_ref())).or_else(|| {
            let uid = vmi.metadata.uid.as_ref();
            uid.filter(|u| contract::smbios::parse_uuid(u).is_some())
                .cloned()
        }),
        serial: set(firmware.and_then(|f| f.serial.as_ref())),
        manufacturer: Some(MANUFACTURER.into()),
        product: Some(PRODUCT.into()),
        version: None,
        sku: None,
        family: Some(MANUFACTURER.into()),
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
        let given = smbios(&vmi(serde_json::json!({
            "uuid": "5d307ca9-b3ef-428c-8861-06e72d69f223", "serial": "s-1"
        })));
        assert_eq!(
            given.uuid.as_deref(),
            Some("5d307ca9-b3ef-428c-8861-06e72d69f223")
        );
        assert_eq!(given.serial.as_deref(), Some("s-1"));
        assert_eq!(
            (
                given.manufacturer.as_deref(),
                given.product.as_deref(),
                given.family.as_deref()
            ),
            (Some("KubeVirt"), Some("None"), Some("KubeVirt"))
        );
        // A clone's emptied fields count as unset.
        let cleared = smbios(&vmi(serde_json::json!({"uuid": "", "serial": ""})));
        assert_eq!(
            cleared.uuid.as_deref(),
            Some("11111111-2222-4333-8444-555555555555")
        );
        assert_eq!(cleared.serial, None);
        let mut odd_uid = vmi(serde_json::json!({}));
        odd_uid.metadata.uid = Some("u1".into());
        assert_eq!(smbios(&odd_uid).uuid, None);
    }
}
