//! Converter table tests over the project's own manifests in `api/testdata/manifests/`: every
//! VMI (and VM / replica set / pool template) that defaulting and validation accept must
//! convert, and the result must follow the manifest.

use std::path::PathBuf;

use api::VirtualMachineInstance;
use serde::Deserialize;
use vmm::config::ConsoleConfig;

use super::host::{test_facts, test_facts_for};
use super::{convert, ConvertError, KernelOrigin};

fn manifests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../api/testdata/manifests")
}

/// Every VMI in the manifests: VMIs themselves and the templates of VMs, replica sets and pools.
fn fixture_vmis() -> Vec<(String, VirtualMachineInstance)> {
    let dir = manifests_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let file_name = file.file_name().unwrap().to_string_lossy().to_string();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(document).unwrap();
            let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
            let vmi_value = match kind {
                "VirtualMachineInstance" => value.clone(),
                "VirtualMachine" | "VirtualMachineInstanceReplicaSet" | "VirtualMachinePool" => {
                    let Some(template) = template_of(&value) else {
                        continue;
                    };
                    template
                }
                _ => continue,
            };
            let vmi: VirtualMachineInstance = serde_yaml::from_value(vmi_value).unwrap();
            out.push((format!("{file_name} ({kind})"), vmi));
        }
    }
    out
}

fn template_of(value: &serde_yaml::Value) -> Option<serde_yaml::Value> {
    let spec = value.get("spec")?;
    let template = spec.get("template").or_else(|| {
        spec.get("virtualMachineTemplate")
            .and_then(|t| t.get("spec"))
            .and_then(|s| s.get("template"))
    })?;
    let mut vmi = serde_yaml::Mapping::new();
    vmi.insert("apiVersion".into(), "kubevirt.io/v1".into());
    vmi.insert("kind".into(), "VirtualMachineInstance".into());
    let mut metadata = template
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| serde_yaml::Mapping::new().into());
    if metadata.get("name").is_none() {
        let name = value.get("metadata")?.get("name")?.clone();
        if let serde_yaml::Value::Mapping(m) = &mut metadata {
            m.insert("name".into(), name);
        }
    }
    vmi.insert("metadata".into(), metadata);
    vmi.insert("spec".into(), template.get("spec")?.clone());
    Some(vmi.into())
}

#[test]
fn every_accepted_fixture_converts_and_follows_its_manifest() {
    let mut accepted = 0;
    for (name, mut vmi) in fixture_vmis() {
        api::defaults::default_vmi(&mut vmi);
        if let Err(errors) = api::validation::validate_vmi(&vmi) {
            println!(
                "{name}: refused by validation: {}",
                api::FieldErrors(errors)
            );
            continue;
        }
        accepted += 1;
        let facts = test_facts_for(&vmi);
        let (config, boot) = match convert(&vmi, &facts) {
            Ok(converted) => (converted.config, converted.boot),
            Err(e) => panic!("{name}: accepted by validation but not converted: {e}"),
        };
        println!("{name}: converted");
        let spec = &vmi.spec;

        // cpu and memory follow the manifest.
        let vcpus = spec.domain.cpu.as_ref().map_or(1, |c| c.vcpus());
        assert_eq!(u64::from(config.cpus.boot_vcpus), vcpus, "{name}");
        let guest = spec
            .domain
            .memory
            .as_ref()
            .and_then(|m| m.guest.as_ref())
            .unwrap();
        let bytes = api::quantity::to_u64(guest).unwrap();
        assert!(
            config.memory.size >= bytes && config.memory.size - bytes < 1 << 20,
            "{name}"
        );

        // one disk per manifest disk, each backed by its volume's file.
        let mut disk_names: Vec<&str> = spec
            .domain
            .devices
            .disks
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        let mut config_ids: Vec<&str> = config.disks.iter().map(|d| d.id.as_str()).collect();
        disk_names.sort_unstable();
        config_ids.sort_unstable();
        assert_eq!(disk_names, config_ids, "{name}");
        for disk in &config.disks {
            let volume = spec.volumes.iter().find(|v| v.name == disk.id).unwrap();
            if volume.persistent_volume_claim.is_some() {
                assert_eq!(
                    disk.path,
                    facts.pvc_dir.join(&disk.id).join("disk.img"),
                    "{name}"
                );
            } else {
                assert_eq!(disk.path, facts.generated_disk(&disk.id), "{name}");
            }
            assert_eq!(
                disk.readonly,
                volume.cloud_init_no_cloud.is_some()
                    || volume
                        .persistent_volume_claim
                        .as_ref()
                        .and_then(|p| p.read_only)
                        == Some(true),
                "{name}"
            );
        }

        // boot: the manifest's kernel, else (the boot disk being a bare filesystem here) the
        // bundled one with the first disk as root.
        match spec
            .domain
            .firmware
            .as_ref()
            .and_then(|f| f.kernel_boot.as_ref())
        {
            Some(kb) => {
                let kernel_path = kb
                    .container
                    .as_ref()
                    .and_then(|c| c.kernel_path.as_deref())
                    .unwrap();
                assert_eq!(
                    config.payload.kernel,
                    facts
                        .kernel_boot_dir
                        .join(kernel_path.trim_start_matches('/')),
                    "{name}"
                );
                if let Some(args) = &kb.kernel_args {
                    assert_eq!(&config.payload.cmdline, args, "{name}");
                }
                assert_eq!(boot.origin, KernelOrigin::KernelBoot, "{name}");
            }
            None => {
                assert_eq!(config.payload.kernel, facts.default_kernel, "{name}");
                assert_eq!(boot.origin, KernelOrigin::Bundled, "{name}");
                assert_eq!(
                    config.payload.cmdline.contains("root=/dev/vda"),
                    !config.disks.is_empty(),
                    "{name}"
                );
            }
        }

        // the pod interface (added by defaulting when there is none) is on the tap.
        assert_eq!(
            config.net.len(),
            spec.domain.devices.interfaces.len(),
            "{name}"
        );
        for net in &config.net {
            assert_eq!(net.tap, facts.tap_device, "{name}");
        }
        assert_eq!(
            config.serial,
            ConsoleConfig::Socket {
                path: facts.serial_socket()
            },
            "{name}"
        );
        assert_eq!(
            config.rng.is_some(),
            spec.domain.devices.rng.is_some(),
            "{name}"
        );
    }
    assert!(accepted > 0, "validation accepted none of the fixtures");
}

#[test]
fn convert_errors_carry_the_field_path() {
    let mut vmi = VirtualMachineInstance::new("v", Default::default());
    api::defaults::default_vmi(&mut vmi);
    let err = convert(&vmi, &test_facts()).unwrap_err();
    assert!(matches!(err, ConvertError::Memory(_)), "{err}");
    assert_eq!(err.field_path(), Some("spec.domain.memory.guest"));
}

/// KubeVirt's functional suite's `libvmifact.NewGuestless()` (no disks, no volumes, a 1Mi memory
/// request), as the launcher Pod runs it (no bundled initramfs): a guestless VM with the memory
/// the backends need, no kernel, no disks, its vCPU idle.
#[test]
fn a_guestless_vmi_converts_to_a_vm_without_kernel_or_disks() {
    let vmi = super::admit_vmi(
        br#"{
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "testvmi-guestless", "namespace": "default", "uid": "u1"},
            "spec": {"domain": {"resources": {"requests": {"memory": "1Mi"}}, "devices": {}}}
        }"#,
    )
    .expect("a guestless VMI is admitted");
    let facts = super::HostFacts {
        default_initramfs: None,
        ..test_facts_for(&vmi)
    };
    let converted = convert(&vmi, &facts).expect("a guestless VMI converts");
    let config = &converted.config;
    assert_eq!(config.payload, vmm::config::PayloadConfig::guestless());
    assert_eq!(config.memory.size, vmm::config::MIN_MEMORY_BYTES);
    assert!(config.disks.is_empty());
    assert_eq!(config.transport, vmm::config::Transport::Mmio);
    assert_eq!(config.cpus.boot_vcpus, 1);
    assert_eq!(config.validate(), Ok(()));
    assert_eq!(converted.boot.origin, KernelOrigin::Guestless);
    assert_eq!(
        converted.boot.description,
        "guestless: the VMI has no disk, so nothing boots (no kernel; the vCPUs idle)"
    );
    // What the user asked stays in the VMI.
    assert_eq!(
        vmi.spec
            .domain
            .memory
            .as_ref()
            .and_then(|m| m.guest.as_ref()),
        Some(&k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            "1Mi".into()
        ))
    );
}
