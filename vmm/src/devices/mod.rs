//! Emulated devices: the I/O and MMIO buses the vCPU loop routes exits to, the legacy devices
//! (16550 serial, i8042, power-off port, ACPI PM registers), the PCI root bus and the virtio
//! devices with their two transports (mmio, pci), and the interrupt plumbing they share.

/// A warning about something the guest did wrong (a bad register access, an address outside
/// what the device has), rate-limited per call site: the first 10, then one in 1000, so that a
/// guest cannot flood the VMM's log. Never a panic. (Defined before the modules below, which
/// see it by textual scope.)
macro_rules! guest_warn {
    ($($arg:tt)*) => {{
        static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seen = SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if seen < 10 || seen % 1000 == 0 {
            log::warn!($($arg)*);
        }
    }};
}

pub mod bus;
pub mod irq;
pub mod legacy;
pub mod pci;
pub mod virtio;
pub mod worker;
