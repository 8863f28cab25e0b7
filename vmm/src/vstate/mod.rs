//! KVM state: guest memory, the VM (irqchip, PIT, memory slots), vCPUs, and the KVM side of the
//! PCI machine (GSI routing, BAR ioeventfds, level-triggered irqfds).

pub mod memory;
pub mod pci;
pub mod vcpu;
pub mod vm;
