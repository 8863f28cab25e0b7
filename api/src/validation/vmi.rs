//! Validation of `VirtualMachineInstance` and of the VMI spec inside VM and replica set templates.

use std::collections::{BTreeMap, BTreeSet};

use contract::limits::{MAX_DEVICES, MAX_VCPUS, MIN_MEMORY_REQUEST_BYTES};

use crate::domain::{Bootloader, Cpu, Devices, DomainSpec};
use crate::other::reject_other;
use crate::quantity;
use crate::vmi::{VirtualMachineInstance, VirtualMachineInstanceSpec};
use crate::volume::Volume;

use super::network::{validate_interface, validate_networks};
use super::{check_dns_label, into_result, FieldError, FieldErrorKind, Path};

const EVICTION_STRATEGIES: [&str; 4] = ["None", "LiveMigrate", "LiveMigrateIfPossible", "External"];
const CPU_MODELS: [&str; 2] = ["host-passthrough", "host-model"];

/// Validates a VMI.
pub fn validate_vmi(vmi: &VirtualMachineInstance) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    validate_vmi_spec(&vmi.spec, &Path::root("spec"), &mut errors);
    validate_smbios(&vmi.spec.domain, &mut errors);
    validate_memory_given(&vmi.spec.domain, &mut errors);
    into_result(errors)
}

/// That the guest gets memory, checked where the VMI is created: KubeVirt admits a VM (or a
/// replica set) whose template gives none or 0 bytes, for an instance type or a later edit to
/// fill in; the VMI made of it is refused here with the field's path.
fn validate_memory_given(domain: &DomainSpec, errors: &mut Vec<FieldError>) {
    let path = Path::root("spec").child("domain");
    let given = [
        (domain.guest_memory(), path.child("memory").child("guest")),
        (
            domain.memory_request(),
            path.child("resources").child("requests").child("memory"),
        ),
        (
            domain.memory_limit(),
            path.child("resources").child("limits").child("memory"),
        ),
    ]
    .into_iter()
    .find_map(|(quantity, at)| Some((quantity?, at)));
    match given {
        None => errors.push(FieldError::required(
            path.child("memory").child("guest"),
            "guest memory is required: set memory.guest or resources.requests.memory",
        )),
        // A quantity that does not parse is refused by `validate_memory`.
        Some((quantity, at)) => {
            if matches!(quantity::to_u64(quantity), Ok(0)) {
                errors.push(FieldError::invalid(at, "0 bytes: the guest needs memory"));
            }
        }
    }
}

/// What the guest's SMBIOS tables must be able to hold, checked where the VMI is created: a
/// VM's template may carry any string, as in KubeVirt (whose libvirt refuses a malformed UUID
/// only when the VMI starts); the VMI made of it is refused here with the field's path.
fn validate_smbios(domain: &DomainSpec, errors: &mut Vec<FieldError>) {
    let Some(firmware) = &domain.firmware else {
        return;
    };
    let path = Path::root("spec").child("domain").child("firmware");
    if let Some(uuid) = firmware.uuid.as_deref().filter(|u| !u.is_empty()) {
        if contract::smbios::parse_uuid(uuid).is_none() {
            errors.push(FieldError::invalid(
                path.child("uuid"),
                format!(
                    "{uuid:?} is not a UUID (8-4-4-4-12 hexadecimal digits): it is the \
                     guest's SMBIOS system UUID, 16 bytes"
                ),
            ));
        }
    }
    if let Some(problem) = firmware
        .serial
        .as_deref()
        .and_then(contract::smbios::string_problem)
    {
        errors.push(FieldError::invalid(
            path.child("serial"),
            format!("the SMBIOS serial number {problem}"),
        ));
    }
}

/// Validates an update of a VMI: the spec is immutable once created, as in KubeVirt.
pub fn validate_vmi_update(
    old: &VirtualMachineInstance,
    new: &VirtualMachineInstance,
) -> Result<(), Vec<FieldError>> {
    if old.spec != new.spec {
        return Err(vec![FieldError::forbidden(
            Path::root("spec"),
            "the spec of a VirtualMachineInstance cannot be changed after creation",
        )]);
    }
    Ok(())
}

/// Validates a VMI spec found at `path` (`spec`, or `spec.template.spec` in a VM).
pub fn validate_vmi_spec(
    spec: &VirtualMachineInstanceSpec,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    reject_other(&spec.other, "v1.VirtualMachineInstanceSpec", path, errors);
    validate_domain(&spec.domain, &path.child("domain"), errors);
    validate_volumes(spec, path, errors);
    validate_networks(spec, path, errors);

    if let Some(grace) = spec.termination_grace_period_seconds {
        if grace < 0 {
            errors.push(FieldError::invalid(
                path.child("terminationGracePeriodSeconds"),
                format!("{grace} must not be negative"),
            ));
        }
    }
    if let Some(strategy) = &spec.eviction_strategy {
        if !EVICTION_STRATEGIES.contains(&strategy.as_str()) {
            errors.push(FieldError::invalid(
                path.child("evictionStrategy"),
                format!("{strategy:?} must be one of {EVICTION_STRATEGIES:?}"),
            ));
        }
    }
    if let Some(strategy) = &spec.start_strategy {
        if strategy != "Paused" {
            errors.push(FieldError::invalid(
                path.child("startStrategy"),
                format!("{strategy:?} must be \"Paused\""),
            ));
        }
    }
    if let Some(arch) = &spec.architecture {
        if arch != "amd64" {
            errors.push(FieldError::value_not_supported(
                path.child("architecture"),
                arch,
                "only amd64",
            ));
        }
    }
    if let Some(hostname) = &spec.hostname {
        check_dns_label(hostname, path.child("hostname"), errors);
    }
    if let Some(subdomain) = &spec.subdomain {
        check_dns_label(subdomain, path.child("subdomain"), errors);
    }
    let rng = usize::from(spec.domain.devices.rng.is_some());
    let vsock = usize::from(spec.domain.devices.autoattach_vsock == Some(true));
    let virtio =
        spec.domain.devices.disks.len() + spec.domain.devices.interfaces.len() + rng + vsock;
    if virtio > MAX_DEVICES {
        errors.push(FieldError::invalid(
            path.child("domain").child("devices"),
            format!(
                "{virtio} virtio devices (disks + interfaces + rng + vsock), at most {MAX_DEVICES} fit a microVM"
            ),
        ));
    }
}

fn validate_domain(domain: &DomainSpec, path: &Path, errors: &mut Vec<FieldError>) {
    reject_other(&domain.other, "v1.DomainSpec", path, errors);
    if let Some(cpu) = &domain.cpu {
        validate_cpu(cpu, &path.child("cpu"), errors);
    }
    validate_memory(domain, path, errors);
    if let Some(firmware) = &domain.firmware {
        let path = path.child("firmware");
        reject_other(&firmware.other, "v1.Firmware", &path, errors);
        if let Some(bootloader) = &firmware.bootloader {
            validate_bootloader(bootloader, &path.child("bootloader"), errors);
        }
        if let Some(kernel_boot) = &firmware.kernel_boot {
            let path = path.child("kernelBoot");
            reject_other(&kernel_boot.other, "v1.KernelBoot", &path, errors);
            match &kernel_boot.container {
                None if kernel_boot.kernel_args.is_some() => errors.push(FieldError::required(
                    path.child("container"),
                    "kernelArgs needs a container that holds the kernel",
                )),
                None => {}
                Some(container) => {
                    let path = path.child("container");
                    reject_other(&container.other, "v1.KernelBootContainer", &path, errors);
                    if container.image.is_empty() {
                        errors.push(FieldError::required(
                            path.child("image"),
                            "must not be empty",
                        ));
                    }
                    if container.kernel_path.is_none() && container.initrd_path.is_none() {
                        errors.push(FieldError::required(
                            path.child("kernelPath"),
                            "one of kernelPath and initrdPath must be set",
                        ));
                    }
                    for (field, value) in [
                        ("kernelPath", &container.kernel_path),
                        ("initrdPath", &container.initrd_path),
                    ] {
                        if let Some(value) = value {
                            if !value.starts_with('/') || value.split('/').any(|c| c == "..") {
                                errors.push(FieldError::invalid(
                                    path.child(field),
                                    format!("{value:?} must be an absolute path without '..'"),
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    validate_devices(&domain.devices, &path.child("devices"), errors);
    let bootloader = domain.firmware.as_ref().and_then(|f| f.bootloader.as_ref());
    if domain.devices.autoattach_graphics_device == Some(true) && bootloader.is_none() {
        errors.push(FieldError::value_not_supported(
            path.child("devices").child("autoattachGraphicsDevice"),
            "true",
            "a graphics device (a VGA card, shown by VNC) needs firmware.bootloader: a \
             firmware boot runs on QEMU's q35 machine, which has one; a direct kernel boot runs \
             on a microVM, which has none",
        ));
    }
}

/// Firmware boots on the QEMU backend: SeaBIOS (`bios`, KubeVirt's default) or OVMF without
/// Secure Boot (`efi.secureBoot: false`). Together with `kernelBoot`, as in KubeVirt, the firmware
/// runs and boots the kernelBoot kernel.
fn validate_bootloader(bootloader: &Bootloader, path: &Path, errors: &mut Vec<FieldError>) {
    reject_other(&bootloader.other, "v1.Bootloader", path, errors);
    if bootloader.bios.is_some() && bootloader.efi.is_some() {
        errors.push(FieldError::invalid(
            path.clone(),
            "bios and efi are mutually exclusive: set one",
        ));
    }
    if let Some(bios) = &bootloader.bios {
        reject_other(&bios.other, "v1.BIOS", &path.child("bios"), errors);
    }
    if let Some(efi) = &bootloader.efi {
        let path = path.child("efi");
        reject_other(&efi.other, "v1.EFI", &path, errors);
        if efi.secure_boot != Some(false) {
            let value = if efi.secure_boot == Some(true) {
                "true"
            } else {
                "unset (KubeVirt's default: true)"
            };
            errors.push(FieldError::new(
                path.child("secureBoot"),
                FieldErrorKind::NotSupported,
                format!(
                    "{value} is not supported by ferrovirt: Secure Boot (SMM, OVMF's secboot \
                     build with enrolled keys) is not implemented; set secureBoot: false"
                ),
            ));
        }
        if efi.persistent == Some(true) {
            errors.push(FieldError::new(
                path.child("persistent"),
                FieldErrorKind::NotSupported,
                "true is not supported by ferrovirt: the EFI variables live as long as the VMI \
                 (no backend storage keeps them across VMIs)",
            ));
        }
    }
}

fn validate_cpu(cpu: &Cpu, path: &Path, errors: &mut Vec<FieldError>) {
    reject_other(&cpu.other, "v1.CPU", path, errors);
    // A count of 0 is an unset one, as in KubeVirt (whose fields are `omitempty` integers): 1.
    let vcpus = cpu.vcpus();
    if vcpus > u64::from(MAX_VCPUS) {
        errors.push(FieldError::invalid(
            path.clone(),
            format!("{vcpus} vCPUs (cores x sockets x threads), at most {MAX_VCPUS}"),
        ));
    }
    if let Some(model) = &cpu.model {
        if !CPU_MODELS.contains(&model.as_str()) {
            errors.push(FieldError::value_not_supported(
                path.child("model"),
                model,
                "the guest sees the host's CPU: use host-passthrough or host-model",
            ));
        }
    }
}

fn validate_memory(domain: &DomainSpec, path: &Path, errors: &mut Vec<FieldError>) {
    let mut check = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity, at: Path| {
        match quantity::to_u64(q) {
            Ok(bytes) => Some((bytes, at)),
            Err(e) => {
                errors.push(FieldError::invalid(at, e.to_string()));
                None
            }
        }
    };
    let guest = domain.memory.as_ref().and_then(|m| {
        m.guest
            .as_ref()
            .and_then(|q| check(q, path.child("memory").child("guest")))
    });
    let resources_path = path.child("resources");
    let mut requests = None;
    let mut limits = None;
    if let Some(resources) = &domain.resources {
        for (name, map, slot) in [
            ("requests", &resources.requests, &mut requests),
            ("limits", &resources.limits, &mut limits),
        ] {
            let Some(map) = map else { continue };
            for (resource, value) in map {
                let at = resources_path.child(name).child(resource);
                let parsed = check(value, at);
                if resource == "memory" {
                    *slot = parsed;
                }
            }
        }
    }
    if let Some(memory) = &domain.memory {
        reject_other(&memory.other, "v1.Memory", &path.child("memory"), errors);
    }
    if let Some(resources) = &domain.resources {
        reject_other(
            &resources.other,
            "v1.ResourceRequirements",
            &resources_path,
            errors,
        );
    }
    if let Some((request, at)) = &requests {
        if (1..MIN_MEMORY_REQUEST_BYTES).contains(request) {
            errors.push(FieldError::invalid(
                at.clone(),
                format!(
                    "{request} bytes is below the minimum memory request of 1M \
                     ({MIN_MEMORY_REQUEST_BYTES} bytes)"
                ),
            ));
        }
    }
    if let (Some((guest, at)), Some((limit, _))) = (&guest, &limits) {
        if guest > limit {
            errors.push(FieldError::invalid(
                at.clone(),
                format!("{guest} bytes is more than resources.limits.memory ({limit} bytes)"),
            ));
        }
    }
    if let (Some((request, at)), Some((limit, _))) = (&requests, &limits) {
        if request > limit {
            errors.push(FieldError::invalid(
                at.clone(),
                format!("{request} bytes is more than resources.limits.memory ({limit} bytes)"),
            ));
        }
    }
}

fn validate_devices(devices: &Devices, path: &Path, errors: &mut Vec<FieldError>) {
    reject_other(&devices.other, "v1.Devices", path, errors);
    if devices.autoattach_mem_balloon == Some(true) {
        errors.push(FieldError::value_not_supported(
            path.child("autoattachMemBalloon"),
            "true",
            "a ferrovirt microVM has no such device; only false",
        ));
    }
    if let Some(rng) = &devices.rng {
        reject_other(&rng.other, "v1.Rng", &path.child("rng"), errors);
    }

    let disks = path.child("disks");
    let mut names = BTreeSet::new();
    let mut boot_orders = BTreeMap::new();
    for (i, disk) in devices.disks.iter().enumerate() {
        let at = disks.index(i);
        reject_other(&disk.other, "v1.Disk", &at, errors);
        check_dns_label(&disk.name, at.child("name"), errors);
        if !disk.name.is_empty() && !names.insert(disk.name.as_str()) {
            errors.push(FieldError::duplicate(at.child("name"), &disk.name));
        }
        if let Some(target) = &disk.disk {
            reject_other(&target.other, "v1.DiskTarget", &at.child("disk"), errors);
            if let Some(bus) = &target.bus {
                if bus != "virtio" {
                    errors.push(FieldError::value_not_supported(
                        at.child("disk").child("bus"),
                        bus,
                        "a microVM has only the virtio bus",
                    ));
                }
            }
        }
        if let Some(order) = disk.boot_order {
            if order == 0 {
                errors.push(FieldError::invalid(
                    at.child("bootOrder"),
                    "must be at least 1",
                ));
            } else if let Some(other) = boot_orders.insert(order, i) {
                errors.push(FieldError::invalid(
                    at.child("bootOrder"),
                    format!("{order} is also the bootOrder of disks[{other}]"),
                ));
            }
        }
    }

    let interfaces = path.child("interfaces");
    let mut names = BTreeSet::new();
    for (i, interface) in devices.interfaces.iter().enumerate() {
        let at = interfaces.index(i);
        validate_interface(interface, &at, errors);
        if !interface.name.is_empty() && !names.insert(interface.name.as_str()) {
            errors.push(FieldError::duplicate(at.child("name"), &interface.name));
        }
    }
}

fn validate_volumes(spec: &VirtualMachineInstanceSpec, path: &Path, errors: &mut Vec<FieldError>) {
    let volumes_path = path.child("volumes");
    let mut names = BTreeSet::new();
    for (i, volume) in spec.volumes.iter().enumerate() {
        let at = volumes_path.index(i);
        validate_volume(volume, &at, errors);
        if !volume.name.is_empty() && !names.insert(volume.name.as_str()) {
            errors.push(FieldError::duplicate(at.child("name"), &volume.name));
        }
    }
    let disk_names: BTreeSet<_> = spec
        .domain
        .devices
        .disks
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    let disks_path = path.child("domain").child("devices").child("disks");
    for (i, disk) in spec.domain.devices.disks.iter().enumerate() {
        if !disk.name.is_empty() && !names.contains(disk.name.as_str()) {
            errors.push(FieldError::invalid(
                disks_path.index(i).child("name"),
                format!("{:?} has no volume of that name in spec.volumes", disk.name),
            ));
        }
    }
    for (i, volume) in spec.volumes.iter().enumerate() {
        if !volume.name.is_empty() && !disk_names.contains(volume.name.as_str()) {
            errors.push(FieldError::invalid(
                volumes_path.index(i).child("name"),
                format!(
                    "{:?} is not used by any disk in spec.domain.devices.disks",
                    volume.name
                ),
            ));
        }
    }
}

fn validate_volume(volume: &Volume, at: &Path, errors: &mut Vec<FieldError>) {
    reject_other(&volume.other, "v1.Volume", at, errors);
    check_dns_label(&volume.name, at.child("name"), errors);
    let sources = volume.sources();
    let other_source = !volume.other.is_empty();
    match sources.len() {
        0 if !other_source => errors.push(FieldError::required(
            at.clone(),
            "a volume source is required: containerDisk, cloudInitNoCloud, emptyDisk or \
             persistentVolumeClaim",
        )),
        0 | 1 => {}
        _ => errors.push(FieldError::invalid(
            at.clone(),
            format!("only one volume source may be set, found {sources:?}"),
        )),
    }
    if let Some(source) = &volume.container_disk {
        let at = at.child("containerDisk");
        reject_other(&source.other, "v1.ContainerDiskSource", &at, errors);
        if source.image.trim().is_empty() {
            errors.push(FieldError::required(at.child("image"), "must not be empty"));
        }
        if let Some(disk_path) = &source.path {
            if !disk_path.starts_with('/') || disk_path.split('/').any(|c| c == "..") {
                errors.push(FieldError::invalid(
                    at.child("path"),
                    format!("{disk_path:?} must be an absolute path without '..'"),
                ));
            }
        }
        check_pull_policy(source.image_pull_policy.as_deref(), &at, errors);
    }
    if let Some(source) = &volume.cloud_init_no_cloud {
        let at = at.child("cloudInitNoCloud");
        reject_other(&source.other, "v1.CloudInitNoCloudSource", &at, errors);
        let pairs = [
            (
                "userData",
                &source.user_data,
                "userDataBase64",
                &source.user_data_base64,
            ),
            (
                "networkData",
                &source.network_data,
                "networkDataBase64",
                &source.network_data_base64,
            ),
        ];
        for (plain, plain_value, encoded, encoded_value) in pairs {
            if plain_value.is_some() && encoded_value.is_some() {
                errors.push(FieldError::invalid(
                    at.child(encoded),
                    format!("only one of {plain} and {encoded} may be set"),
                ));
            }
            if let Some(value) = encoded_value {
                // The launcher decodes with the same function.
                if let Err(e) = contract::base64::decode(value) {
                    errors.push(FieldError::invalid(at.child(encoded), e.to_string()));
                }
            }
        }
        let secret_given = source.other.contains_key("secretRef");
        if source.user_data.is_none() && source.user_data_base64.is_none() && !secret_given {
            errors.push(FieldError::required(
                at.child("userData"),
                "one of userData and userDataBase64 is required",
            ));
        }
    }
    if let Some(source) = &volume.empty_disk {
        let at = at.child("emptyDisk");
        reject_other(&source.other, "v1.EmptyDiskSource", &at, errors);
        match quantity::to_u64(&source.capacity) {
            Ok(0) => errors.push(FieldError::invalid(
                at.child("capacity"),
                "must be more than 0",
            )),
            Ok(_) => {}
            Err(e) => errors.push(FieldError::invalid(at.child("capacity"), e.to_string())),
        }
    }
    if let Some(source) = &volume.persistent_volume_claim {
        let at = at.child("persistentVolumeClaim");
        reject_other(
            &source.other,
            "v1.PersistentVolumeClaimVolumeSource",
            &at,
            errors,
        );
        if source.claim_name.is_empty() {
            errors.push(FieldError::required(
                at.child("claimName"),
                "must not be empty",
            ));
        }
    }
    if volume.data_volume.is_some() {
        errors.push(FieldError::new(
            at.child("dataVolume"),
            super::FieldErrorKind::NotSupported,
            "not supported by ferrovirt: DataVolumes need CDI; use a persistentVolumeClaim",
        ));
    }
}

fn check_pull_policy(policy: Option<&str>, at: &Path, errors: &mut Vec<FieldError>) {
    if let Some(policy) = policy {
        if !["Always", "IfNotPresent", "Never"].contains(&policy) {
            errors.push(FieldError::invalid(
                at.child("imagePullPolicy"),
                format!("{policy:?} must be Always, IfNotPresent or Never"),
            ));
        }
    }
}
