//! Defaulting of every kubevirt.io kind, as virt-api's mutating webhook applies it: pure
//! functions that fill in what KubeVirt fills in, so that the stored object says what will run.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::domain::{Cpu, Disk, DiskTarget, Interface, InterfaceMasquerade, Memory};
use crate::kubevirt::KubeVirt;
use crate::migration::VirtualMachineInstanceMigration;
use crate::replicaset::VirtualMachineInstanceReplicaSet;
use crate::vm::VirtualMachine;
use crate::vmi::{VirtualMachineInstance, VirtualMachineInstanceSpec};
use crate::volume::{Network, PodNetwork};

/// Name of the interface and network added when a VMI asks for none.
pub const DEFAULT_NETWORK_NAME: &str = "default";
/// KubeVirt's default grace period for a guest to shut down.
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

/// Fills in the defaults of a VMI.
pub fn default_vmi(vmi: &mut VirtualMachineInstance) {
    default_vmi_spec(&mut vmi.spec);
}

/// Fills in the defaults of a VMI spec (also used for VM and replica set templates):
/// - a volume that no disk uses gets a disk of its name, as KubeVirt's mutator adds;
/// - disks without a target become `disk: {bus: virtio}`, a target without a bus gets `virtio`;
/// - without interfaces and networks (and unless `autoattachPodInterface: false`) a `default`
///   interface with the masquerade binding on the pod network is added;
/// - `memory.guest` comes from `resources.requests.memory` (else `limits.memory`) when unset;
/// - the CPU topology is 1 core, 1 socket, 1 thread where unset, model `host-model`;
/// - `terminationGracePeriodSeconds` is 30, `architecture` is `amd64`.
pub fn default_vmi_spec(spec: &mut VirtualMachineInstanceSpec) {
    default_devices(spec);
    for disk in &mut spec.domain.devices.disks {
        let target = disk.disk.get_or_insert_with(DiskTarget::default);
        target.bus.get_or_insert_with(|| "virtio".to_string());
    }

    let domain = &mut spec.domain;
    let from_resources = domain.resources.as_ref().and_then(|r| {
        let memory = |m: &Option<std::collections::BTreeMap<String, Quantity>>| {
            m.as_ref().and_then(|m| m.get("memory").cloned())
        };
        memory(&r.requests).or_else(|| memory(&r.limits))
    });
    let memory = domain.memory.get_or_insert_with(Memory::default);
    if memory.guest.is_none() {
        memory.guest = from_resources;
    }

    let cpu = domain.cpu.get_or_insert_with(Cpu::default);
    // 0 is unset, as in KubeVirt: 1.
    for count in [&mut cpu.cores, &mut cpu.sockets, &mut cpu.threads] {
        if count.unwrap_or(0) == 0 {
            *count = Some(1);
        }
    }
    cpu.model.get_or_insert_with(|| "host-model".to_string());

    spec.termination_grace_period_seconds
        .get_or_insert(DEFAULT_GRACE_PERIOD_SECONDS);
    spec.architecture.get_or_insert_with(|| "amd64".to_string());
}

/// The cluster's `memoryOvercommit` (a percentage, [`crate::kubevirt::DeveloperConfiguration`])
/// on a new VMI, as KubeVirt's VMI mutator applies it: a VMI that gives `memory.guest` and
/// requests no memory requests `memory.guest x 100 / percent` (rounded down); at 100, KubeVirt's
/// default, that is `memory.guest` itself, as it was written.
pub fn overcommit_memory(spec: &mut VirtualMachineInstanceSpec, percent: u32) {
    if percent == 0 {
        return;
    }
    let domain = &mut spec.domain;
    let Some(Ok(bytes)) = domain.guest_memory().map(crate::quantity::to_u64) else {
        return;
    };
    if bytes == 0 || domain.memory_request().is_some() {
        return;
    }
    let request = if percent == crate::kubevirt::DeveloperConfiguration::DEFAULT_MEMORY_OVERCOMMIT {
        domain.guest_memory().cloned()
    } else {
        Some(Quantity(
            (u128::from(bytes) * 100 / u128::from(percent)).to_string(),
        ))
    };
    if let Some(request) = request {
        domain
            .resources
            .get_or_insert_with(Default::default)
            .requests
            .get_or_insert_with(Default::default)
            .insert("memory".to_string(), request);
    }
}

/// The devices KubeVirt adds before an instance type and a preference apply: a volume that no
/// disk uses gets a disk of its name (no target: a preference may choose its bus), and without
/// interfaces and networks (and unless `autoattachPodInterface: false`) a `default` interface
/// with the masquerade binding on the pod network.
pub fn default_devices(spec: &mut VirtualMachineInstanceSpec) {
    let devices = &mut spec.domain.devices;
    for volume in &spec.volumes {
        if !devices.disks.iter().any(|d| d.name == volume.name) {
            devices.disks.push(Disk {
                name: volume.name.clone(),
                ..Disk::default()
            });
        }
    }
    let autoattach = devices.autoattach_pod_interface != Some(false);
    if autoattach && devices.interfaces.is_empty() && spec.networks.is_empty() {
        devices.interfaces.push(Interface {
            name: DEFAULT_NETWORK_NAME.to_string(),
            masquerade: Some(InterfaceMasquerade::default()),
            ..Interface::default()
        });
        spec.networks.push(Network {
            name: DEFAULT_NETWORK_NAME.to_string(),
            pod: Some(PodNetwork::default()),
            ..Network::default()
        });
    }
}

/// Fills in the defaults of a VM: the deprecated `running` becomes `runStrategy` (Halted when
/// neither is set), and the template gets the VMI defaults, unless the VM names an instance type
/// or a preference: those apply to the VMIs it starts, before the VMI defaults, and a defaulted
/// template would conflict with the instance type and leave the preference nothing to fill in.
pub fn default_vm(vm: &mut VirtualMachine) {
    if vm.spec.run_strategy.is_none() {
        if let Some(strategy) = vm.spec.effective_run_strategy() {
            vm.spec.run_strategy = Some(strategy.as_str().to_string());
            vm.spec.running = None;
        }
    }
    if vm.spec.names_instancetype_or_preference() {
        return;
    }
    if let Some(spec) = &mut vm.spec.template.spec {
        default_vmi_spec(spec);
    }
}

/// Fills in the defaults of a replica set: 1 replica, and the VMI defaults in the template.
pub fn default_replica_set(rs: &mut VirtualMachineInstanceReplicaSet) {
    rs.spec.replicas.get_or_insert(1);
    if let Some(spec) = &mut rs.spec.template.spec {
        default_vmi_spec(spec);
    }
}

/// A migration has nothing to default; kept for symmetry with the webhook's dispatch.
pub fn default_migration(_: &mut VirtualMachineInstanceMigration) {}

/// A KubeVirt CR has nothing to default. KubeVirt leaves `uninstallStrategy` empty (its own
/// e2e tests set `BlockUninstallIfWorkloadsExist` explicitly), so an empty one blocks nothing
/// whether the CR was created before or after virt-api's webhooks.
pub fn default_kubevirt(_: &mut KubeVirt) {}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi(spec: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "v"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn disks_get_virtio_and_volumes_get_disks() {
        let mut v = vmi(json!({
            "domain": {"devices": {"disks": [{"name": "a"}, {"name": "b", "disk": {"readonly": true}}]},
                       "memory": {"guest": "64Mi"}},
            "volumes": [
                {"name": "a", "emptyDisk": {"capacity": "1Gi"}},
                {"name": "b", "emptyDisk": {"capacity": "1Gi"}},
                {"name": "c", "emptyDisk": {"capacity": "1Gi"}}
            ]
        }));
        default_vmi(&mut v);
        let disks = &v.spec.domain.devices.disks;
        assert_eq!(disks.len(), 3);
        assert_eq!(disks[2].name, "c");
        for disk in disks {
            assert_eq!(disk.disk.as_ref().unwrap().bus.as_deref(), Some("virtio"));
        }
        assert_eq!(disks[1].disk.as_ref().unwrap().readonly, Some(true));
    }

    #[test]
    fn pod_network_is_attached_unless_asked_not_to() {
        let mut v = vmi(json!({"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}));
        default_vmi(&mut v);
        assert_eq!(v.spec.domain.devices.interfaces[0].name, "default");
        assert!(v.spec.domain.devices.interfaces[0].masquerade.is_some());
        assert!(v.spec.networks[0].pod.is_some());

        let mut v = vmi(json!({"domain": {"devices": {"autoattachPodInterface": false}}}));
        default_vmi(&mut v);
        assert!(v.spec.domain.devices.interfaces.is_empty());
        assert!(v.spec.networks.is_empty());
    }

    #[test]
    fn memory_overcommit_sets_the_request_of_a_vmi_that_has_none() {
        let request = |spec: serde_json::Value, percent| {
            let mut v = vmi(spec);
            overcommit_memory(&mut v.spec, percent);
            v.spec
                .domain
                .resources
                .and_then(|r| r.requests?.get("memory").cloned())
        };
        let guest = json!({"domain": {"devices": {}, "memory": {"guest": "1Gi"}}});
        assert_eq!(
            request(guest.clone(), 200),
            Some(Quantity((512 * 1024 * 1024).to_string()))
        );
        assert_eq!(
            request(guest.clone(), 150),
            Some(Quantity("715827882".into()))
        );
        assert_eq!(request(guest.clone(), 100), Some(Quantity("1Gi".into())));
        assert_eq!(request(guest, 0), None);
        // A request of its own is kept; without guest memory there is nothing to scale.
        let own = json!({"domain": {"devices": {}, "memory": {"guest": "1Gi"},
                                    "resources": {"requests": {"memory": "870Mi"}}}});
        assert_eq!(request(own, 200), Some(Quantity("870Mi".into())));
        assert_eq!(request(json!({"domain": {"devices": {}}}), 200), None);
    }

    #[test]
    fn zero_cpu_counts_are_unset() {
        let mut v = vmi(
            json!({"domain": {"devices": {}, "memory": {"guest": "64Mi"},
                                          "cpu": {"cores": 0, "sockets": 2, "threads": 0}}}),
        );
        default_vmi(&mut v);
        let cpu = v.spec.domain.cpu.as_ref().unwrap();
        assert_eq!(
            (cpu.cores, cpu.sockets, cpu.threads),
            (Some(1), Some(2), Some(1))
        );
        assert_eq!(cpu.vcpus(), 2);
    }

    #[test]
    fn guest_memory_cpu_grace_and_architecture() {
        let mut v = vmi(json!({
            "domain": {"devices": {}, "cpu": {"cores": 2},
                       "resources": {"requests": {"memory": "96Mi"}}},
        }));
        default_vmi(&mut v);
        let domain = &v.spec.domain;
        assert_eq!(
            domain.memory.as_ref().unwrap().guest,
            Some(Quantity("96Mi".into()))
        );
        let cpu = domain.cpu.as_ref().unwrap();
        assert_eq!(
            (cpu.cores, cpu.sockets, cpu.threads),
            (Some(2), Some(1), Some(1))
        );
        assert_eq!(cpu.model.as_deref(), Some("host-model"));
        assert_eq!(v.spec.termination_grace_period_seconds, Some(30));
        assert_eq!(v.spec.architecture.as_deref(), Some("amd64"));

        let mut explicit = vmi(
            json!({"domain": {"devices": {}, "memory": {"guest": "64Mi"}},
                                       "terminationGracePeriodSeconds": 0}),
        );
        default_vmi(&mut explicit);
        assert_eq!(explicit.spec.termination_grace_period_seconds, Some(0));
    }

    #[test]
    fn vm_running_becomes_run_strategy() {
        let vm = |spec: serde_json::Value| -> VirtualMachine {
            serde_json::from_value(
                json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                          "metadata": {"name": "vm"}, "spec": spec}),
            )
            .unwrap()
        };
        let template = json!({"spec": {"domain": {"devices": {}}}});
        for (spec, want) in [
            (json!({"running": true, "template": template}), "Always"),
            (json!({"running": false, "template": template}), "Halted"),
            (json!({"template": template}), "Halted"),
            (
                json!({"runStrategy": "Manual", "template": template}),
                "Manual",
            ),
        ] {
            let mut vm = vm(spec);
            default_vm(&mut vm);
            assert_eq!(vm.spec.run_strategy.as_deref(), Some(want));
            assert_eq!(vm.spec.running, None);
            assert!(vm
                .spec
                .template
                .spec
                .as_ref()
                .unwrap()
                .architecture
                .is_some());
        }
    }
}
