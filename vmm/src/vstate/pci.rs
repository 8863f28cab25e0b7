//! The KVM side of the PCI machine: GSI routing tables, BARs on the MMIO bus with their
//! ioeventfds, and level-triggered irqfds.
//!
//! KVM_SET_GSI_ROUTING replaces the whole table, so every table handed to KVM starts with what
//! KVM itself sets up with the in-kernel irqchip (GSIs 0-15 on the PICs and the IOAPIC, 16-23 on
//! the IOAPIC) and adds the MSI routes after it.
//!
//! These hold the VM and the bus weakly: devices live on the buses the vCPUs hold, and a strong
//! reference would keep the VM (and its memory slots) alive in a cycle.

use std::sync::{Arc, Weak};

use kvm_bindings::{
    kvm_irq_routing_entry, kvm_irq_routing_irqchip, kvm_irq_routing_msi, KvmIrqRouting,
    KVM_IRQCHIP_IOAPIC, KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE, KVM_IRQ_ROUTING_IRQCHIP,
    KVM_IRQ_ROUTING_MSI,
};
use kvm_ioctls::{IoEventAddress, NoDatamatch};
use vmm_sys_util::eventfd::EventFd;

use super::vm::Vm;
use crate::arch::LAST_IRQ;
use crate::devices::bus::{Bus, SharedDevice};
use crate::devices::irq::{MsiMessage, RouteSink};
use crate::devices::pci::bus::{BarMapper, MapBarError};

fn irqchip(gsi: u32, chip: u32, pin: u32) -> kvm_irq_routing_entry {
    let mut entry = kvm_irq_routing_entry {
        gsi,
        type_: KVM_IRQ_ROUTING_IRQCHIP,
        ..Default::default()
    };
    entry.u.irqchip = kvm_irq_routing_irqchip { irqchip: chip, pin };
    entry
}

/// KVM's default routes: GSI `g` < 16 to PIC pin `g % 8` and IOAPIC pin `g`, 16-23 to the
/// IOAPIC.
fn default_routes() -> Vec<kvm_irq_routing_entry> {
    let mut routes = Vec::new();
    for gsi in 0..=LAST_IRQ {
        routes.push(irqchip(gsi, KVM_IRQCHIP_IOAPIC, gsi));
        if gsi < 8 {
            routes.push(irqchip(gsi, KVM_IRQCHIP_PIC_MASTER, gsi));
        } else if gsi < 16 {
            routes.push(irqchip(gsi, KVM_IRQCHIP_PIC_SLAVE, gsi - 8));
        }
    }
    routes
}

/// The routing table KVM gets for `msi`.
pub fn routing_table(msi: &[(u32, MsiMessage)]) -> Vec<kvm_irq_routing_entry> {
    let mut routes = default_routes();
    for (gsi, message) in msi {
        let mut entry = kvm_irq_routing_entry {
            gsi: *gsi,
            type_: KVM_IRQ_ROUTING_MSI,
            ..Default::default()
        };
        entry.u.msi = kvm_irq_routing_msi {
            address_lo: message.address as u32,
            address_hi: (message.address >> 32) as u32,
            data: message.data,
            ..Default::default()
        };
        routes.push(entry);
    }
    routes
}

/// Routes through KVM_SET_GSI_ROUTING.
pub struct KvmRouteSink(pub Weak<Vm>);

impl RouteSink for KvmRouteSink {
    fn set_routes(&self, msi: &[(u32, MsiMessage)]) -> std::io::Result<()> {
        let vm = self
            .0
            .upgrade()
            .ok_or_else(|| std::io::Error::other("the VM is gone"))?;
        let table = KvmIrqRouting::from_entries(&routing_table(msi))
            .map_err(|e| std::io::Error::other(format!("routing table: {e:?}")))?;
        vm.fd
            .set_gsi_routing(&table)
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
    }
}

/// BARs on the VM's MMIO bus, queue notify addresses as KVM ioeventfds (any width, no data
/// match).
pub struct KvmBarMapper {
    pub vm: Weak<Vm>,
    pub mmio: Weak<Bus>,
}

impl BarMapper for KvmBarMapper {
    fn map(&self, region: SharedDevice, base: u64, len: u64) -> Result<(), MapBarError> {
        let mmio = self.mmio.upgrade().ok_or(MapBarError::VmGone)?;
        mmio.insert(region, base, len).map_err(MapBarError::Bus)
    }

    fn unmap(&self, base: u64) {
        if let Some(mmio) = self.mmio.upgrade() {
            mmio.remove(base);
        }
    }

    fn register_ioevent(&self, evt: &EventFd, addr: u64) -> Result<(), MapBarError> {
        let vm = self.vm.upgrade().ok_or(MapBarError::VmGone)?;
        vm.fd
            .register_ioevent(evt, &IoEventAddress::Mmio(addr), NoDatamatch)
            .map_err(|e| MapBarError::Ioevent(addr, std::io::Error::from_raw_os_error(e.errno())))
    }

    fn unregister_ioevent(&self, evt: &EventFd, addr: u64) {
        if let Some(vm) = self.vm.upgrade() {
            if let Err(e) = vm
                .fd
                .unregister_ioevent(evt, &IoEventAddress::Mmio(addr), NoDatamatch)
            {
                log::warn!("pci: unregister the ioeventfd at {addr:#x}: {e}");
            }
        }
    }
}

/// A level-triggered line on `gsi`: its irqfd and resample eventfd, registered with KVM.
pub fn level_irqfd(vm: &Arc<Vm>, gsi: u32) -> std::io::Result<(EventFd, EventFd)> {
    let irqfd = EventFd::new(libc::EFD_NONBLOCK)?;
    let resamplefd = EventFd::new(libc::EFD_NONBLOCK)?;
    vm.fd
        .register_irqfd_with_resample(&irqfd, &resamplefd, gsi)
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))?;
    Ok((irqfd, resamplefd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_keeps_the_irqchip_pins_and_adds_msi_routes() {
        let table = routing_table(&[(
            24,
            MsiMessage {
                address: 0x1_fee0_1000,
                data: 0x4041,
            },
        )]);
        assert_eq!(
            table.len(),
            24 + 16 + 1,
            "IOAPIC pins, PIC pins, one MSI route"
        );
        let pins: Vec<(u32, u32)> = table
            .iter()
            .filter(|e| e.type_ == KVM_IRQ_ROUTING_IRQCHIP)
            // SAFETY: irqchip entries were written through the `irqchip` member.
            .map(|e| unsafe { (e.gsi, e.u.irqchip.irqchip) })
            .collect();
        assert!(pins.contains(&(2, KVM_IRQCHIP_PIC_MASTER)));
        assert!(pins.contains(&(9, KVM_IRQCHIP_PIC_SLAVE)));
        assert!(pins.contains(&(23, KVM_IRQCHIP_IOAPIC)));
        assert!(!pins
            .iter()
            .any(|(g, c)| *g >= 16 && *c != KVM_IRQCHIP_IOAPIC));
        let msi = table.last().unwrap();
        assert_eq!((msi.gsi, msi.type_), (24, KVM_IRQ_ROUTING_MSI));
        // SAFETY: the last entry was written through the `msi` member.
        let m = unsafe { msi.u.msi };
        assert_eq!(
            (m.address_lo, m.address_hi, m.data),
            (0xfee0_1000, 1, 0x4041)
        );
    }
}
