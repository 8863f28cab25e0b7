//! The launcher Pod's security settings: capabilities, sysctls, the user it runs as, what the
//! Pod Security `restricted` level says of it, and KubeVirt's `Root` feature gate.

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::pod::{compute, render, vmi};
use crate::config::ClusterConfig;

#[test]
fn the_launcher_pod_needs_no_sysctl_and_adds_only_kubevirts_capability() {
    let pod = render(&vmi(), &ClusterConfig::default());
    let spec = pod.spec.as_ref().unwrap();
    let sysctls = spec
        .security_context
        .as_ref()
        .and_then(|s| s.sysctls.as_ref());
    assert_eq!(sysctls, None, "virt-handler turns forwarding on in the Pod");
    for container in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let capabilities = container
            .security_context
            .as_ref()
            .and_then(|s| s.capabilities.as_ref());
        let added = capabilities.and_then(|c| c.add.clone()).unwrap_or_default();
        // KubeVirt's non-root compute container has NET_BIND_SERVICE, which `restricted` allows.
        let expected: &[&str] = if container.name == "compute" {
            &["NET_BIND_SERVICE"]
        } else {
            &[]
        };
        assert_eq!(added, expected, "{}", container.name);
        assert_ne!(
            container
                .security_context
                .as_ref()
                .and_then(|s| s.privileged),
            Some(true),
            "{}",
            container.name
        );
    }
    assert_eq!(dropped_capabilities(&pod), ["ALL"]);
}

/// The capabilities the compute container drops.
fn dropped_capabilities(pod: &Pod) -> Vec<String> {
    (compute(pod).security_context.as_ref())
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.drop.clone())
        .unwrap_or_default()
}

/// What the Pod Security `restricted` level refuses in `pod` (Kubernetes' checks of it, for
/// the fields a launcher Pod could set), as messages.
fn restricted_violations(pod: &Pod) -> Vec<String> {
    let spec = pod.spec.as_ref().unwrap();
    let mut found = Vec::new();
    let pod_context = spec.security_context.clone().unwrap_or_default();
    for volume in spec.volumes.iter().flatten() {
        let allowed = volume.empty_dir.is_some()
            || volume.persistent_volume_claim.is_some()
            || volume.config_map.is_some()
            || volume.secret.is_some()
            || volume.downward_api.is_some()
            || volume.projected.is_some();
        if !allowed {
            found.push(format!("volume {} has a restricted type", volume.name));
        }
    }
    for container in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let name = &container.name;
        let context = container.security_context.clone().unwrap_or_default();
        if context.allow_privilege_escalation != Some(false) {
            found.push(format!("{name}: allowPrivilegeEscalation is not false"));
        }
        let capabilities = context.capabilities.clone().unwrap_or_default();
        if !capabilities
            .drop
            .unwrap_or_default()
            .contains(&"ALL".into())
        {
            found.push(format!("{name}: does not drop ALL capabilities"));
        }
        if capabilities
            .add
            .unwrap_or_default()
            .iter()
            .any(|c| c != "NET_BIND_SERVICE")
        {
            found.push(format!("{name}: adds a capability"));
        }
        let non_root = context.run_as_non_root.or(pod_context.run_as_non_root);
        if non_root != Some(true) {
            found.push(format!("{name}: runAsNonRoot is not true"));
        }
        if context.run_as_user.or(pod_context.run_as_user) == Some(0) {
            found.push(format!("{name}: runAsUser is 0"));
        }
        let seccomp = context
            .seccomp_profile
            .or(pod_context.seccomp_profile.clone())
            .map(|p| p.type_);
        if !matches!(seccomp.as_deref(), Some("RuntimeDefault" | "Localhost")) {
            found.push(format!(
                "{name}: no RuntimeDefault or Localhost seccomp profile"
            ));
        }
    }
    found
}

#[test]
fn the_launcher_pod_runs_as_kubevirts_non_root_user_and_misses_restricted_only_by_seccomp() {
    let mut vmi = vmi();
    vmi.spec.domain.firmware = Some(
        serde_json::from_value(json!({"kernelBoot": {"container": {
            "image": "registry:5000/k:devel", "kernelPath": "/boot/vmlinuz"}}}))
        .unwrap(),
    );
    let pod = render(&vmi, &ClusterConfig::default());
    // No seccomp profile: the launcher installs its own filters (see pod_security).
    let violations = restricted_violations(&pod);
    assert!(!violations.is_empty());
    assert!(
        violations
            .iter()
            .all(|v| v.ends_with("no RuntimeDefault or Localhost seccomp profile")),
        "{violations:?}"
    );
    let context = pod.spec.as_ref().unwrap().security_context.clone().unwrap();
    let id = i64::from(contract::layout::LAUNCHER_USER_ID);
    assert_eq!(
        (context.run_as_user, context.run_as_group, context.fs_group),
        (Some(id), Some(id), Some(id))
    );
    // What it writes is in emptyDirs, not in the image's root-owned directories.
    let mounts = compute(&pod).volume_mounts.clone().unwrap();
    for dir in [
        contract::layout::EPHEMERAL_DISK_DIR,
        contract::layout::LAUNCHER_RUN_DIR,
    ] {
        let mount = mounts.iter().find(|m| m.mount_path == dir);
        let volume = pod
            .spec
            .as_ref()
            .unwrap()
            .volumes
            .iter()
            .flatten()
            .find(|v| Some(&v.name) == mount.map(|m| &m.name));
        assert!(
            volume.is_some_and(|v| v.empty_dir.is_some()),
            "{dir} is not an emptyDir: {mounts:?}"
        );
    }
}

#[test]
fn kubevirts_root_gate_runs_the_launcher_as_root() {
    let cfg = ClusterConfig {
        root_launcher: true,
        ..ClusterConfig::default()
    };
    let pod = render(&vmi(), &cfg);
    assert_eq!(pod.spec.as_ref().unwrap().security_context, None);
    let violations = restricted_violations(&pod);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("compute: runAsNonRoot")),
        "{violations:?}"
    );
    assert_eq!(dropped_capabilities(&pod), ["NET_RAW"]);
}

#[test]
fn the_root_gate_is_read_from_the_kubevirt_cr() {
    let kv: api::KubeVirt = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"developerConfiguration": {"featureGates": ["Root"]}}}
    }))
    .unwrap();
    let mut cfg = ClusterConfig::default();
    cfg.apply_kubevirt(&kv);
    assert!(cfg.root_launcher);
    cfg.apply_kubevirt(&api::KubeVirt::new("kubevirt", Default::default()));
    assert!(!cfg.root_launcher);
}
