//! `spec.volumes` and `spec.networks`: what backs the disks and interfaces of a VMI.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::other::Other;

/// A named volume (`v1.Volume`). Exactly one source is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_disk: Option<ContainerDiskSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init_no_cloud: Option<CloudInitNoCloudSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_disk: Option<EmptyDiskSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    /// Recognised so that it can be refused by name: DataVolumes need CDI, which Ferrovirt does
    /// not have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volume: Option<DataVolumeSource>,
    #[serde(flatten)]
    pub other: Other,
}

/// Which source a volume has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VolumeSourceKind {
    ContainerDisk,
    CloudInitNoCloud,
    EmptyDisk,
    PersistentVolumeClaim,
    DataVolume,
}

impl Volume {
    /// The sources that are set, in field order.
    pub fn sources(&self) -> Vec<VolumeSourceKind> {
        use VolumeSourceKind::*;
        let mut kinds = Vec::new();
        if self.container_disk.is_some() {
            kinds.push(ContainerDisk);
        }
        if self.cloud_init_no_cloud.is_some() {
            kinds.push(CloudInitNoCloud);
        }
        if self.empty_disk.is_some() {
            kinds.push(EmptyDisk);
        }
        if self.persistent_volume_claim.is_some() {
            kinds.push(PersistentVolumeClaim);
        }
        if self.data_volume.is_some() {
            kinds.push(DataVolume);
        }
        kinds
    }
}

/// A disk image inside an OCI image, at `/disk/` (`v1.ContainerDiskSource`). The image is never
/// written: the guest writes to an ephemeral overlay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerDiskSource {
    /// Required; defaulted to empty so that a missing image is refused by validation with its
    /// field path (`containerDisk.image: Required`), not by a deserialization error.
    #[serde(default)]
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secret: Option<String>,
    /// Path of the disk inside the image; the first file under `/disk/` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// A NoCloud cloud-init datasource, given to the guest as a disk labelled `cidata`
/// (`v1.CloudInitNoCloudSource`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudInitNoCloudSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data_base64: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}

/// A sparse, empty scratch disk that lives as long as the VMI (`v1.EmptyDiskSource`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmptyDiskSource {
    pub capacity: Quantity,
    #[serde(flatten)]
    pub other: Other,
}

/// A PVC whose filesystem holds `disk.img` (`v1.PersistentVolumeClaimVolumeSource`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeClaimVolumeSource {
    pub claim_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

/// A CDI DataVolume (`v1.DataVolumeSource`); always refused by validation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeSource {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hotpluggable: Option<bool>,
    #[serde(flatten)]
    pub other: Other,
}

/// A network the VM's interfaces connect to (`v1.Network`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    pub name: String,
    /// The Pod's own network (the only kind Ferrovirt has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodNetwork>,
    #[serde(flatten)]
    pub other: Other,
}

/// The pod network (`v1.PodNetwork`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodNetwork {
    /// IPv4 CIDR of the guest side of masquerade; `10.0.2.0/24` when unset.
    #[serde(
        rename = "vmNetworkCIDR",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub vm_network_cidr: Option<String>,
    #[serde(flatten)]
    pub other: Other,
}
