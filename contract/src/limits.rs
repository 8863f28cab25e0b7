//! What a VMI may ask for: the limits virt-api's validation enforces, each derived from what the
//! VMM can do, so that nothing the API admits is refused by the launcher later. The launcher's
//! unit tests check every one against the `vmm` crate's own constant (this crate cannot depend
//! on `vmm`, which depends on it).

/// Most virtio devices a VMI may have: disks + interfaces + rng (0 or 1) + vsock (0 or 1),
/// which is what the launcher turns into virtio devices.
///
/// From the KVM VMM's interrupt layout: each virtio-mmio device gets its own IOAPIC pin, from
/// GSI `vmm::arch::VIRTIO_FIRST_IRQ` (5) to `vmm::arch::LAST_IRQ` (23), which is
/// `vmm::MAX_VIRTIO_DEVICES` = 19; `vmm::builder` refuses the 20th (`TooManyDevices`). One of
/// them is the guest agent channel (a virtio-console) that the launcher gives every VM, which
/// leaves 18 for the VMI's own devices.
///
/// The QEMU TCG fallback (`-M microvm,acpi=off`) has fewer: QEMU's microvm makes 8 virtio-mmio
/// transports when ACPI is off (24 only with its second IOAPIC, which needs ACPI), so a VMI
/// with more than 8 devices that lands on that backend fails when QEMU starts.
pub const MAX_DEVICES: usize = 18;

/// Most vCPUs (sockets x cores x threads) a VMI may have: `vmm::config::MAX_VCPUS`.
pub const MAX_VCPUS: u32 = 32;

/// Smallest `resources.requests.memory` a VMI may ask for: KubeVirt's own rule
/// (`validateMemoryRequestsNegativeOrNull` in virt-api's VMI admitter: "must be greater than or
/// equal to 1M", the decimal megabyte). KubeVirt's functional suite runs its "guestless" VMIs
/// (no disks, nothing to boot) with 1Mi.
pub const MIN_MEMORY_REQUEST_BYTES: u64 = 1_000_000;

/// Smallest guest memory the backends run a VM with: `vmm::config::MIN_MEMORY_BYTES` (QEMU's
/// microvm, the TCG fallback, starts with less: `-m 1M` boots its firmware). A VMI that asks
/// for less (KubeVirt admits 1M) gets this much: see [`boot_memory_bytes`].
pub const MIN_GUEST_MEMORY_BYTES: u64 = 16 << 20;

/// The guest memory a VMI that asks for `requested` bytes boots with, on either backend: rounded
/// up to whole MiB (what QEMU's `-m` expresses), and at least [`MIN_GUEST_MEMORY_BYTES`]. The
/// launcher gives the VM this much and the launcher Pod's memory covers it; the VMI's spec keeps
/// what the user asked. `None` when rounding up overflows.
pub const fn boot_memory_bytes(requested: u64) -> Option<u64> {
    const MIB: u64 = 1 << 20;
    match requested.checked_next_multiple_of(MIB) {
        Some(rounded) if rounded < MIN_GUEST_MEMORY_BYTES => Some(MIN_GUEST_MEMORY_BYTES),
        rounded => rounded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_memory_is_whole_mib_and_at_least_the_backends_minimum() {
        const MIB: u64 = 1 << 20;
        let cases = [
            (0, Some(MIN_GUEST_MEMORY_BYTES)),
            (MIN_MEMORY_REQUEST_BYTES, Some(MIN_GUEST_MEMORY_BYTES)),
            (MIB, Some(MIN_GUEST_MEMORY_BYTES)),
            (8 * MIB, Some(MIN_GUEST_MEMORY_BYTES)),
            (MIN_GUEST_MEMORY_BYTES - 1, Some(MIN_GUEST_MEMORY_BYTES)),
            (MIN_GUEST_MEMORY_BYTES, Some(MIN_GUEST_MEMORY_BYTES)),
            (
                MIN_GUEST_MEMORY_BYTES + 1,
                Some(MIN_GUEST_MEMORY_BYTES + MIB),
            ),
            (64_000_000, Some(62 * MIB)),
            (128 * MIB, Some(128 * MIB)),
            (u64::MAX, None),
        ];
        for (requested, want) in cases {
            assert_eq!(boot_memory_bytes(requested), want, "{requested}");
        }
    }
}
