//! Disks: one virtio-blk device per `spec.domain.devices.disks` entry, backed by the file of the
//! volume of the same name (see [`super::volumes`]), ordered by `bootOrder` (then as
//! declared), so the boot disk comes first and becomes `/dev/vda`.

use api::domain::Disk;
use api::VirtualMachineInstance;
use vmm::config::DiskConfig;

use super::volumes::{plan_volume, VolumePlan};
use super::{FieldProblem, HostFacts};

/// The plans of every volume of the VMI, in `spec.volumes` order.
pub fn volume_plans(
    vmi: &VirtualMachineInstance,
    facts: &HostFacts,
) -> Result<Vec<VolumePlan>, FieldProblem> {
    vmi.spec
        .volumes
        .iter()
        .enumerate()
        .map(|(index, volume)| plan_volume(vmi, index, volume, facts))
        .collect()
}

/// The VMI's disks in boot order, each with its index in `spec.domain.devices.disks`: by
/// `bootOrder` (disks without one last), then as declared.
pub fn boot_ordered(vmi: &VirtualMachineInstance) -> Vec<(usize, &Disk)> {
    let mut ordered: Vec<(usize, &Disk)> =
        vmi.spec.domain.devices.disks.iter().enumerate().collect();
    ordered.sort_by_key(|(index, disk)| (disk.boot_order.unwrap_or(u32::MAX), *index));
    ordered
}

/// The boot disk: the first in boot order (it becomes `/dev/vda`), with its index in
/// `spec.domain.devices.disks`. The launcher's boot discovery reads this disk.
pub fn boot_disk(vmi: &VirtualMachineInstance) -> Option<(usize, &Disk)> {
    boot_ordered(vmi).into_iter().next()
}

/// The block devices of the VM, boot disk first.
pub fn disks(
    vmi: &VirtualMachineInstance,
    facts: &HostFacts,
) -> Result<Vec<DiskConfig>, FieldProblem> {
    let plans = volume_plans(vmi, facts)?;
    boot_ordered(vmi)
        .into_iter()
        .map(|(index, disk)| {
            let path = format!("spec.domain.devices.disks[{index}]");
            let target = disk.disk.as_ref();
            if let Some(bus) = target.and_then(|t| t.bus.as_deref()) {
                if bus != "virtio" {
                    return Err(FieldProblem::new(
                        format!("{path}.disk.bus"),
                        format!("bus {bus:?} is not supported by ferrovirt (only virtio)"),
                    ));
                }
            }
            let plan = plans.iter().find(|p| p.name == disk.name).ok_or_else(|| {
                FieldProblem::new(
                    format!("{path}.name"),
                    format!("no volume named {:?}", disk.name),
                )
            })?;
            let readonly = plan.readonly || target.and_then(|t| t.readonly) == Some(true);
            Ok(DiskConfig {
                id: disk.name.clone(),
                path: plan.disk.clone(),
                readonly,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use api::domain::DiskTarget;
    use api::volume::{ContainerDiskSource, EmptyDiskSource, Volume};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::converter::host::test_facts;

    fn disk(name: &str, boot_order: Option<u32>) -> Disk {
        Disk {
            name: name.into(),
            disk: Some(DiskTarget {
                bus: Some("virtio".into()),
                ..Default::default()
            }),
            boot_order,
            ..Default::default()
        }
    }

    fn vmi(disks: Vec<Disk>) -> VirtualMachineInstance {
        let mut vmi = VirtualMachineInstance::new("v", Default::default());
        vmi.spec.domain.devices.disks = disks;
        vmi.spec.volumes = vec![
            Volume {
                name: "root".into(),
                container_disk: Some(ContainerDiskSource {
                    image: "i".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "scratch".into(),
                empty_disk: Some(EmptyDiskSource {
                    capacity: Quantity("1Gi".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        vmi
    }

    fn ids(disks: &[DiskConfig]) -> Vec<&str> {
        disks.iter().map(|d| d.id.as_str()).collect()
    }

    #[test]
    fn boot_order_then_declaration_order() {
        let facts = test_facts();
        let cases = [
            (
                vec![disk("root", None), disk("scratch", None)],
                vec!["root", "scratch"],
            ),
            (
                vec![disk("root", Some(2)), disk("scratch", Some(1))],
                vec!["scratch", "root"],
            ),
            (
                vec![disk("scratch", None), disk("root", Some(1))],
                vec!["root", "scratch"],
            ),
        ];
        for (disks_in, want) in cases {
            let vmi = vmi(disks_in);
            let got = disks(&vmi, &facts).unwrap();
            assert_eq!(ids(&got), want);
            let (index, boot) = boot_disk(&vmi).unwrap();
            assert_eq!(boot.name, want[0]);
            assert_eq!(vmi.spec.domain.devices.disks[index].name, want[0]);
        }
        assert!(boot_disk(&vmi(vec![])).is_none());
    }

    #[test]
    fn readonly_and_paths() {
        let facts = test_facts();
        let mut ro = disk("root", None);
        if let Some(t) = ro.disk.as_mut() {
            t.readonly = Some(true);
        }
        let got = disks(&vmi(vec![ro, disk("scratch", None)]), &facts).unwrap();
        assert_eq!(
            got,
            vec![
                DiskConfig {
                    id: "root".into(),
                    path: facts.generated_disk("root"),
                    readonly: true
                },
                DiskConfig {
                    id: "scratch".into(),
                    path: facts.generated_disk("scratch"),
                    readonly: false
                },
            ]
        );
    }

    #[test]
    fn errors_name_the_field() {
        let facts = test_facts();
        let mut sata = disk("scratch", None);
        if let Some(t) = sata.disk.as_mut() {
            t.bus = Some("sata".into());
        }
        let cases = [
            (
                vec![disk("root", None), disk("nope", None)],
                "spec.domain.devices.disks[1].name",
            ),
            (
                vec![disk("root", None), sata],
                "spec.domain.devices.disks[1].disk.bus",
            ),
        ];
        for (disks_in, path) in cases {
            assert_eq!(disks(&vmi(disks_in), &facts).unwrap_err().path, path);
        }
    }
}
