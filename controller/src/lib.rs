//! virt-controller: reconciles `VirtualMachine` -> `VirtualMachineInstance`, VMI -> launcher Pod,
//! migrations and replica sets. Not written yet (issue "virt-controller and virt-handler").
#![forbid(unsafe_code)]
