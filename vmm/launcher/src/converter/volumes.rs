//! The volume plan: for each volume of a VMI, where its disk comes from and which file the VM
//! uses. Pure (no I/O), a piece of the converter: [`super::disks`] takes the disk paths from it,
//! and the launcher's `volumes::prepare` carries it out (`volumes::plan` is this module).
//!
//! Layout (all directories come from [`HostFacts`]):
//! - containerDisk `NAME`: the image is the root of its container in the launcher Pod
//!   (`volumes::container_disk`), or a directory `container_disk_dir/NAME/` outside a Pod; the
//!   disk is its `path` or the first file under `disk/`. The VM uses a private writable copy at
//!   `generated_disk_dir/NAME.img` (the image itself is never written).
//! - emptyDisk `NAME`: a sparse file of the capacity at `generated_disk_dir/NAME.img`.
//! - cloudInitNoCloud `NAME`: a read-only `cidata` disk at `generated_disk_dir/NAME.img`.
//! - persistentVolumeClaim `NAME`: the file `pvc_dir/NAME/disk.img`, used in place.

use std::path::PathBuf;

use api::volume::Volume;
use api::VirtualMachineInstance;

use super::{FieldProblem, HostFacts};

/// What makes the disk of one volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeSource {
    ContainerDisk {
        /// Where a launcher outside a Pod finds the image (in a Pod, its container holds it).
        mount: PathBuf,
        /// `containerDisk.path` (inside the image), if set.
        path_in_image: Option<String>,
    },
    EmptyDisk {
        capacity: u64,
    },
    CloudInitNoCloud(CloudInitSeed),
    PersistentVolumeClaim,
}

/// The NoCloud seed files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudInitSeed {
    pub user_data: Vec<u8>,
    pub meta_data: Vec<u8>,
    pub network_config: Option<Vec<u8>>,
}

/// One volume: its source and the file the VM uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumePlan {
    pub name: String,
    pub source: VolumeSource,
    /// The file the VM's disk is backed by.
    pub disk: PathBuf,
    /// Whether the volume itself is read-only (cloud-init seeds, read-only PVCs).
    pub readonly: bool,
}

/// Plans volume `index` of the VMI.
pub fn plan_volume(
    vmi: &VirtualMachineInstance,
    index: usize,
    volume: &Volume,
    facts: &HostFacts,
) -> Result<VolumePlan, FieldProblem> {
    let path = format!("spec.volumes[{index}]");
    let name = volume.name.clone();
    let generated = facts.generated_disk(&name);
    let plan = |source, disk, readonly| VolumePlan {
        name: name.clone(),
        source,
        disk,
        readonly,
    };
    if let Some(cd) = &volume.container_disk {
        let source = VolumeSource::ContainerDisk {
            mount: facts.container_disk_dir.join(&name),
            path_in_image: cd.path.clone(),
        };
        return Ok(plan(source, generated, false));
    }
    if let Some(empty) = &volume.empty_disk {
        let capacity = api::quantity::to_u64(&empty.capacity)
            .map_err(|e| FieldProblem::new(format!("{path}.emptyDisk.capacity"), e.to_string()))?;
        if capacity == 0 {
            return Err(FieldProblem::new(
                format!("{path}.emptyDisk.capacity"),
                "is 0",
            ));
        }
        return Ok(plan(VolumeSource::EmptyDisk { capacity }, generated, false));
    }
    if let Some(ci) = &volume.cloud_init_no_cloud {
        let decode = |field: &str, text: &Option<String>, b64: &Option<String>| match (text, b64) {
            (Some(t), _) => Ok(Some(t.as_bytes().to_vec())),
            // virt-api's validation has accepted exactly what this decodes.
            (None, Some(b)) => contract::base64::decode(b).map(Some).map_err(|e| {
                FieldProblem::new(format!("{path}.cloudInitNoCloud.{field}"), e.to_string())
            }),
            (None, None) => Ok(None),
        };
        let user_data = decode("userDataBase64", &ci.user_data, &ci.user_data_base64)?;
        let network_config = decode(
            "networkDataBase64",
            &ci.network_data,
            &ci.network_data_base64,
        )?;
        let seed = CloudInitSeed {
            user_data: user_data.unwrap_or_default(),
            meta_data: meta_data(vmi).into_bytes(),
            network_config,
        };
        return Ok(plan(VolumeSource::CloudInitNoCloud(seed), generated, true));
    }
    if let Some(pvc) = &volume.persistent_volume_claim {
        let disk = facts.pvc_dir.join(&name).join("disk.img");
        let readonly = pvc.read_only == Some(true);
        return Ok(plan(VolumeSource::PersistentVolumeClaim, disk, readonly));
    }
    if volume.data_volume.is_some() {
        return Err(FieldProblem::new(
            format!("{path}.dataVolume"),
            "not supported by ferrovirt (DataVolumes need CDI)",
        ));
    }
    Err(FieldProblem::new(
        path,
        "has no volume source ferrovirt supports (containerDisk, emptyDisk, cloudInitNoCloud, persistentVolumeClaim)",
    ))
}

/// NoCloud meta-data: the instance id (the VMI's UID, else namespace.name) and the hostname
/// (`spec.hostname`, else the VMI's name).
pub fn meta_data(vmi: &VirtualMachineInstance) -> String {
    let name = vmi.metadata.name.clone().unwrap_or_else(|| "vmi".into());
    let instance_id = vmi.metadata.uid.clone().unwrap_or_else(|| {
        let namespace = vmi.metadata.namespace.as_deref().unwrap_or("default");
        format!("{name}.{namespace}")
    });
    let hostname = vmi.spec.hostname.clone().unwrap_or(name);
    format!("instance-id: {instance_id}\nlocal-hostname: {hostname}\n")
}

#[cfg(test)]
mod tests {
    use api::volume::{
        CloudInitNoCloudSource, ContainerDiskSource, DataVolumeSource, EmptyDiskSource,
        PersistentVolumeClaimVolumeSource,
    };
    use base64::Engine;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::converter::host::test_facts;

    fn vmi() -> VirtualMachineInstance {
        let mut vmi = VirtualMachineInstance::new("testvmi", Default::default());
        vmi.metadata.namespace = Some("ns".into());
        vmi
    }

    fn volume(name: &str) -> Volume {
        Volume {
            name: name.into(),
            ..Volume::default()
        }
    }

    #[test]
    fn sources_and_paths() {
        let facts = test_facts();
        let cases = [
            (
                Volume {
                    container_disk: Some(ContainerDiskSource {
                        image: "img".into(),
                        path: Some("/disk/x.img".into()),
                        ..Default::default()
                    }),
                    ..volume("root")
                },
                VolumeSource::ContainerDisk {
                    mount: facts.container_disk_dir.join("root"),
                    path_in_image: Some("/disk/x.img".into()),
                },
                facts.generated_disk_dir.join("root.img"),
                false,
            ),
            (
                Volume {
                    empty_disk: Some(EmptyDiskSource {
                        capacity: Quantity("2Gi".into()),
                        ..Default::default()
                    }),
                    ..volume("scratch")
                },
                VolumeSource::EmptyDisk { capacity: 2 << 30 },
                facts.generated_disk_dir.join("scratch.img"),
                false,
            ),
            (
                Volume {
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: "claim".into(),
                        read_only: Some(true),
                        ..Default::default()
                    }),
                    ..volume("data")
                },
                VolumeSource::PersistentVolumeClaim,
                facts.pvc_dir.join("data/disk.img"),
                true,
            ),
        ];
        for (volume, source, disk, readonly) in cases {
            let plan = plan_volume(&vmi(), 0, &volume, &facts).unwrap();
            assert_eq!(plan.source, source);
            assert_eq!(plan.disk, disk);
            assert_eq!(plan.readonly, readonly);
        }
    }

    #[test]
    fn cloud_init_seed_from_text_or_base64() {
        let facts = test_facts();
        let text = Volume {
            cloud_init_no_cloud: Some(CloudInitNoCloudSource {
                user_data: Some("#!/bin/sh\necho hi\n".into()),
                network_data: Some("version: 2\n".into()),
                ..Default::default()
            }),
            ..volume("ci")
        };
        let b64 = Volume {
            cloud_init_no_cloud: Some(CloudInitNoCloudSource {
                user_data_base64: Some(
                    base64::engine::general_purpose::STANDARD.encode("#!/bin/sh\necho hi\n"),
                ),
                network_data_base64: Some(
                    base64::engine::general_purpose::STANDARD.encode("version: 2\n"),
                ),
                ..Default::default()
            }),
            ..volume("ci")
        };
        for volume in [text, b64] {
            let plan = plan_volume(&vmi(), 0, &volume, &facts).unwrap();
            let VolumeSource::CloudInitNoCloud(seed) = plan.source else {
                panic!("not a cloud-init plan");
            };
            assert_eq!(seed.user_data, b"#!/bin/sh\necho hi\n");
            assert_eq!(seed.network_config.as_deref(), Some(&b"version: 2\n"[..]));
            assert_eq!(
                String::from_utf8(seed.meta_data).unwrap(),
                "instance-id: testvmi.ns\nlocal-hostname: testvmi\n"
            );
            assert!(plan.readonly);
        }
    }

    #[test]
    fn refused_volumes_name_the_field() {
        let facts = test_facts();
        let cases = [
            (
                Volume {
                    data_volume: Some(DataVolumeSource {
                        name: "dv".into(),
                        ..Default::default()
                    }),
                    ..volume("dv")
                },
                "spec.volumes[2].dataVolume",
            ),
            (volume("nothing"), "spec.volumes[2]"),
            (
                Volume {
                    cloud_init_no_cloud: Some(CloudInitNoCloudSource {
                        user_data_base64: Some("***".into()),
                        ..Default::default()
                    }),
                    ..volume("ci")
                },
                "spec.volumes[2].cloudInitNoCloud.userDataBase64",
            ),
            (
                Volume {
                    empty_disk: Some(EmptyDiskSource {
                        capacity: Quantity("0".into()),
                        ..Default::default()
                    }),
                    ..volume("e")
                },
                "spec.volumes[2].emptyDisk.capacity",
            ),
        ];
        for (volume, path) in cases {
            let err = plan_volume(&vmi(), 2, &volume, &facts).unwrap_err();
            assert_eq!(err.path, path);
        }
    }
}
