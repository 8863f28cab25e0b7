//! KVM state: guest memory, the VM (irqchip, PIT, memory slots), vCPUs, the KVM side of the
//! PCI machine (GSI routing, BAR ioeventfds, level-triggered irqfds), and saving and restoring
//! the vCPUs' and the VM's state ([`state`]: for a migration and for a reset in place).

pub mod memory;
pub mod pci;
pub mod state;
pub mod vcpu;
pub mod vm;
