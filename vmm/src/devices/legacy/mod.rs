//! Legacy port-I/O devices: the 16550 UART, the i8042 keyboard controller (reset and
//! ctrl-alt-del), the power-off port and the ACPI PM registers (power button, S5, reset).

pub mod acpi_pm;
pub mod i8042;
pub mod power_off;
pub mod serial;

/// COM1's port range.
pub const COM1_BASE: u64 = 0x3f8;
/// COM1's IRQ.
pub const COM1_IRQ: u32 = 4;
/// The i8042's data port; its status/command port is at +4.
pub const I8042_DATA_PORT: u64 = 0x60;
/// The i8042's IRQ (keyboard).
pub const I8042_IRQ: u32 = 1;
/// The power-off port (QEMU's isa-debug-exit convention).
pub const POWER_OFF_PORT: u64 = 0xf4;
