//! What a VMI may ask for: the limits virt-api's validation enforces, each derived from what the
//! VMM can do, so that nothing the API admits is refused by the launcher later. The launcher's
//! unit tests check every one against the `vmm` crate's own constant (this crate cannot depend
//! on `vmm`, which depends on it).

/// Most virtio devices a VMI may have: disks + interfaces + rng (0 or 1) + vsock (0 or 1),
/// which is what the launcher turns into virtio devices.
///
/// From the KVM VMM's interrupt layout: each virtio-mmio device gets its own IOAPIC pin, from
/// GSI `vmm::arch::VIRTIO_FIRST_IRQ` (5) to `vmm::arch::LAST_IRQ` (23), which is
/// `vmm::MAX_VIRTIO_DEVICES` = 19; `vmm::builder` refuses the 20th (`TooManyDevices`).
///
/// The QEMU TCG fallback (`-M microvm,acpi=off`) has fewer: QEMU's microvm makes 8 virtio-mmio
/// transports when ACPI is off (24 only with its second IOAPIC, which needs ACPI), so a VMI
/// with more than 8 devices that lands on that backend fails when QEMU starts.
pub const MAX_DEVICES: usize = 19;

/// Most vCPUs (sockets x cores x threads) a VMI may have: `vmm::config::MAX_VCPUS`.
pub const MAX_VCPUS: u32 = 32;

/// Smallest guest memory a VMI may have: `vmm::config::MIN_MEMORY_BYTES`.
pub const MIN_GUEST_MEMORY_BYTES: u64 = 16 << 20;
