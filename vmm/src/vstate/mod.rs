//! KVM state: guest memory, the VM (irqchip, PIT, memory slots) and vCPUs.

pub mod memory;
pub mod vcpu;
pub mod vm;
