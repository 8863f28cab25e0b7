//! A minimal i8042 keyboard controller, enough for reset and ctrl-alt-del (Firecracker's).
//!
//! Ports: data at 0x60, status (read) / command (write) at 0x64.
//! * Command 0xfe (pulse reset line): the guest resets the machine -> [`VmExit::Reset`].
//! * Commands 0x20 (read config byte), 0x60 (write config byte, next data byte), 0xaa (self test,
//!   answers 0x55), 0xab (port test, answers 0); others are accepted and ignored.
//! * [`I8042::ctrl_alt_del`] queues the ctrl-alt-del scan codes (set 2) and raises IRQ 1; a
//!   Linux guest answers with an orderly reboot, our counter guest with a power-off. This is the
//!   VMM's ACPI-free graceful shutdown request.
//! * Status bit 0 says the output buffer holds a byte for the guest; bit 2 is the system flag.

use std::collections::VecDeque;
use std::sync::Arc;

use log::warn;
use vmm_sys_util::eventfd::EventFd;

use crate::devices::bus::BusDevice;
use crate::lifecycle::{RunControl, VmExit};

const OFFSET_DATA: u64 = 0;
const OFFSET_STATUS: u64 = 4;
const STATUS_OUTPUT_FULL: u8 = 1;
const STATUS_SYSTEM_FLAG: u8 = 1 << 2;
const STATUS_COMMAND: u8 = 1 << 3;
const CMD_READ_CONFIG: u8 = 0x20;
const CMD_WRITE_CONFIG: u8 = 0x60;
const CMD_SELF_TEST: u8 = 0xaa;
const CMD_PORT_TEST: u8 = 0xab;
const CMD_RESET: u8 = 0xfe;
/// ctrl down, alt down, del down (set 2 scan codes).
const CTRL_ALT_DEL: [u8; 4] = [0x14, 0x11, 0xe0, 0x71];
const BUFFER_LIMIT: usize = 16;

/// The controller's state (for live migration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct I8042State {
    pub output: Vec<u8>,
    pub config: u8,
    pub last_command: u8,
    pub status: u8,
}

pub struct I8042 {
    control: Arc<RunControl>,
    interrupt: EventFd,
    output: VecDeque<u8>,
    config: u8,
    last_command: u8,
    status: u8,
}

impl I8042 {
    pub fn new(control: Arc<RunControl>, interrupt: EventFd) -> Self {
        I8042 {
            control,
            interrupt,
            output: VecDeque::new(),
            config: 0,
            last_command: 0,
            status: STATUS_SYSTEM_FLAG,
        }
    }

    pub fn state(&self) -> I8042State {
        I8042State {
            output: self.output.iter().copied().collect(),
            config: self.config,
            last_command: self.last_command,
            status: self.status,
        }
    }

    /// Takes over `state` (on a migration target); extra output bytes past the buffer limit
    /// are dropped, as they would be on the source.
    pub fn restore(&mut self, state: &I8042State) {
        self.output = state.output.iter().copied().take(BUFFER_LIMIT).collect();
        self.config = state.config;
        self.last_command = state.last_command;
        self.status = state.status;
    }

    /// Back to the power-on state (a machine reset).
    pub fn reset(&mut self) {
        self.output.clear();
        self.config = 0;
        self.last_command = 0;
        self.status = STATUS_SYSTEM_FLAG;
    }

    fn push(&mut self, byte: u8) {
        if self.output.len() < BUFFER_LIMIT {
            self.output.push_back(byte);
        }
    }

    /// Queues ctrl-alt-del and raises the keyboard interrupt.
    pub fn ctrl_alt_del(&mut self) {
        for code in CTRL_ALT_DEL {
            self.push(code);
        }
        if let Err(e) = self.interrupt.write(1) {
            warn!("i8042: raise IRQ: {e}");
        }
    }

    fn command(&mut self, command: u8) {
        self.last_command = 0;
        match command {
            CMD_RESET => self.control.request_exit(VmExit::Reset),
            CMD_READ_CONFIG => self.push(self.config),
            CMD_WRITE_CONFIG => self.last_command = command,
            CMD_SELF_TEST => self.push(0x55),
            CMD_PORT_TEST => self.push(0),
            _ => {}
        }
    }
}

impl BusDevice for I8042 {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let value = match offset {
            OFFSET_DATA => self.output.pop_front().unwrap_or(0),
            OFFSET_STATUS => {
                let full = if self.output.is_empty() {
                    0
                } else {
                    STATUS_OUTPUT_FULL
                };
                self.status | full
            }
            _ => 0xff,
        };
        data.fill(value);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let Some(&byte) = data.first() else { return };
        match offset {
            OFFSET_STATUS => {
                self.status |= STATUS_COMMAND;
                self.command(byte);
            }
            OFFSET_DATA => {
                self.status &= !STATUS_COMMAND;
                if self.last_command == CMD_WRITE_CONFIG {
                    self.config = byte;
                }
                self.last_command = 0;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_and_ctrl_alt_del() {
        let control = Arc::new(RunControl::new(1));
        let mut dev = I8042::new(control.clone(), EventFd::new(libc::EFD_NONBLOCK).unwrap());
        let mut status = [0u8];
        dev.read(OFFSET_STATUS, &mut status);
        assert_eq!(status[0] & STATUS_OUTPUT_FULL, 0);
        dev.ctrl_alt_del();
        dev.read(OFFSET_STATUS, &mut status);
        assert_eq!(status[0] & STATUS_OUTPUT_FULL, 1);
        let mut byte = [0u8];
        dev.read(OFFSET_DATA, &mut byte);
        assert_eq!(byte[0], 0x14);
        dev.write(OFFSET_STATUS, &[CMD_WRITE_CONFIG]);
        dev.write(OFFSET_DATA, &[0x45]);
        dev.write(OFFSET_STATUS, &[CMD_READ_CONFIG]);
        assert_eq!(control.exit(), None);
        dev.write(OFFSET_STATUS, &[CMD_RESET]);
        assert_eq!(control.exit(), Some(VmExit::Reset));
    }

    #[test]
    fn the_reset_line_restarts_in_place_under_the_restart_policy() {
        let control = Arc::new(RunControl::new(1));
        control.lock().policy = crate::lifecycle::ResetPolicy::RESTART;
        let mut dev = I8042::new(control.clone(), EventFd::new(libc::EFD_NONBLOCK).unwrap());
        let power_on = dev.state();
        dev.ctrl_alt_del();
        dev.write(OFFSET_STATUS, &[CMD_WRITE_CONFIG]);
        dev.write(OFFSET_DATA, &[0x45]);
        dev.write(OFFSET_STATUS, &[CMD_RESET]);
        assert_eq!(control.exit(), None);
        assert!(control.lock().reset_pending);
        assert_ne!(dev.state(), power_on);
        dev.reset();
        assert_eq!(dev.state(), power_on);
    }
}
