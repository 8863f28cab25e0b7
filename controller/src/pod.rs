//! The launcher Pod of a VMI: one pure function of the VMI and the cluster config.
//!
//! Layout of the Pod (KubeVirt's, adapted to direct kernel boot):
//! - init container `container-disk-binary` (launcher image) copies a static busybox into the
//!   `container-disk-binary` emptyDir;
//! - one container `volume<NAME>` per containerDisk, as in KubeVirt: the containerDisk image
//!   itself, which only sleeps (that busybox) with `FERROVIRT_CONTAINER_DISK=<NAME>` in its
//!   environment, as the launcher's user with no capability. The Pod shares one PID namespace,
//!   and the launcher reads the image in place as that process's `/proc/<pid>/root`
//!   (`contract::layout`); no init container copies it first. The guest writes to the
//!   launcher's private copy, never to the image;
//! - an init container `kernel-boot` copies a kernelBoot container's kernel and initrd into
//!   `/var/run/kubevirt/kernel-boot/`;
//! - container `compute` runs virt-launcher with the VMI's memory (as the VM boots with it:
//!   [`boot_memory_bytes`]) plus overhead, the
//!   `devices.kubevirt.io/kvm` and `devices.kubevirt.io/tun` device-plugin resources, and the
//!   socket directory that virt-handler reaches through the kubelet's directory;
//! - every container runs as KubeVirt's non-root user 107 ([`pod_security`]).

use std::collections::BTreeMap;

use api::domain::KernelBootContainer;
use api::quantity;
use api::VirtualMachineInstance;
use contract::layout::{
    CONTAINER_DISK_ENV, EPHEMERAL_DISK_DIR, KERNEL_BOOT_DIR, LAUNCHER_RUN_DIR, LAUNCHER_SOCKET_DIR,
    LAUNCHER_USER_ID, PRIVATE_DIR, PVC_DISK_DIR, SOCKETS_VOLUME,
};
use contract::{annotations, labels, resources};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, EmptyDirVolumeSource, EnvVar, NodeAffinity,
    NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimVolumeSource, Pod,
    PodSecurityContext, PodSpec, PreferredSchedulingTerm, ResourceRequirements, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::config::ClusterConfig;

/// The static busybox the containerDisk and kernelBoot containers run (their images hold no
/// binaries of their own).
const BUSYBOX_DIR: &str = "/var/run/kubevirt/container-disk-binary";
const BUSYBOX_IN_LAUNCHER_IMAGE: &str = "/bin/busybox";

/// Why a Pod cannot be rendered for a VMI.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("the VMI has no UID yet")]
    NoUid,
    #[error("spec.domain.memory.guest: {0}")]
    Memory(String),
}

/// Renders the launcher Pod of `vmi`.
/// The launcher Pod's annotations: the VMI's own, as KubeVirt carries them (user annotations,
/// `kubernetes.io/` and `kubevirt.io/` ones alike), except kubectl's and KubeVirt's API-version
/// bookkeeping, plus the domain name the launcher reports under.
fn pod_annotations(vmi: &VirtualMachineInstance, name: &str) -> BTreeMap<String, String> {
    const NOT_CARRIED: [&str; 3] = [
        "kubectl.kubernetes.io",
        "kubevirt.io/storage-observed-api-version",
        "kubevirt.io/latest-observed-api-version",
    ];
    let mut annotations: BTreeMap<String, String> = vmi
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !NOT_CARRIED.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert(annotations::DOMAIN.to_string(), name.to_string());
    // `kubectl logs` and `kubectl exec` without `-c` pick the launcher among the Pod's
    // containers, as on KubeVirt's launcher Pod.
    annotations.insert(
        DEFAULT_CONTAINER_ANNOTATION.to_string(),
        api::launcher_pod::COMPUTE_CONTAINER.to_string(),
    );
    annotations
}

/// The annotation kubectl reads for a Pod's default container.
const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";

/// The guest's and the launcher Pod's host name, as KubeVirt's `SanitizeHostname` makes it:
/// `spec.hostname`, else the VMI's name up to its first dot, cut to a DNS label's 63
/// characters (a VMI's name may be up to 253). The Pod's `vm.kubevirt.io/name` label carries it
/// too, as KubeVirt's does: a label value has the same limit.
pub fn sanitized_hostname(vmi: &VirtualMachineInstance) -> String {
    if let Some(hostname) = vmi.spec.hostname.as_ref().filter(|h| !h.is_empty()) {
        return hostname.clone();
    }
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    let first = name.split('.').next().unwrap_or_default();
    first.chars().take(63).collect()
}

pub fn render_launcher_pod(
    vmi: &VirtualMachineInstance,
    cfg: &ClusterConfig,
) -> Result<Pod, RenderError> {
    let name = vmi.metadata.name.clone().unwrap_or_default();
    let namespace = vmi.metadata.namespace.clone();
    let uid = vmi.metadata.uid.clone().ok_or(RenderError::NoUid)?;
    let guest_memory = boot_memory_bytes(vmi).map_err(RenderError::Memory)?;

    let mut pod_labels = vmi.metadata.labels.clone().unwrap_or_default();
    pod_labels.insert(labels::APP.into(), labels::LAUNCHER_APP.into());
    pod_labels.insert(labels::CREATED_BY.into(), uid.clone());
    let host_name = sanitized_hostname(vmi);
    pod_labels.insert(labels::VMI_NAME.into(), host_name.clone());

    let mut volumes = vec![
        // virt-handler reaches it through the kubelet's directory (contract::layout): no
        // hostPath, so the Pod passes the Pod Security `baseline` level.
        empty_dir_volume(SOCKETS_VOLUME),
        empty_dir_volume("private"),
        empty_dir_volume("container-disk-binary"),
        // What the launcher writes: its disks and its run directory (the image's directories
        // are root's, and the launcher is not).
        empty_dir_volume("ephemeral-disks"),
        empty_dir_volume("runtime"),
    ];
    let mut compute_mounts = vec![
        mount(SOCKETS_VOLUME, LAUNCHER_SOCKET_DIR, false),
        mount("private", PRIVATE_DIR, false),
        mount("ephemeral-disks", EPHEMERAL_DISK_DIR, false),
        mount("runtime", LAUNCHER_RUN_DIR, false),
    ];

    let mut init_containers = vec![Container {
        name: "container-disk-binary".into(),
        image: Some(cfg.launcher_image.clone()),
        image_pull_policy: Some(cfg.image_pull_policy.clone()),
        command: Some(vec![
            BUSYBOX_IN_LAUNCHER_IMAGE.into(),
            "cp".into(),
            BUSYBOX_IN_LAUNCHER_IMAGE.into(),
            format!("{BUSYBOX_DIR}/busybox"),
        ]),
        volume_mounts: Some(vec![mount("container-disk-binary", BUSYBOX_DIR, false)]),
        resources: Some(small_resources()),
        security_context: init_security(cfg),
        ..Container::default()
    }];
    let mut containers = Vec::new();
    for volume in &vmi.spec.volumes {
        if let Some(disk) = &volume.container_disk {
            containers.push(container_disk_container(
                &volume.name,
                &disk.image,
                disk.image_pull_policy
                    .as_deref()
                    .unwrap_or(&cfg.image_pull_policy),
            ));
        }
        if let Some(pvc) = &volume.persistent_volume_claim {
            volumes.push(Volume {
                name: format!("pvc-{}", volume.name),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: pvc.claim_name.clone(),
                    read_only: pvc.read_only,
                }),
                ..Volume::default()
            });
            compute_mounts.push(mount(
                &format!("pvc-{}", volume.name),
                &format!("{PVC_DISK_DIR}/{}", volume.name),
                pvc.read_only == Some(true),
            ));
        }
    }
    if let Some(container) = kernel_boot_container(vmi) {
        volumes.push(empty_dir_volume("kernel-boot"));
        compute_mounts.push(mount("kernel-boot", KERNEL_BOOT_DIR, true));
        let mut script = Vec::new();
        for path in [&container.kernel_path, &container.initrd_path]
            .into_iter()
            .flatten()
        {
            script.push(format!("cp {path} {KERNEL_BOOT_DIR}/"));
        }
        init_containers.push(copy_container(
            "kernel-boot",
            &container.image,
            container
                .image_pull_policy
                .as_deref()
                .unwrap_or(&cfg.image_pull_policy),
            script,
            "kernel-boot",
            KERNEL_BOOT_DIR,
            cfg,
        ));
    }

    // The memory the guest boots with, or what the VMI requests when that is not its guest
    // memory (overcommitted: the cluster's memoryOvercommit, an instance type's
    // overcommitPercent), as KubeVirt's Pod requests it; plus the overhead.
    let asked_guest = guest_memory_bytes(vmi).map_err(RenderError::Memory)?;
    let memory_request = match requested_memory_bytes(vmi).map_err(RenderError::Memory)? {
        Some(requested) if requested != asked_guest => requested,
        _ => guest_memory,
    } + memory_overhead_bytes(vmi, cfg);
    let mut requests = BTreeMap::from([
        ("memory".to_string(), Quantity(memory_request.to_string())),
        ("cpu".to_string(), Quantity(cfg.cpu_request.clone())),
        (resources::TUN.to_string(), Quantity("1".into())),
    ]);
    let mut limits = BTreeMap::from([(resources::TUN.to_string(), Quantity("1".into()))]);
    if !cfg.use_emulation {
        requests.insert(resources::KVM.into(), Quantity("1".into()));
        limits.insert(resources::KVM.into(), Quantity("1".into()));
    }
    if let Some(resources) = &vmi.spec.domain.resources {
        if let Some(user_limits) = &resources.limits {
            for (resource, value) in user_limits {
                let value = if resource == "memory" {
                    // The limit covers what runs, as the request does: at least the memory the
                    // guest boots with, plus the overhead.
                    let limit = quantity::to_u64(value).map_err(|e| {
                        RenderError::Memory(format!("resources.limits.memory: {e}"))
                    })?;
                    Quantity(
                        (limit.max(guest_memory) + memory_overhead_bytes(vmi, cfg)).to_string(),
                    )
                } else {
                    value.clone()
                };
                limits.insert(resource.clone(), value);
            }
        }
        if let Some(user_requests) = &resources.requests {
            if let Some(cpu) = user_requests.get("cpu") {
                requests.insert("cpu".into(), cpu.clone());
            }
        }
    }

    let compute = Container {
        name: api::launcher_pod::COMPUTE_CONTAINER.into(),
        image: Some(cfg.launcher_image.clone()),
        image_pull_policy: Some(cfg.image_pull_policy.clone()),
        command: Some(vec![
            "/usr/bin/virt-launcher".into(),
            "--socket-dir".into(),
            LAUNCHER_SOCKET_DIR.into(),
            "--name".into(),
            name.clone(),
            "--namespace".into(),
            namespace.clone().unwrap_or_default(),
            "--uid".into(),
            uid.clone(),
            // Tap, NAT and DHCP for the masquerade binding, in this Pod's network namespace.
            "--pod-network".into(),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(requests),
            limits: Some(limits),
            ..ResourceRequirements::default()
        }),
        security_context: Some(compute_security(cfg)),
        volume_mounts: Some(compute_mounts),
        ..Container::default()
    };

    let mut node_selector = vmi.spec.node_selector.clone().unwrap_or_default();
    node_selector.insert(labels::SCHEDULABLE.into(), "true".into());
    let grace = vmi
        .spec
        .termination_grace_period_seconds
        .unwrap_or(api::defaults::DEFAULT_GRACE_PERIOD_SECONDS);

    Ok(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("virt-launcher-{name}-")),
            namespace,
            labels: Some(pod_labels),
            annotations: Some(pod_annotations(vmi, &name)),
            owner_references: Some(vec![owner_reference(vmi, &uid)]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            share_process_namespace: (!containers.is_empty()).then_some(true),
            // The containerDisks' containers first: the kubelet starts them in this order, so
            // they run when the launcher looks for them.
            containers: containers.into_iter().chain([compute]).collect(),
            init_containers: Some(init_containers),
            volumes: Some(volumes),
            restart_policy: Some("Never".into()),
            // The launcher needs the guest's grace period plus time to tear down.
            termination_grace_period_seconds: Some(grace + 15),
            security_context: pod_security(cfg),
            node_selector: Some(node_selector),
            affinity: launcher_affinity(vmi, cfg),
            tolerations: (!vmi.spec.tolerations.is_empty()).then(|| vmi.spec.tolerations.clone()),
            scheduler_name: vmi.spec.scheduler_name.clone(),
            priority_class_name: vmi.spec.priority_class_name.clone(),
            hostname: Some(host_name),
            subdomain: vmi.spec.subdomain.clone(),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            ..PodSpec::default()
        }),
        status: None,
    })
}

/// The launcher Pod's security context. The launcher runs as [`LAUNCHER_USER_ID`], as
/// KubeVirt's non-root launcher does; with every capability dropped and no privilege
/// escalation, its Pod fails the Pod Security `restricted` level only by its seccomp profile:
/// none is set, as in KubeVirt's launcher Pod (the launcher installs its own filters,
/// `vmm::seccomp`). With the runtime's default profile stacked on them, the L1 kernel of the
/// local cluster's nested KVM node panicked twice of two runs as the VMM's vCPU thread ran
/// (`BUG: TASK stack guard page was hit` in `exc_page_fault`, PID `vcpu0`); without it, it ran.
/// What a root launcher did itself, virt-handler
/// does before the VM starts: the tap owned by the launcher's user, the launcher's `/dev/kvm`
/// and `/dev/net/tun` handed to that user, a PVC's `disk.img` too, and DHCP's port 67 opened
/// to users in the Pod's network namespace. The group owns the Pod's volumes (`fsGroup`).
/// KubeVirt's `Root` feature gate runs it as root instead, as before: no Pod-level settings.
pub(crate) fn pod_security(cfg: &ClusterConfig) -> Option<PodSecurityContext> {
    if cfg.root_launcher {
        return None;
    }
    let id = i64::from(LAUNCHER_USER_ID);
    Some(PodSecurityContext {
        run_as_user: Some(id),
        run_as_group: Some(id),
        run_as_non_root: Some(true),
        fs_group: Some(id),
        ..PodSecurityContext::default()
    })
}

/// What the `restricted` level asks of every container: no privilege escalation and no
/// capability but `NET_BIND_SERVICE`, the one it allows.
pub(crate) fn restricted_container(bind_service: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: bind_service.then(|| vec!["NET_BIND_SERVICE".into()]),
            drop: Some(vec!["ALL".into()]),
        }),
        ..SecurityContext::default()
    }
}

/// The init containers' security context: none as root, [`restricted_container`] otherwise.
fn init_security(cfg: &ClusterConfig) -> Option<SecurityContext> {
    (!cfg.root_launcher).then(|| restricted_container(false))
}

/// The compute container's security context. Not root, it has KubeVirt's one extra
/// capability, `NET_BIND_SERVICE`, in its bounding set, as KubeVirt's non-root compute
/// container does (the launcher does not use it: a process that is not root holds no
/// capability, and virt-handler opens DHCP's port to users instead). As root (the `Root` gate) it keeps the
/// runtime's default capabilities but `NET_RAW`: virt-handler makes the tap (owned by the
/// launcher's user), the gateway address, forwarding and NAT in this Pod's network namespace
/// (`contract::podnet`), so the launcher needs no `CAP_NET_ADMIN` and no raw socket (its DHCP
/// responder is a UDP socket on port 67).
fn compute_security(cfg: &ClusterConfig) -> SecurityContext {
    if !cfg.root_launcher {
        return restricted_container(true);
    }
    SecurityContext {
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["NET_RAW".into()]),
        }),
        ..SecurityContext::default()
    }
}

/// The weight of the preference for nodes whose KVM runs standard guests (the scheduler's range
/// is 1 to 100): the VMI's own preferred terms keep their say beside it.
pub const HARDWARE_KVM_PREFERENCE_WEIGHT: i32 = 50;

/// The launcher Pod's affinity: the VMI's own, plus, unless the cluster asks for emulation, a
/// preference for nodes labelled `ferrovirt.io/kvm=hardware`, where the VM runs on the rust-vmm
/// VMM instead of QEMU TCG. A preference, not a requirement: on a cluster without such nodes
/// the VMI runs where it fits, on the fallback backend, and says so.
fn launcher_affinity(vmi: &VirtualMachineInstance, cfg: &ClusterConfig) -> Option<Affinity> {
    if cfg.use_emulation {
        return vmi.spec.affinity.clone();
    }
    let mut affinity = vmi.spec.affinity.clone().unwrap_or_default();
    let node = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    node.preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(PreferredSchedulingTerm {
            weight: HARDWARE_KVM_PREFERENCE_WEIGHT,
            preference: NodeSelectorTerm {
                match_expressions: Some(vec![hardware_kvm()]),
                match_fields: None,
            },
        });
    Some(affinity)
}

/// The node selector requirement `ferrovirt.io/kvm In (hardware)`: a node whose KVM runs
/// standard guests, where the launcher runs the VM on the KVM VMM.
pub fn hardware_kvm() -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: labels::KVM.into(),
        operator: "In".into(),
        values: Some(vec![labels::KVM_HARDWARE.into()]),
    }
}

/// Guest memory in bytes: `memory.guest`, else `resources.requests.memory`, else limits.
pub fn guest_memory_bytes(vmi: &VirtualMachineInstance) -> Result<u64, String> {
    let domain = &vmi.spec.domain;
    let quantity = domain
        .guest_memory()
        .or_else(|| domain.memory_request())
        .or_else(|| domain.memory_limit())
        .ok_or_else(|| "no guest memory is set".to_string())?;
    quantity::to_u64(quantity).map_err(|e| e.to_string())
}

/// `resources.requests.memory` in bytes, when the VMI gives it.
fn requested_memory_bytes(vmi: &VirtualMachineInstance) -> Result<Option<u64>, String> {
    (vmi.spec.domain.memory_request())
        .map(quantity::to_u64)
        .transpose()
        .map_err(|e| format!("resources.requests.memory: {e}"))
}

/// The guest memory the VM really boots with: [`guest_memory_bytes`] rounded up as the launcher
/// rounds it (`contract::limits::boot_memory_bytes`: whole MiB, at least what the backends run a
/// VM with; a VMI may ask for 1Mi).
pub fn boot_memory_bytes(vmi: &VirtualMachineInstance) -> Result<u64, String> {
    let asked = guest_memory_bytes(vmi)?;
    contract::limits::boot_memory_bytes(asked).ok_or_else(|| format!("{asked} bytes is too large"))
}

/// Memory the launcher needs besides guest RAM: the launcher process, and with the TCG
/// fallback QEMU and its translation cache; plus page tables (~1/512 of guest RAM).
pub fn memory_overhead_bytes(vmi: &VirtualMachineInstance, cfg: &ClusterConfig) -> u64 {
    let guest = boot_memory_bytes(vmi).unwrap_or(0);
    let base = cfg.launcher_overhead_bytes;
    let emulation = if cfg.use_emulation || cfg.assume_tcg_possible {
        cfg.tcg_overhead_bytes
    } else {
        0
    };
    base + emulation + guest / 512
}

fn kernel_boot_container(vmi: &VirtualMachineInstance) -> Option<&KernelBootContainer> {
    vmi.spec
        .domain
        .firmware
        .as_ref()?
        .kernel_boot
        .as_ref()?
        .container
        .as_ref()
}

fn copy_container(
    name: &str,
    image: &str,
    pull_policy: &str,
    script: Vec<String>,
    volume: &str,
    mount_path: &str,
    cfg: &ClusterConfig,
) -> Container {
    let busybox = format!("{BUSYBOX_DIR}/busybox");
    Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some(pull_policy.into()),
        command: Some(vec![
            busybox.clone(),
            "sh".into(),
            "-euc".into(),
            script.join(" && "),
        ]),
        volume_mounts: Some(vec![
            mount("container-disk-binary", BUSYBOX_DIR, true),
            mount(volume, mount_path, false),
        ]),
        resources: Some(small_resources()),
        security_context: init_security(cfg),
        ..Container::default()
    }
}

/// The container of containerDisk volume `volume`: the image, sleeping with
/// [`CONTAINER_DISK_ENV`] naming the volume, with KubeVirt's resources for it. Root or not, it
/// holds no capability, so the launcher (the same user, holding at least as much) may read its
/// root filesystem through `/proc`.
fn container_disk_container(volume: &str, image: &str, pull_policy: &str) -> Container {
    Container {
        name: format!("volume{volume}"),
        image: Some(image.into()),
        image_pull_policy: Some(pull_policy.into()),
        command: Some(vec![
            format!("{BUSYBOX_DIR}/busybox"),
            "sleep".into(),
            // About 68 years: longer than any Pod lives.
            i32::MAX.to_string(),
        ]),
        env: Some(vec![EnvVar {
            name: CONTAINER_DISK_ENV.into(),
            value: Some(volume.into()),
            value_from: None,
        }]),
        volume_mounts: Some(vec![mount("container-disk-binary", BUSYBOX_DIR, true)]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("1m".into())),
                ("memory".to_string(), Quantity("1M".into())),
            ])),
            limits: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("10m".into())),
                ("memory".to_string(), Quantity("40M".into())),
            ])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(restricted_container(false)),
        ..Container::default()
    }
}

fn small_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("10m".into())),
            ("memory".to_string(), Quantity("16Mi".into())),
        ])),
        ..ResourceRequirements::default()
    }
}

fn owner_reference(vmi: &VirtualMachineInstance, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: VirtualMachineInstance::api_version(&()).into_owned(),
        kind: VirtualMachineInstance::kind(&()).into_owned(),
        name: vmi.metadata.name.clone().unwrap_or_default(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn empty_dir_volume(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}
