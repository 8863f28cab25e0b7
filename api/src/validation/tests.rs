//! Table tests of validation: a valid VMI, and variants of it that each break one rule.

use serde_json::{json, Value};

use super::FieldErrorKind::{self, *};
use crate::object::KubeVirtObject;

/// A valid VMI: containerDisk + cloud-init + emptyDisk, the masquerade pod network, rng.
fn vmi() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "testvmi"},
        "spec": {
            "domain": {
                "cpu": {"cores": 2},
                "memory": {"guest": "128Mi"},
                "devices": {
                    "disks": [
                        {"name": "containerdisk", "disk": {"bus": "virtio"}},
                        {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                        {"name": "emptydisk", "disk": {"bus": "virtio"}}
                    ],
                    "interfaces": [{"name": "default", "masquerade": {}}],
                    "rng": {}
                }
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [
                {"name": "containerdisk", "containerDisk": {"image": "registry:5000/kubevirt/cirros-container-disk-demo:devel"}},
                {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#!/bin/sh\necho hi\n"}},
                {"name": "emptydisk", "emptyDisk": {"capacity": "2Gi"}}
            ]
        }
    })
}

fn vm(spec: Value) -> Value {
    let template = vmi()["spec"].clone();
    let mut vm = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "testvm"},
        "spec": {"template": {"metadata": {"labels": {"app": "a"}}, "spec": template}}
    });
    merge(&mut vm["spec"], spec);
    vm
}

/// Merges `patch` into `target` (JSON merge patch: null deletes).
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(&key);
                } else {
                    merge(target.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch,
    }
}

/// `base` with the value at JSON pointer `pointer` set (its parent must exist).
fn with(mut base: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer has a parent");
    match base.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(key.to_string(), value);
        }
        Some(Value::Array(items)) => items[key.parse::<usize>().expect("index")] = value,
        _ => panic!("{parent} is not an object or array"),
    }
    base
}

fn errors_of(object: Value) -> Vec<(String, FieldErrorKind)> {
    let object = KubeVirtObject::from_value(object).expect("parses");
    match object.validate() {
        Ok(()) => Vec::new(),
        Err(errors) => errors.into_iter().map(|e| (e.field, e.kind)).collect(),
    }
}

/// (case name, object, expected errors as (path, kind)).
type Case = (&'static str, Value, Vec<(&'static str, FieldErrorKind)>);

fn check(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for (name, object, want) in cases {
        let got = errors_of(object);
        let want: Vec<_> = want.into_iter().map(|(p, k)| (p.to_string(), k)).collect();
        if got != want {
            failures.push(format!("{name}:\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_base_objects_are_valid() {
    assert_eq!(errors_of(vmi()), vec![]);
    assert_eq!(errors_of(vm(json!({"runStrategy": "Always"}))), vec![]);
}

/// KubeVirt's functional suite's `libvmifact.NewGuestless()`: no disks, no volumes, a 1Mi
/// memory request, the default pod network.
fn guestless_vmi() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "guestless"},
        "spec": {
            "domain": {
                "resources": {"requests": {"memory": "1Mi"}},
                "devices": {}
            }
        }
    })
}

#[test]
fn a_guestless_vmi_is_valid() {
    assert_eq!(errors_of(guestless_vmi()), vec![]);
    // With the defaults virt-api's mutating webhook applies first (memory.guest, the pod
    // interface and network).
    let mut defaulted: crate::VirtualMachineInstance =
        serde_json::from_value(guestless_vmi()).expect("parses");
    crate::defaults::default_vmi(&mut defaulted);
    assert_eq!(crate::validation::validate_vmi(&defaulted), Ok(()));
    // memory.guest instead of a request, and inside a VM's template.
    let guest = with(
        guestless_vmi(),
        "/spec/domain",
        json!({"memory": {"guest": "1Mi"}, "devices": {}}),
    );
    assert_eq!(errors_of(guest), vec![]);
    let vm = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "guestless"},
        "spec": {"runStrategy": "Always", "template": {"spec": guestless_vmi()["spec"].clone()}}
    });
    assert_eq!(errors_of(vm), vec![]);
}

#[test]
fn vmi_rules() {
    let disks = "/spec/domain/devices/disks";
    check(vec![
        (
            "duplicate disk names",
            with(vmi(), &format!("{disks}/2/name"), json!("cloudinitdisk")),
            vec![
                ("spec.domain.devices.disks[2].name", Duplicate),
                ("spec.volumes[2].name", Invalid),
            ],
        ),
        (
            "disk without volume",
            with(vmi(), &format!("{disks}/2/name"), json!("scratch")),
            vec![
                ("spec.domain.devices.disks[2].name", Invalid),
                ("spec.volumes[2].name", Invalid),
            ],
        ),
        (
            "volume without disk",
            with(
                vmi(),
                disks,
                json!([{"name": "containerdisk"}, {"name": "cloudinitdisk"}]),
            ),
            vec![("spec.volumes[2].name", Invalid)],
        ),
        (
            "guest memory of 1Mi (KubeVirt's qemuMinimumMemory): the VM boots with more",
            with(vmi(), "/spec/domain/memory/guest", json!("1Mi")),
            vec![],
        ),
        (
            "no guest memory",
            with(vmi(), "/spec/domain/memory/guest", json!("0")),
            vec![("spec.domain.memory.guest", Invalid)],
        ),
        (
            "a memory request of 1M, KubeVirt's minimum",
            with(vmi(), "/spec/domain/memory", json!({})).pipe(|v| {
                with(
                    v,
                    "/spec/domain/resources",
                    json!({"requests": {"memory": "1M"}}),
                )
            }),
            vec![],
        ),
        (
            "a memory request below 1M",
            with(vmi(), "/spec/domain/memory", json!({})).pipe(|v| {
                with(
                    v,
                    "/spec/domain/resources",
                    json!({"requests": {"memory": "999k"}}),
                )
            }),
            vec![("spec.domain.resources.requests.memory", Invalid)],
        ),
        (
            "a memory request below 1M beside a guest memory",
            with(
                vmi(),
                "/spec/domain/resources",
                json!({"requests": {"memory": "512Ki"}}),
            ),
            vec![("spec.domain.resources.requests.memory", Invalid)],
        ),
        (
            "memory is not a quantity",
            with(vmi(), "/spec/domain/memory/guest", json!("lots")),
            vec![("spec.domain.memory.guest", Invalid)],
        ),
        (
            "no memory at all",
            with(vmi(), "/spec/domain/memory", json!({})),
            vec![("spec.domain.memory.guest", Required)],
        ),
        (
            "memory from resources.requests is enough",
            with(vmi(), "/spec/domain/memory", json!({})).pipe(|v| {
                with(
                    v,
                    "/spec/domain/resources",
                    json!({"requests": {"memory": "64Mi"}}),
                )
            }),
            vec![],
        ),
        (
            "guest memory above the limit",
            with(
                vmi(),
                "/spec/domain/resources",
                json!({"limits": {"memory": "64Mi"}}),
            ),
            vec![("spec.domain.memory.guest", Invalid)],
        ),
        (
            "cores = 0 is unset, as in KubeVirt",
            with(vmi(), "/spec/domain/cpu/cores", json!(0)),
            vec![],
        ),
        (
            "too many vCPUs",
            with(vmi(), "/spec/domain/cpu", json!({"cores": 8, "sockets": 8})),
            vec![("spec.domain.cpu", Invalid)],
        ),
        (
            "cpu model other than the host's",
            with(
                vmi(),
                "/spec/domain/cpu",
                json!({"model": "Skylake-Server"}),
            ),
            vec![("spec.domain.cpu.model", NotSupported)],
        ),
        (
            "unsupported bus",
            with(vmi(), &format!("{disks}/0/disk/bus"), json!("sata")),
            vec![("spec.domain.devices.disks[0].disk.bus", NotSupported)],
        ),
        (
            "cdrom target",
            with(
                vmi(),
                &format!("{disks}/0"),
                json!({"name": "containerdisk", "cdrom": {}}),
            ),
            vec![("spec.domain.devices.disks[0].cdrom", NotSupported)],
        ),
        (
            "KubeVirt device Ferrovirt lacks",
            with(
                vmi(),
                "/spec/domain/devices/gpus",
                json!([{"name": "gpu1", "deviceName": "nvidia"}]),
            ),
            vec![("spec.domain.devices.gpus", NotSupported)],
        ),
        (
            "an empty list asks for nothing",
            with(vmi(), "/spec/domain/devices/gpus", json!([])),
            vec![],
        ),
        (
            "an empty object does ask (tpm: {} adds a TPM)",
            with(vmi(), "/spec/domain/devices/tpm", json!({})),
            vec![("spec.domain.devices.tpm", NotSupported)],
        ),
        (
            "a field nobody has",
            with(vmi(), "/spec/domain/devices/disks/0/dsik", json!({})),
            vec![("spec.domain.devices.disks[0].dsik", FieldErrorKind::Unknown)],
        ),
        (
            "balloon",
            with(
                vmi(),
                "/spec/domain/devices/autoattachMemBalloon",
                json!(true),
            ),
            vec![("spec.domain.devices.autoattachMemBalloon", NotSupported)],
        ),
        (
            "two volume sources",
            with(
                vmi(),
                "/spec/volumes/2/containerDisk",
                json!({"image": "x"}),
            ),
            vec![("spec.volumes[2]", Invalid)],
        ),
        (
            "no volume source",
            with(vmi(), "/spec/volumes/2", json!({"name": "emptydisk"})),
            vec![("spec.volumes[2]", Required)],
        ),
        (
            "dataVolume",
            with(
                vmi(),
                "/spec/volumes/2",
                json!({"name": "emptydisk", "dataVolume": {"name": "dv"}}),
            ),
            vec![("spec.volumes[2].dataVolume", NotSupported)],
        ),
        (
            "hostDisk",
            with(
                vmi(),
                "/spec/volumes/2",
                json!({"name": "emptydisk", "hostDisk": {"path": "/x", "type": "Disk"}}),
            ),
            vec![("spec.volumes[2].hostDisk", NotSupported)],
        ),
        (
            "containerDisk without image",
            with(vmi(), "/spec/volumes/0/containerDisk", json!({})),
            vec![("spec.volumes[0].containerDisk.image", Required)],
        ),
        (
            "empty containerDisk image",
            with(vmi(), "/spec/volumes/0/containerDisk/image", json!("")),
            vec![("spec.volumes[0].containerDisk.image", Required)],
        ),
        (
            "bad emptyDisk capacity",
            with(vmi(), "/spec/volumes/2/emptyDisk/capacity", json!("big")),
            vec![("spec.volumes[2].emptyDisk.capacity", Invalid)],
        ),
        (
            "userData and userDataBase64",
            with(
                vmi(),
                "/spec/volumes/1/cloudInitNoCloud/userDataBase64",
                json!("aGk="),
            ),
            vec![("spec.volumes[1].cloudInitNoCloud.userDataBase64", Invalid)],
        ),
        (
            "userDataBase64 that is not base64",
            with(
                vmi(),
                "/spec/volumes/1/cloudInitNoCloud",
                json!({"userDataBase64": "!!"}),
            ),
            vec![("spec.volumes[1].cloudInitNoCloud.userDataBase64", Invalid)],
        ),
        (
            "cloud-init without user data",
            with(
                vmi(),
                "/spec/volumes/1/cloudInitNoCloud",
                json!({"networkData": "version: 2"}),
            ),
            vec![("spec.volumes[1].cloudInitNoCloud.userData", Required)],
        ),
        (
            "interface without network",
            with(vmi(), "/spec/networks/0/name", json!("other")),
            vec![
                ("spec.domain.devices.interfaces[0].name", Invalid),
                ("spec.networks[0].name", Invalid),
            ],
        ),
        (
            "bridge binding",
            with(
                vmi(),
                "/spec/domain/devices/interfaces/0",
                json!({"name": "default", "bridge": {}}),
            ),
            vec![("spec.domain.devices.interfaces[0].bridge", NotSupported)],
        ),
        (
            "interface without binding",
            with(
                vmi(),
                "/spec/domain/devices/interfaces/0",
                json!({"name": "default"}),
            ),
            vec![("spec.domain.devices.interfaces[0].masquerade", Required)],
        ),
        (
            "multicast MAC",
            with(
                vmi(),
                "/spec/domain/devices/interfaces/0/macAddress",
                json!("01:00:00:00:00:01"),
            ),
            vec![("spec.domain.devices.interfaces[0].macAddress", Invalid)],
        ),
        (
            "port 0 and a bad protocol",
            with(
                vmi(),
                "/spec/domain/devices/interfaces/0/ports",
                json!([{"port": 0, "protocol": "SCTP"}]),
            ),
            vec![
                ("spec.domain.devices.interfaces[0].ports[0].port", Invalid),
                (
                    "spec.domain.devices.interfaces[0].ports[0].protocol",
                    Invalid,
                ),
            ],
        ),
        (
            "multus network",
            with(
                vmi(),
                "/spec/networks/0",
                json!({"name": "default", "multus": {"networkName": "n"}}),
            ),
            vec![("spec.networks[0].multus", NotSupported)],
        ),
        (
            "bad vmNetworkCIDR",
            with(
                vmi(),
                "/spec/networks/0/pod",
                json!({"vmNetworkCIDR": "10.0.2.0/32"}),
            ),
            vec![("spec.networks[0].pod.vmNetworkCIDR", Invalid)],
        ),
        (
            "negative grace period",
            with(vmi(), "/spec/terminationGracePeriodSeconds", json!(-1)),
            vec![("spec.terminationGracePeriodSeconds", Invalid)],
        ),
        (
            "bad eviction strategy",
            with(vmi(), "/spec/evictionStrategy", json!("Sometimes")),
            vec![("spec.evictionStrategy", Invalid)],
        ),
        (
            "disk name that is not a DNS label",
            with(vmi(), &format!("{disks}/2/name"), json!("Empty_Disk"))
                .pipe(|v| with(v, "/spec/volumes/2/name", json!("Empty_Disk"))),
            vec![
                ("spec.domain.devices.disks[2].name", Invalid),
                ("spec.volumes[2].name", Invalid),
            ],
        ),
        (
            "kernelArgs without a kernel",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({"kernelBoot": {"kernelArgs": "console=ttyS0"}}),
            ),
            vec![("spec.domain.firmware.kernelBoot.container", Required)],
        ),
        (
            "kernel path that escapes",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({"kernelBoot": {"container": {"image": "k", "kernelPath": "../vmlinuz"}}}),
            ),
            vec![(
                "spec.domain.firmware.kernelBoot.container.kernelPath",
                Invalid,
            )],
        ),
        (
            "BIOS firmware",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({"bootloader": {"bios": {"useSerial": true}}}),
            ),
            vec![],
        ),
        (
            "an empty bootloader is BIOS",
            with(vmi(), "/spec/domain/firmware", json!({"bootloader": {}})),
            vec![],
        ),
        (
            "UEFI firmware without Secure Boot",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({"bootloader": {"efi": {"secureBoot": false}}}),
            ),
            vec![],
        ),
        (
            "Secure Boot",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({"bootloader": {"efi": {"secureBoot": true}}}),
            ),
            vec![(
                "spec.domain.firmware.bootloader.efi.secureBoot",
                NotSupported,
            )],
        ),
        (
            "Secure Boot by default",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({"bootloader": {"efi": {}}}),
            ),
            vec![(
                "spec.domain.firmware.bootloader.efi.secureBoot",
                NotSupported,
            )],
        ),
        (
            "persistent EFI variables",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({"bootloader": {"efi": {"secureBoot": false, "persistent": true}}}),
            ),
            vec![(
                "spec.domain.firmware.bootloader.efi.persistent",
                NotSupported,
            )],
        ),
        (
            "BIOS and UEFI at once",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({"bootloader": {"bios": {}, "efi": {"secureBoot": false}}}),
            ),
            vec![("spec.domain.firmware.bootloader", Invalid)],
        ),
        (
            "a field of the bootloader nobody has",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({"bootloader": {"bios": {"color": "blue"}}}),
            ),
            vec![("spec.domain.firmware.bootloader.bios.color", Unknown)],
        ),
        (
            "kernelBoot with a bootloader, as KubeVirt accepts it",
            with(
                vmi(),
                "/spec/domain/firmware",
                json!({
                    "bootloader": {"efi": {"secureBoot": false}},
                    "kernelBoot": {"container": {"image": "k", "kernelPath": "/vmlinuz"}}
                }),
            ),
            vec![],
        ),
        (
            "a graphics device on a microVM (no bootloader)",
            with(
                vmi(),
                "/spec/domain/devices/autoattachGraphicsDevice",
                json!(true),
            ),
            vec![("spec.domain.devices.autoattachGraphicsDevice", NotSupported)],
        ),
        (
            "a graphics device with firmware (QEMU's q35 and its VGA card)",
            with(
                vmi(),
                "/spec/domain/devices/autoattachGraphicsDevice",
                json!(true),
            )
            .pipe(|v| {
                with(
                    v,
                    "/spec/domain/firmware",
                    json!({"bootloader": {"bios": {"useSerial": true}}}),
                )
            }),
            vec![],
        ),
        (
            "no graphics device, said out loud",
            with(
                vmi(),
                "/spec/domain/devices/autoattachGraphicsDevice",
                json!(false),
            ),
            vec![],
        ),
        (
            "architecture",
            with(vmi(), "/spec/architecture", json!("arm64")),
            vec![("spec.architecture", NotSupported)],
        ),
    ]);
}

trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl Pipe for Value {}

#[path = "object_tests.rs"]
mod objects;

/// `firmware.uuid` and `firmware.serial`: a VMI must carry what its SMBIOS tables can hold; a
/// VM's template may carry any string, as in KubeVirt (KubeVirt's clone tests give a VM
/// `fake-uuid`), and the VMI made of it is refused.
#[test]
fn the_smbios_uuid_and_serial() {
    let firmware = |value: Value| with(vmi(), "/spec/domain/firmware", value);
    let uuid = "5d307ca9-b3ef-428c-8861-06e72d69f223";
    check(vec![
        (
            "a UUID and a serial",
            firmware(json!({"uuid": uuid, "serial": "serial-1"})),
            vec![],
        ),
        (
            "empty, as a clone leaves them",
            firmware(json!({"uuid": "", "serial": ""})),
            vec![],
        ),
        (
            "a UUID that is not one",
            firmware(json!({"uuid": "fake-uuid"})),
            vec![("spec.domain.firmware.uuid", Invalid)],
        ),
        (
            "a serial with a NUL",
            firmware(json!({"serial": "a\u{0}b"})),
            vec![("spec.domain.firmware.serial", Invalid)],
        ),
        (
            "a VM with a UUID that is not one",
            vm(json!({"template": {"spec": {"domain": {"firmware": {"uuid": "fake-uuid"}}}}})),
            vec![],
        ),
    ]);
}
