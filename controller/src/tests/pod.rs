//! The launcher Pod's layout: labels, annotations, resources, volumes and containers,
//! scheduling. Its security settings: `pod_security`.

use api::VirtualMachineInstance;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

use crate::config::ClusterConfig;
use crate::pod::*;

pub(super) fn vmi() -> VirtualMachineInstance {
    let mut vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "testvmi", "namespace": "default", "uid": "1234-abcd",
                     "labels": {"app": "demo"}},
        "spec": {
            "domain": {"devices": {"disks": [{"name": "containerdisk"}, {"name": "data"}]},
                       "memory": {"guest": "128Mi"}},
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "terminationGracePeriodSeconds": 10,
            "volumes": [
                {"name": "containerdisk", "containerDisk": {"image": "quay.io/kubevirt/cirros-container-disk-demo:latest"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "disk-alpine"}}
            ]
        }
    }))
    .unwrap();
    api::defaults::default_vmi(&mut vmi);
    vmi
}

pub(super) fn render(vmi: &VirtualMachineInstance, cfg: &ClusterConfig) -> Pod {
    render_launcher_pod(vmi, cfg).unwrap()
}

pub(super) fn compute(pod: &Pod) -> &k8s_openapi::api::core::v1::Container {
    pod.spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .find(|c| c.name == "compute")
        .unwrap()
}

#[test]
fn labels_owner_and_scheduling_come_from_the_vmi() {
    let pod = render(&vmi(), &ClusterConfig::default());
    let meta = &pod.metadata;
    assert_eq!(
        meta.generate_name.as_deref(),
        Some("virt-launcher-testvmi-")
    );
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    let labels = meta.labels.as_ref().unwrap();
    assert_eq!(labels["app"], "demo");
    assert_eq!(labels[contract::labels::APP], "virt-launcher");
    assert_eq!(labels[contract::labels::CREATED_BY], "1234-abcd");
    let owner = &meta.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("VirtualMachineInstance", "1234-abcd")
    );
    assert_eq!(owner.controller, Some(true));
    let spec = pod.spec.as_ref().unwrap();
    let selector = spec.node_selector.as_ref().unwrap();
    assert_eq!(selector["disk"], "ssd");
    assert_eq!(selector[contract::labels::SCHEDULABLE], "true");
    assert_eq!(
        spec.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("k")
    );
    assert_eq!(spec.termination_grace_period_seconds, Some(25));
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
}

#[test]
fn the_vmis_annotations_are_carried_to_the_pod_but_kubectls_and_api_bookkeeping() {
    let mut vmi = vmi();
    vmi.metadata.annotations = Some(
        [
            ("kubevirt.io/test", "test"),
            ("kubernetes.io/test", "test"),
            ("testannotation", "annotation from vmi"),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
            ("kubevirt.io/latest-observed-api-version", "v1"),
            ("kubevirt.io/storage-observed-api-version", "v1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    let pod = render(&vmi, &ClusterConfig::default());
    let annotations = pod.metadata.annotations.unwrap();
    let keys: Vec<&str> = annotations.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "kubectl.kubernetes.io/default-container",
            "kubernetes.io/test",
            contract::annotations::DOMAIN,
            "kubevirt.io/test",
            "testannotation"
        ]
    );
    assert_eq!(annotations["testannotation"], "annotation from vmi");
    assert_eq!(
        annotations["kubectl.kubernetes.io/default-container"],
        "compute"
    );
    assert_eq!(annotations[contract::annotations::DOMAIN], "testvmi");
}

#[test]
fn resources_are_guest_memory_plus_overhead_and_device_plugins() {
    let cfg = ClusterConfig::default();
    let pod = render(&vmi(), &cfg);
    let resources = compute(&pod).resources.as_ref().unwrap();
    let requests = resources.requests.as_ref().unwrap();
    let memory: u64 = requests["memory"].0.parse().unwrap();
    let overhead = cfg.launcher_overhead_bytes + cfg.tcg_overhead_bytes + (128 << 20) / 512;
    assert_eq!(memory, (128 << 20) + overhead);
    assert_eq!(requests[contract::resources::KVM].0, "1");
    assert_eq!(requests[contract::resources::TUN].0, "1");
    let limits = resources.limits.as_ref().unwrap();
    assert_eq!(limits[contract::resources::KVM].0, "1");

    let emulation = ClusterConfig {
        use_emulation: true,
        ..ClusterConfig::default()
    };
    let pod = render(&vmi(), &emulation);
    let requests = compute(&pod)
        .resources
        .as_ref()
        .unwrap()
        .requests
        .clone()
        .unwrap();
    assert!(
        !requests.contains_key(contract::resources::KVM),
        "no /dev/kvm under useEmulation"
    );
    assert!(requests.contains_key(contract::resources::TUN));

    let kvm_only = ClusterConfig {
        assume_tcg_possible: false,
        ..ClusterConfig::default()
    };
    let pod = render(&vmi(), &kvm_only);
    let memory: u64 = compute(&pod)
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap()["memory"]
        .0
        .parse()
        .unwrap();
    assert_eq!(
        memory,
        (128 << 20) + kvm_only.launcher_overhead_bytes + (128 << 20) / 512
    );
}

/// KubeVirt's `libvmifact.NewGuestless()`: no disks, no volumes, a 1Mi memory request.
fn guestless(resources: serde_json::Value) -> VirtualMachineInstance {
    let mut vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "guestless", "namespace": "default", "uid": "5678-efgh"},
        "spec": {"domain": {"devices": {}, "resources": resources}}
    }))
    .unwrap();
    api::defaults::default_vmi(&mut vmi);
    vmi
}

fn memory_of(resources: &Option<std::collections::BTreeMap<String, Quantity>>) -> Option<u64> {
    resources
        .as_ref()
        .and_then(|r| r.get("memory"))
        .map(|q| q.0.parse().unwrap())
}

#[test]
fn an_overcommitted_vmi_gets_its_request_plus_overhead() {
    const MIB: u64 = 1 << 20;
    let cfg = ClusterConfig::default();
    let mut vmi = guestless(json!({"requests": {"memory": "64Mi"}}));
    vmi.spec.domain.memory = Some(api::domain::Memory {
        guest: Some(Quantity("128Mi".into())),
        ..Default::default()
    });
    let overhead = cfg.launcher_overhead_bytes + cfg.tcg_overhead_bytes + 128 * MIB / 512;
    let pod = render(&vmi, &cfg);
    let resources = compute(&pod).resources.as_ref().unwrap();
    assert_eq!(
        memory_of(&resources.requests),
        Some(64 * MIB + overhead),
        "the request, not the 128Mi the guest sees"
    );
}

#[test]
fn a_guestless_vmi_gets_the_memory_its_vm_boots_with_plus_overhead() {
    const MIB: u64 = 1 << 20;
    let cfg = ClusterConfig::default();
    let overhead_for =
        |guest: u64| cfg.launcher_overhead_bytes + cfg.tcg_overhead_bytes + guest / 512;
    let min = contract::limits::MIN_GUEST_MEMORY_BYTES;

    // 1Mi asked: the VM boots with the backends' minimum, and the Pod asks for that.
    let vmi = guestless(json!({"requests": {"memory": "1Mi"}}));
    assert_eq!(
        guest_memory_bytes(&vmi),
        Ok(MIB),
        "the VMI keeps what it asked"
    );
    assert_eq!(boot_memory_bytes(&vmi), Ok(min));
    let pod = render(&vmi, &cfg);
    let resources = compute(&pod).resources.as_ref().unwrap();
    assert_eq!(
        memory_of(&resources.requests),
        Some(min + overhead_for(min))
    );
    assert_eq!(
        memory_of(&resources.limits),
        None,
        "no limit asked, none set"
    );
    assert_eq!(
        vmi.spec
            .domain
            .memory
            .as_ref()
            .and_then(|m| m.guest.clone()),
        Some(Quantity("1Mi".into()))
    );

    // A 1Mi limit too: the Pod's limit covers what runs, as its request does.
    let vmi = guestless(json!({"requests": {"memory": "1Mi"}, "limits": {"memory": "1Mi"}}));
    let pod = render(&vmi, &cfg);
    let resources = compute(&pod).resources.as_ref().unwrap();
    let request = memory_of(&resources.requests).unwrap();
    assert_eq!(request, min + overhead_for(min));
    assert_eq!(memory_of(&resources.limits), Some(request));

    // Not a whole MiB: rounded up as the launcher rounds it.
    let vmi = guestless(json!({"requests": {"memory": "100M"}, "limits": {"memory": "200M"}}));
    assert_eq!(boot_memory_bytes(&vmi), Ok(96 * MIB));
    let pod = render(&vmi, &cfg);
    let resources = compute(&pod).resources.as_ref().unwrap();
    assert_eq!(
        memory_of(&resources.requests),
        Some(96 * MIB + overhead_for(96 * MIB))
    );
    assert_eq!(
        memory_of(&resources.limits),
        Some(200_000_000 + overhead_for(96 * MIB))
    );
}

#[test]
fn container_disks_run_as_containers_the_launcher_reads_in_place() {
    for cfg in [
        ClusterConfig::default(),
        ClusterConfig {
            root_launcher: true,
            ..ClusterConfig::default()
        },
    ] {
        let pod = render(&vmi(), &cfg);
        let spec = pod.spec.as_ref().unwrap();
        let init: Vec<_> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(init, ["container-disk-binary"]);
        let names: Vec<_> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["volumecontainerdisk", "compute"]);
        assert_eq!(spec.share_process_namespace, Some(true));
        let disk = &spec.containers[0];
        assert_eq!(
            disk.image.as_deref(),
            Some("quay.io/kubevirt/cirros-container-disk-demo:latest")
        );
        let command = disk.command.as_ref().unwrap().join(" ");
        assert_eq!(
            command,
            "/var/run/kubevirt/container-disk-binary/busybox sleep 2147483647"
        );
        let env = disk.env.as_ref().unwrap();
        assert_eq!(
            (env[0].name.as_str(), env[0].value.as_deref()),
            (contract::layout::CONTAINER_DISK_ENV, Some("containerdisk"))
        );
        // No capability, root or not: the launcher may read its root through /proc.
        let context = disk.security_context.as_ref().unwrap();
        let capabilities = context.capabilities.as_ref().unwrap();
        assert_eq!(capabilities.drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(capabilities.add, None);
        // Nothing copies the image: no emptyDir for copies in the Pod or the launcher.
        let volumes = spec.volumes.as_ref().unwrap();
        assert!(
            volumes.iter().all(|v| v.name != "container-disks"),
            "{volumes:?}"
        );
        let requests = disk.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(requests["cpu"].0, "1m");
    }
    let mut without = vmi();
    without.spec.volumes.retain(|v| v.container_disk.is_none());
    let pod = render(&without, &ClusterConfig::default());
    assert_eq!(pod.spec.as_ref().unwrap().share_process_namespace, None);
}

#[test]
fn pvcs_and_sockets_are_mounted_where_the_launcher_looks() {
    let pod = render(&vmi(), &ClusterConfig::default());
    let mounts = compute(&pod).volume_mounts.clone().unwrap();
    let at = |path: &str| {
        mounts
            .iter()
            .find(|m| m.mount_path == path)
            .map(|m| m.name.clone())
    };
    assert_eq!(
        at("/var/run/kubevirt-private/vmi-disks/data").as_deref(),
        Some("pvc-data")
    );
    assert_eq!(
        at(contract::layout::LAUNCHER_SOCKET_DIR).as_deref(),
        Some("sockets")
    );
    let volumes = pod.spec.as_ref().unwrap().volumes.clone().unwrap();
    let sockets = volumes.iter().find(|v| v.name == "sockets").unwrap();
    // An emptyDir (virt-handler links to it), not a hostPath: Pod Security `baseline`.
    assert!(sockets.empty_dir.is_some(), "{sockets:?}");
    assert!(
        volumes.iter().all(|v| v.host_path.is_none()),
        "the launcher Pod has a hostPath volume: {volumes:?}"
    );
    let pvc = volumes.iter().find(|v| v.name == "pvc-data").unwrap();
    assert_eq!(
        pvc.persistent_volume_claim.as_ref().unwrap().claim_name,
        "disk-alpine"
    );
    let command = compute(&pod).command.clone().unwrap();
    assert_eq!(command[0], "/usr/bin/virt-launcher");
    assert!(command.windows(2).any(|w| w == ["--uid", "1234-abcd"]));
}

#[test]
fn kernel_boot_gets_its_own_copy_container() {
    let mut vmi = vmi();
    vmi.spec.domain.firmware = Some(serde_json::from_value(json!({
        "kernelBoot": {"kernelArgs": "console=ttyS0",
                       "container": {"image": "registry:5000/k:devel",
                                     "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initramfs"}}
    })).unwrap());
    let pod = render(&vmi, &ClusterConfig::default());
    let init = pod.spec.as_ref().unwrap().init_containers.clone().unwrap();
    let kernel = init.iter().find(|c| c.name == "kernel-boot").unwrap();
    let command = kernel.command.as_ref().unwrap().join(" ");
    assert!(
        command.contains("cp /boot/vmlinuz /var/run/kubevirt/kernel-boot/"),
        "{command}"
    );
    assert!(
        command.contains("cp /boot/initramfs /var/run/kubevirt/kernel-boot/"),
        "{command}"
    );
}

#[test]
fn a_vmi_without_uid_or_memory_is_an_error() {
    let mut no_uid = vmi();
    no_uid.metadata.uid = None;
    assert_eq!(
        render_launcher_pod(&no_uid, &ClusterConfig::default()).unwrap_err(),
        RenderError::NoUid
    );
    let mut no_memory = vmi();
    no_memory.spec.domain.memory = None;
    assert!(matches!(
        render_launcher_pod(&no_memory, &ClusterConfig::default()),
        Err(RenderError::Memory(_))
    ));
}

fn preferred_terms(pod: &Pod) -> Vec<k8s_openapi::api::core::v1::PreferredSchedulingTerm> {
    pod.spec
        .as_ref()
        .unwrap()
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .clone()
        })
        .unwrap_or_default()
}

fn prefers_hardware_kvm(term: &k8s_openapi::api::core::v1::PreferredSchedulingTerm) -> bool {
    let expressions = term
        .preference
        .match_expressions
        .as_deref()
        .unwrap_or_default();
    expressions.len() == 1
        && expressions[0].key == contract::labels::KVM
        && expressions[0].operator == "In"
        && expressions[0].values.as_deref() == Some(&["hardware".to_string()][..])
}

#[test]
fn launcher_pods_prefer_nodes_whose_kvm_runs_standard_guests_unless_emulation_is_asked() {
    let pod = render(&vmi(), &ClusterConfig::default());
    let terms = preferred_terms(&pod);
    assert_eq!(terms.len(), 1, "{terms:?}");
    assert!(prefers_hardware_kvm(&terms[0]), "{terms:?}");
    assert_eq!(terms[0].weight, HARDWARE_KVM_PREFERENCE_WEIGHT);
    // A preference only: nothing is required of the node.
    let node = pod.spec.as_ref().unwrap().affinity.as_ref().unwrap();
    let node = node.node_affinity.as_ref().unwrap();
    assert!(node
        .required_during_scheduling_ignored_during_execution
        .is_none());

    let emulated = ClusterConfig {
        use_emulation: true,
        ..ClusterConfig::default()
    };
    let pod = render(&vmi(), &emulated);
    assert!(pod.spec.as_ref().unwrap().affinity.is_none());
}

#[test]
fn the_vmis_own_affinity_is_kept_beside_the_kvm_preference() {
    let mut vmi = vmi();
    vmi.spec.affinity = Some(
        serde_json::from_value(json!({
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 7, "preference": {"matchExpressions": [
                        {"key": "disk", "operator": "In", "values": ["nvme"]}]}}
                ]
            },
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                 "labelSelector": {"matchLabels": {"app": "demo"}}}}
            ]}
        }))
        .unwrap(),
    );
    let pod = render(&vmi, &ClusterConfig::default());
    let affinity = pod.spec.as_ref().unwrap().affinity.as_ref().unwrap();
    let node = affinity.node_affinity.as_ref().unwrap();
    let required = node
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap();
    assert_eq!(
        required.node_selector_terms[0]
            .match_expressions
            .as_ref()
            .unwrap()[0]
            .key,
        "zone"
    );
    let terms = preferred_terms(&pod);
    assert_eq!(terms.len(), 2, "{terms:?}");
    assert_eq!(terms[0].weight, 7);
    assert!(prefers_hardware_kvm(&terms[1]));
    assert!(affinity.pod_anti_affinity.is_some());

    let emulated = ClusterConfig {
        use_emulation: true,
        ..ClusterConfig::default()
    };
    let pod = render(&vmi, &emulated);
    assert_eq!(pod.spec.unwrap().affinity, vmi.spec.affinity);
}

#[test]
fn a_long_vmi_name_gives_a_pod_with_a_valid_hostname_and_name_label() {
    // A VMI's name may be up to 253 characters; a DNS label and a label value up to 63.
    let long = format!("{}.example", "a".repeat(70));
    let mut vmi = vmi();
    vmi.metadata.name = Some(long);
    let pod = render(&vmi, &ClusterConfig::default());
    let want = "a".repeat(63);
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[contract::labels::VMI_NAME], want);
    assert_eq!(
        pod.spec.as_ref().unwrap().hostname.as_deref(),
        Some(want.as_str())
    );
    // spec.hostname wins, as in KubeVirt.
    vmi.spec.hostname = Some("guest".into());
    let pod = render(&vmi, &ClusterConfig::default());
    assert_eq!(
        pod.spec.as_ref().unwrap().hostname.as_deref(),
        Some("guest")
    );
    assert_eq!(
        pod.metadata.labels.as_ref().unwrap()[contract::labels::VMI_NAME],
        "guest"
    );
}
