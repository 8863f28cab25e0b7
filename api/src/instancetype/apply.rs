//! Applying an instance type and a preference to a VMI spec, and checking a preference's
//! requirements: KubeVirt's rules, on the JSON of the spec.
//!
//! An instance type owns what it sets: a VMI (or VM template) that sets the same field
//! conflicts, and nothing is applied ([`apply`] returns the conflicting paths). A preference
//! only fills in what is unset (KubeVirt's two exceptions, `preferredAcpi` and
//! `preferredDisableHotplug`, overwrite).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Map, Value};

use crate::quantity;

/// KubeVirt's message for fields that conflict with the instance type.
pub fn conflict_message(paths: &[String]) -> String {
    format!(
        "VM field(s) {} conflicts with selected instance type",
        paths.join(", ")
    )
}

/// Applies `instancetype` and `preference` (their specs) to `spec`, a VMI spec found at `path`
/// (`spec` for a VMI, `spec.template.spec` for a VM), and to the VMI's `annotations`. With
/// conflicts nothing of the preference is applied and the conflicting paths are returned.
pub fn apply(
    path: &str,
    instancetype: Option<&Value>,
    preference: Option<&Value>,
    spec: &mut Value,
    annotations: &mut BTreeMap<String, String>,
) -> Result<(), Vec<String>> {
    if !spec.is_object() {
        *spec = json!({});
    }
    if let Some(it) = instancetype {
        let mut conflicts = Vec::new();
        apply_instancetype(path, it, preference, spec, annotations, &mut conflicts);
        if !conflicts.is_empty() {
            return Err(conflicts);
        }
    }
    if let Some(pref) = preference {
        apply_preference(pref, spec, annotations);
    }
    Ok(())
}

/// `value[key]`, made an object first when it is not one.
fn object<'a>(value: &'a mut Value, key: &str) -> &'a mut Value {
    let map = value.as_object_mut().expect("an object");
    let slot = map.entry(key).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot
}

/// Whether `value[key]` holds something (not absent, not null).
fn set(value: &Value, key: &str) -> bool {
    value.get(key).is_some_and(|v| !v.is_null())
}

/// Sets `value[key]` to `new` when it is unset.
fn fill(value: &mut Value, key: &str, new: &Value) {
    if !set(value, key) {
        object_map(value).insert(key.to_string(), new.clone());
    }
}

fn object_map(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = json!({});
    }
    value.as_object_mut().expect("an object")
}

fn truthy(value: &Value, key: &str) -> bool {
    value.get(key).and_then(Value::as_bool) == Some(true)
}

fn apply_instancetype(
    path: &str,
    it: &Value,
    preference: Option<&Value>,
    spec: &mut Value,
    annotations: &mut BTreeMap<String, String>,
    conflicts: &mut Vec<String>,
) {
    let at = |field: &str| format!("{path}.{field}");
    // Scheduling.
    for field in ["nodeSelector", "schedulerName"] {
        let wanted = it.get(field).filter(|v| match v {
            Value::String(s) => !s.is_empty(),
            Value::Null => false,
            _ => true,
        });
        if let Some(wanted) = wanted {
            if set(spec, field) && spec[field] != json!("") {
                conflicts.push(at(field));
            } else {
                object_map(spec).insert(field.to_string(), wanted.clone());
            }
        }
    }

    let domain = object(spec, "domain");
    let resources = domain.get("resources").cloned().unwrap_or(Value::Null);
    // CPU.
    let cpu_it = &it["cpu"];
    {
        let cpu = object(domain, "cpu");
        let mut found = Vec::new();
        for (kind, field) in [("requests", "cpu"), ("limits", "cpu")] {
            if set(&resources[kind], field) {
                found.push(at(&format!("domain.resources.{kind}.{field}")));
            }
        }
        for field in ["sockets", "cores", "threads"] {
            if cpu.get(field).and_then(Value::as_u64).unwrap_or(0) != 0 {
                found.push(at(&format!("domain.cpu.{field}")));
            }
        }
        let it_model = cpu_it
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let vmi_model = cpu.get("model").and_then(Value::as_str).unwrap_or_default();
        if !it_model.is_empty() && !vmi_model.is_empty() {
            found.push(at("domain.cpu.model"));
        }
        for field in ["dedicatedCpuPlacement", "isolateEmulatorThread"] {
            let it_field = if field == "dedicatedCpuPlacement" {
                "dedicatedCPUPlacement"
            } else {
                field
            };
            if truthy(cpu_it, it_field) && truthy(cpu, field) {
                found.push(at(&format!("domain.cpu.{field}")));
            }
        }
        for field in ["numa", "realtime"] {
            if set(cpu_it, field) && set(cpu, field) {
                found.push(at(&format!("domain.cpu.{field}")));
            }
        }
        if found.is_empty() {
            if !it_model.is_empty() {
                cpu["model"] = json!(it_model);
            }
            if truthy(cpu_it, "dedicatedCPUPlacement") {
                cpu["dedicatedCpuPlacement"] = json!(true);
            }
            if truthy(cpu_it, "isolateEmulatorThread") {
                cpu["isolateEmulatorThread"] = json!(true);
            }
            for field in ["numa", "realtime", "maxSockets"] {
                if set(cpu_it, field) {
                    cpu[field] = cpu_it[field].clone();
                }
            }
            let vcpus = cpu_it.get("guest").and_then(Value::as_u64).unwrap_or(0);
            let (sockets, cores, threads) = topology(vcpus, preference);
            cpu["sockets"] = json!(sockets);
            cpu["cores"] = json!(cores);
            cpu["threads"] = json!(threads);
        }
        conflicts.extend(found);
    }

    // Memory: the first conflict only, as KubeVirt reports it.
    let memory_it = &it["memory"];
    {
        let memory = object(domain, "memory");
        let conflict = if set(memory, "guest") {
            Some("domain.memory.guest")
        } else if set(memory_it, "hugepages") && set(memory, "hugepages") {
            Some("domain.memory.hugepages")
        } else if set(memory_it, "maxGuest") && set(memory, "maxGuest") {
            Some("domain.memory.maxGuest")
        } else if set(&resources["requests"], "memory") {
            Some("domain.resources.requests.memory")
        } else if set(&resources["limits"], "memory") {
            Some("domain.resources.limits.memory")
        } else {
            None
        };
        match conflict {
            Some(field) => conflicts.push(at(field)),
            None => {
                let guest = memory_it.get("guest").cloned().unwrap_or(json!("0"));
                memory["guest"] = guest.clone();
                for field in ["hugepages", "maxGuest"] {
                    if set(memory_it, field) {
                        memory[field] = memory_it[field].clone();
                    }
                }
                let percent = memory_it
                    .get("overcommitPercent")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                if percent > 0 {
                    if let Some(request) = overcommitted(&guest, percent) {
                        let resources = object(domain, "resources");
                        object(resources, "requests")["memory"] = json!(request);
                    }
                }
            }
        }
    }

    // Domain fields an instance type may set whole.
    for (field, it_field) in [
        ("ioThreadsPolicy", "ioThreadsPolicy"),
        ("launchSecurity", "launchSecurity"),
    ] {
        if set(it, it_field) {
            if set(domain, field) {
                conflicts.push(at(&format!("domain.{field}")));
            } else {
                domain[field] = it[it_field].clone();
            }
        }
    }
    if let Some(count) = it["ioThreads"].get("supplementalPoolThreadCount") {
        let io = object(domain, "ioThreads");
        if set(io, "supplementalPoolThreadCount") {
            conflicts.push(at("domain.ioThreads.supplementalPoolThreadCount"));
        } else {
            io["supplementalPoolThreadCount"] = count.clone();
        }
    }
    for field in ["gpus", "hostDevices"] {
        let wanted = it[field].as_array().filter(|a| !a.is_empty());
        if let Some(wanted) = wanted {
            let devices = object(domain, "devices");
            if devices[field].as_array().is_some_and(|a| !a.is_empty()) {
                conflicts.push(at(&format!("domain.devices.{field}")));
            } else {
                devices[field] = json!(wanted);
            }
        }
    }

    // Annotations: a different value on the VMI conflicts (KubeVirt's path has no prefix).
    if let Some(wanted) = it["annotations"].as_object() {
        for (key, value) in wanted {
            let value = value.as_str().unwrap_or_default();
            match annotations.get(key) {
                Some(have) if have != value => conflicts.push(format!("annotations.{key}")),
                Some(_) => {}
                None => {
                    annotations.insert(key.clone(), value.to_string());
                }
            }
        }
    }
}

/// KubeVirt's overcommitted memory request: `guest * (1 - percent/100)` in 32-bit floating
/// point, as it computes it, so that both give the same bytes.
fn overcommitted(guest: &Value, percent: u64) -> Option<String> {
    let guest = match guest {
        Value::String(s) => quantity::to_u64(&Quantity(s.clone())).ok()?,
        Value::Number(n) => n.as_u64()?,
        _ => return None,
    };
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let bytes = (guest as f32 * (1.0 - percent as f32 / 100.0)) as i64;
    Some(bytes.to_string())
}

/// The preference's CPU topology: `preferredCPUTopology` (KubeVirt's default: sockets).
pub(crate) fn preferred_topology(preference: Option<&Value>) -> String {
    preference
        .and_then(|p| p["cpu"]["preferredCPUTopology"].as_str())
        .filter(|t| !t.is_empty())
        .unwrap_or("preferSockets")
        .to_string()
}

/// How a preference spreads vCPUs: (ratio, across).
pub(crate) fn spread_options(preference: Option<&Value>) -> (u64, String) {
    let Some(p) = preference else {
        return (2, "SocketsCores".to_string());
    };
    let mut ratio = 2;
    if let Some(r) = p["preferSpreadSocketToCoreRatio"]
        .as_u64()
        .filter(|r| *r != 0)
    {
        ratio = r;
    }
    let options = &p["cpu"]["spreadOptions"];
    if let Some(r) = options["ratio"].as_u64() {
        ratio = r;
    }
    let across = options["across"]
        .as_str()
        .filter(|a| !a.is_empty())
        .unwrap_or("SocketsCores");
    (ratio, across.to_string())
}

/// (sockets, cores, threads) for `vcpus` by the preference's topology.
pub fn topology(vcpus: u64, preference: Option<&Value>) -> (u64, u64, u64) {
    if vcpus == 1 {
        return (1, 1, 1);
    }
    match preferred_topology(preference).as_str() {
        "cores" | "preferCores" => (1, vcpus, 1),
        "threads" | "preferThreads" => (1, 1, vcpus),
        "spread" | "preferSpread" => {
            let (ratio, across) = spread_options(preference);
            let ratio = ratio.max(1);
            match across.as_str() {
                "CoresThreads" => (1, vcpus / ratio, ratio),
                "SocketsCoresThreads" => (vcpus / 2 / ratio, ratio, 2),
                _ => (vcpus / ratio, ratio, 1),
            }
        }
        _ => (vcpus, 1, 1),
    }
}

fn apply_preference(pref: &Value, spec: &mut Value, annotations: &mut BTreeMap<String, String>) {
    let networks = spec["networks"].clone();
    let domain = object(spec, "domain");

    if let Some(features) = pref["cpu"]["preferredCPUFeatures"].as_array() {
        if set(domain, "cpu") {
            let cpu = object(domain, "cpu");
            let list = cpu
                .as_object_mut()
                .expect("an object")
                .entry("features")
                .or_insert_with(|| json!([]));
            if let Some(list) = list.as_array_mut() {
                for feature in features {
                    let name = &feature["name"];
                    if !list.iter().any(|f| &f["name"] == name) {
                        list.push(feature.clone());
                    }
                }
            }
        }
    }

    if let Some(devices_pref) = pref.get("devices").filter(|d| d.is_object()) {
        apply_device_preferences(devices_pref, object(domain, "devices"), &networks);
    }

    if let Some(features_pref) = pref.get("features").filter(|f| f.is_object()) {
        let features = object(domain, "features");
        if set(features_pref, "preferredAcpi") {
            features["acpi"] = features_pref["preferredAcpi"].clone();
        }
        for field in ["Apic", "Kvm", "Pvspinlock", "Smm"] {
            let from = format!("preferred{field}");
            if set(features_pref, &from) {
                fill(features, &field.to_ascii_lowercase(), &features_pref[&from]);
            }
        }
        if let Some(hyperv) = features_pref["preferredHyperv"].as_object() {
            let have = object(features, "hyperv");
            for (name, value) in hyperv {
                if !value.is_null() {
                    fill(have, name, value);
                }
            }
        }
    }

    if let Some(fw) = pref.get("firmware").filter(|f| f.is_object()) {
        apply_firmware_preferences(fw, domain);
    }

    if let Some(machine) = pref["machine"]["preferredMachineType"]
        .as_str()
        .filter(|m| !m.is_empty())
    {
        let have = object(domain, "machine");
        if have["type"].as_str().unwrap_or_default().is_empty() {
            have["type"] = json!(machine);
        }
    }

    if let Some(clock_pref) = pref.get("clock").filter(|c| c.is_object()) {
        if let Some(offset) = clock_pref
            .get("preferredClockOffset")
            .filter(|o| o.is_object())
        {
            let clock = object(domain, "clock");
            if !set(clock, "utc") && !set(clock, "timezone") {
                for (key, value) in offset.as_object().expect("an object") {
                    clock[key] = value.clone();
                }
            }
        }
        if set(clock_pref, "preferredTimer") {
            fill(
                object(domain, "clock"),
                "timer",
                &clock_pref["preferredTimer"],
            );
        }
    }

    if set(pref, "preferredLaunchSecurity") {
        fill(domain, "launchSecurity", &pref["preferredLaunchSecurity"]);
    }

    for (from, to) in [
        ("preferredSubdomain", "subdomain"),
        (
            "preferredTerminationGracePeriodSeconds",
            "terminationGracePeriodSeconds",
        ),
        ("preferredArchitecture", "architecture"),
    ] {
        let Some(value) = pref.get(from).filter(|v| !v.is_null() && *v != &json!("")) else {
            continue;
        };
        let empty = spec.get(to).is_none_or(|v| v.is_null() || v == &json!(""));
        if empty {
            spec[to] = value.clone();
        }
    }

    if let Some(wanted) = pref["annotations"].as_object() {
        for (key, value) in wanted {
            annotations
                .entry(key.clone())
                .or_insert_with(|| value.as_str().unwrap_or_default().to_string());
        }
    }
}

fn apply_device_preferences(pref: &Value, devices: &mut Value, networks: &Value) {
    for (from, to) in [
        ("preferredUseVirtioTransitional", "useVirtioTransitional"),
        ("preferredBlockMultiQueue", "blockMultiQueue"),
        (
            "preferredNetworkInterfaceMultiQueue",
            "networkInterfaceMultiQueue",
        ),
        (
            "preferredAutoattachGraphicsDevice",
            "autoattachGraphicsDevice",
        ),
        ("preferredAutoattachMemBalloon", "autoattachMemBalloon"),
        ("preferredAutoattachPodInterface", "autoattachPodInterface"),
        (
            "preferredAutoattachSerialConsole",
            "autoattachSerialConsole",
        ),
        ("preferredAutoattachInputDevice", "autoattachInputDevice"),
        ("preferredRng", "rng"),
        ("preferredTPM", "tpm"),
    ] {
        if set(pref, from) {
            fill(devices, to, &pref[from]);
        }
    }
    if set(pref, "preferredDisableHotplug") {
        devices["disableHotplug"] = pref["preferredDisableHotplug"].clone();
    }
    if let Some(model) = pref["preferredSoundModel"].as_str() {
        if let Some(sound) = devices.get_mut("sound").filter(|s| s.is_object()) {
            if sound["model"].as_str().unwrap_or_default().is_empty() {
                sound["model"] = json!(model);
            }
        }
    }
    if let Some(video) = pref["preferredVideoType"].as_str() {
        let have = object(devices, "video");
        if have["type"].as_str().unwrap_or_default().is_empty() {
            have["type"] = json!(video);
        }
    }

    let text = |key: &str| pref[key].as_str().filter(|s| !s.is_empty());
    if let Some(disks) = devices.get_mut("disks").and_then(Value::as_array_mut) {
        for disk in disks.iter_mut().filter(|d| d.is_object()) {
            if !set(disk, "disk") && !set(disk, "cdrom") && !set(disk, "lun") {
                disk["disk"] = json!({});
            }
            if set(disk, "disk") {
                let target = object(disk, "disk");
                if let Some(bus) = text("preferredDiskBus") {
                    fill(target, "bus", &json!(bus));
                }
                let virtio = target["bus"] == json!("virtio");
                for (from, to) in [
                    ("preferredDiskBlockSize", "blockSize"),
                    ("preferredDiskCache", "cache"),
                    ("preferredDiskIO", "io"),
                ] {
                    if set(pref, from) {
                        fill(disk, to, &pref[from]);
                    }
                }
                if virtio && set(pref, "preferredDiskDedicatedIoThread") {
                    fill(
                        disk,
                        "dedicatedIOThread",
                        &pref["preferredDiskDedicatedIoThread"],
                    );
                }
            }
            for (target, from) in [("cdrom", "preferredCdromBus"), ("lun", "preferredLunBus")] {
                if let (true, Some(bus)) = (set(disk, target), text(from)) {
                    fill(object(disk, target), "bus", &json!(bus));
                }
            }
        }
    }
    if let Some(interfaces) = devices.get_mut("interfaces").and_then(Value::as_array_mut) {
        for iface in interfaces.iter_mut().filter(|i| i.is_object()) {
            if let Some(model) = text("preferredInterfaceModel") {
                if iface["model"].as_str().unwrap_or_default().is_empty() {
                    iface["model"] = json!(model);
                }
            }
            if set(pref, "preferredInterfaceMasquerade") {
                let bound = ["bridge", "masquerade", "sriov", "passt", "binding", "slirp"]
                    .iter()
                    .any(|b| set(iface, b));
                let on_pod = networks.as_array().is_some_and(|nets| {
                    nets.iter()
                        .any(|n| n["name"] == iface["name"] && set(n, "pod"))
                });
                if !bound && on_pod {
                    iface["masquerade"] = pref["preferredInterfaceMasquerade"].clone();
                }
            }
        }
    }
    if let Some(inputs) = devices.get_mut("inputs").and_then(Value::as_array_mut) {
        for input in inputs.iter_mut().filter(|i| i.is_object()) {
            for (from, to) in [("preferredInputBus", "bus"), ("preferredInputType", "type")] {
                if let Some(value) = text(from) {
                    if input[to].as_str().unwrap_or_default().is_empty() {
                        input[to] = json!(value);
                    }
                }
            }
        }
    }
    if let Some(model) = text("preferredPanicDeviceModel") {
        let panics = devices
            .as_object_mut()
            .expect("an object")
            .entry("panicDevices")
            .or_insert_with(|| json!([]));
        if let Some(list) = panics.as_array_mut() {
            if list.is_empty() {
                list.push(json!({"model": model}));
            }
            for device in list.iter_mut().filter(|d| d.is_object()) {
                fill(device, "model", &json!(model));
            }
        }
    }
}

fn apply_firmware_preferences(fw: &Value, domain: &mut Value) {
    let firmware = object(domain, "firmware");
    let bootloader = object(firmware, "bootloader");
    let has_bios = set(bootloader, "bios");
    let has_efi = set(bootloader, "efi");
    if truthy(fw, "preferredUseBios") && !has_bios && !has_efi {
        bootloader["bios"] = json!({});
    }
    if set(fw, "preferredUseBiosSerial") && set(bootloader, "bios") {
        fill(
            object(bootloader, "bios"),
            "useSerial",
            &fw["preferredUseBiosSerial"],
        );
    }
    if set(fw, "preferredEfi") {
        if !set(bootloader, "efi") && !set(bootloader, "bios") {
            bootloader["efi"] = fw["preferredEfi"].clone();
        }
    } else {
        if truthy(fw, "preferredUseEfi") && !set(bootloader, "efi") && !set(bootloader, "bios") {
            bootloader["efi"] = json!({});
        }
        if set(fw, "preferredUseSecureBoot") && set(bootloader, "efi") {
            fill(
                object(bootloader, "efi"),
                "secureBoot",
                &fw["preferredUseSecureBoot"],
            );
        }
    }
    // A firmware section the preference did not fill is not left behind empty.
    if bootloader.as_object().is_some_and(Map::is_empty) {
        firmware
            .as_object_mut()
            .expect("an object")
            .remove("bootloader");
    }
    if firmware.as_object().is_some_and(Map::is_empty) {
        domain
            .as_object_mut()
            .expect("an object")
            .remove("firmware");
    }
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
