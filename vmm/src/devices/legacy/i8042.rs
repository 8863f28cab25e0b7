//! An i8042 keyboard controller with a PS/2 keyboard and no AUX port: what Linux's i8042 and
//! atkbd drivers probe, answered at once, plus reset and ctrl-alt-del.
//!
//! Ports: data at 0x60, status (read) / command (write) at 0x64. Linux probes in this order,
//! and each step that got no answer would cost it a timeout of 0.5 s of polling (far longer
//! nested, where every poll is an exit):
//! 1. flush, self test (0xaa -> 0x55), read and write the configuration byte (0x20, 0x60);
//! 2. the AUX port: loopback (0xd3 + byte) comes back without the AUX flag and the AUX test
//!    (0xa9) answers 0x01 ("clock line stuck low"), so Linux finds no AUX port and skips the
//!    mouse and multiplexer probes;
//! 3. the keyboard port (0xae enable, 0xad disable, 0xab test -> 0x00); then atkbd talks to the
//!    keyboard through the data port: every byte is acknowledged (0xfa), GET ID (0xf2) answers
//!    0xab 0x83, reset (0xff) 0xaa, echo (0xee) 0xee; set LEDs (0xed), set scan code set (0xf0)
//!    and typematic rate (0xf3) take a parameter byte, acknowledged too (scan code set query:
//!    set 2). Keyboard bytes raise IRQ 1 while the configuration byte enables it, one byte per
//!    interrupt, as Linux reads them.
//!
//! Also:
//! * Command 0xfe (pulse reset line): the guest resets the machine -> [`VmExit::Reset`].
//! * [`I8042::ctrl_alt_del`] queues the ctrl-alt-del scan codes (set 2) and raises IRQ 1; a
//!   Linux guest answers with an orderly reboot, our counter guest with a power-off. This is the
//!   VMM's ACPI-free graceful shutdown request.
//! * Status bit 0 says the output buffer holds a byte for the guest; bit 2 is the system flag,
//!   bit 4 the keyboard lock switch (set: not locked), bit 5 that the byte came from the AUX
//!   port (never set: there is none).
//!
//! A controller command's answer replaces whatever the output buffer held, as the
//! controller's firmware overwrites its one output register. A command that waits for a data
//! byte (0x60, 0xd1-0xd4), and a keyboard command that waits for its parameter (0xed, 0xf0,
//! 0xf3), is kept in `last_command`: the two sets do not overlap.

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
const STATUS_UNLOCKED: u8 = 1 << 4;

/// Configuration byte: keyboard interrupt enable, keyboard disabled, AUX disabled.
const CONFIG_KBD_INT: u8 = 1;
const CONFIG_KBD_DISABLED: u8 = 1 << 4;
const CONFIG_AUX_DISABLED: u8 = 1 << 5;

const CMD_READ_CONFIG: u8 = 0x20;
const CMD_WRITE_CONFIG: u8 = 0x60;
const CMD_AUX_DISABLE: u8 = 0xa7;
const CMD_AUX_ENABLE: u8 = 0xa8;
const CMD_AUX_TEST: u8 = 0xa9;
const CMD_SELF_TEST: u8 = 0xaa;
const CMD_KBD_TEST: u8 = 0xab;
const CMD_KBD_DISABLE: u8 = 0xad;
const CMD_KBD_ENABLE: u8 = 0xae;
const CMD_READ_INPUT_PORT: u8 = 0xc0;
const CMD_READ_OUTPUT_PORT: u8 = 0xd0;
const CMD_WRITE_OUTPUT_PORT: u8 = 0xd1;
const CMD_WRITE_KBD_OUTPUT: u8 = 0xd2;
const CMD_AUX_LOOP: u8 = 0xd3;
const CMD_WRITE_AUX: u8 = 0xd4;
const CMD_RESET: u8 = 0xfe;

/// Answers of the controller.
const SELF_TEST_OK: u8 = 0x55;
const PORT_TEST_OK: u8 = 0x00;
const AUX_TEST_NO_DEVICE: u8 = 0x01;
/// Output port: reset line high (not in reset), A20 enabled.
const OUTPUT_PORT: u8 = 0x03;

/// Keyboard commands and answers.
const KBD_SET_LEDS: u8 = 0xed;
const KBD_ECHO: u8 = 0xee;
const KBD_SCAN_CODE_SET: u8 = 0xf0;
const KBD_GET_ID: u8 = 0xf2;
const KBD_TYPEMATIC: u8 = 0xf3;
const KBD_RESET: u8 = 0xff;
const KBD_ACK: u8 = 0xfa;
const KBD_SELF_TEST_PASSED: u8 = 0xaa;
/// A multifunction-2 (MF2) keyboard.
const KBD_ID: [u8; 2] = [0xab, 0x83];
const KBD_SCAN_CODE_SET_2: u8 = 0x02;

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
            status: STATUS_SYSTEM_FLAG | STATUS_UNLOCKED,
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
        // A source of an earlier version did not set the lock switch bit.
        self.status = state.status | STATUS_UNLOCKED;
    }

    /// Back to the power-on state (a machine reset).
    pub fn reset(&mut self) {
        self.output.clear();
        self.config = 0;
        self.last_command = 0;
        self.status = STATUS_SYSTEM_FLAG | STATUS_UNLOCKED;
    }

    fn push(&mut self, byte: u8) {
        if self.output.len() < BUFFER_LIMIT {
            self.output.push_back(byte);
        }
    }

    fn raise_irq(&self) {
        if let Err(e) = self.interrupt.write(1) {
            warn!("i8042: raise IRQ: {e}");
        }
    }

    /// Whether keyboard bytes raise IRQ 1.
    fn keyboard_interrupts(&self) -> bool {
        self.config & CONFIG_KBD_INT != 0 && self.config & CONFIG_KBD_DISABLED == 0
    }

    /// Bytes from the keyboard, announced by IRQ 1 when the guest enabled it.
    fn push_from_keyboard(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.push(b);
        }
        if self.keyboard_interrupts() {
            self.raise_irq();
        }
    }

    /// The controller's answer to a command, replacing what the output buffer held.
    fn answer(&mut self, byte: u8) {
        self.output.clear();
        self.push(byte);
    }

    /// Queues ctrl-alt-del and raises the keyboard interrupt.
    pub fn ctrl_alt_del(&mut self) {
        for code in CTRL_ALT_DEL {
            self.push(code);
        }
        self.raise_irq();
    }

    fn command(&mut self, command: u8) {
        self.last_command = 0;
        match command {
            CMD_RESET => self.control.request_exit(VmExit::Reset),
            CMD_READ_CONFIG => self.answer(self.config),
            CMD_WRITE_CONFIG
            | CMD_WRITE_OUTPUT_PORT
            | CMD_WRITE_KBD_OUTPUT
            | CMD_AUX_LOOP
            | CMD_WRITE_AUX => self.last_command = command,
            CMD_AUX_DISABLE => self.config |= CONFIG_AUX_DISABLED,
            CMD_AUX_ENABLE => self.config &= !CONFIG_AUX_DISABLED,
            CMD_AUX_TEST => self.answer(AUX_TEST_NO_DEVICE),
            CMD_SELF_TEST => self.answer(SELF_TEST_OK),
            CMD_KBD_TEST => self.answer(PORT_TEST_OK),
            CMD_KBD_DISABLE => self.config |= CONFIG_KBD_DISABLED,
            CMD_KBD_ENABLE => self.config &= !CONFIG_KBD_DISABLED,
            CMD_READ_INPUT_PORT => self.answer(0),
            CMD_READ_OUTPUT_PORT => self.answer(OUTPUT_PORT),
            _ => {}
        }
    }

    /// A data byte that completes controller command `command`.
    fn command_data(&mut self, command: u8, byte: u8) {
        match command {
            CMD_WRITE_CONFIG => self.config = byte,
            // Bit 0 low holds the CPU in reset.
            CMD_WRITE_OUTPUT_PORT if byte & 1 == 0 => self.control.request_exit(VmExit::Reset),
            CMD_WRITE_KBD_OUTPUT => self.push_from_keyboard(&[byte]),
            // The loopback comes back as if from the keyboard: there is no AUX port.
            CMD_AUX_LOOP => self.answer(byte),
            _ => {}
        }
    }

    /// A byte for the keyboard (a command, or the parameter of the one before).
    fn keyboard(&mut self, byte: u8) {
        let pending = std::mem::take(&mut self.last_command);
        match pending {
            KBD_SCAN_CODE_SET if byte == 0 => {
                self.push_from_keyboard(&[KBD_ACK, KBD_SCAN_CODE_SET_2])
            }
            KBD_SET_LEDS | KBD_SCAN_CODE_SET | KBD_TYPEMATIC => self.push_from_keyboard(&[KBD_ACK]),
            _ => match byte {
                KBD_SET_LEDS | KBD_SCAN_CODE_SET | KBD_TYPEMATIC => {
                    self.last_command = byte;
                    self.push_from_keyboard(&[KBD_ACK]);
                }
                KBD_GET_ID => self.push_from_keyboard(&[KBD_ACK, KBD_ID[0], KBD_ID[1]]),
                KBD_ECHO => self.push_from_keyboard(&[KBD_ECHO]),
                KBD_RESET => self.push_from_keyboard(&[KBD_ACK, KBD_SELF_TEST_PASSED]),
                _ => self.push_from_keyboard(&[KBD_ACK]),
            },
        }
    }
}

impl BusDevice for I8042 {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let value = match offset {
            OFFSET_DATA => {
                let byte = self.output.pop_front().unwrap_or(0);
                // Linux reads one byte per interrupt.
                if !self.output.is_empty() && self.keyboard_interrupts() {
                    self.raise_irq();
                }
                byte
            }
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
                match self.last_command {
                    CMD_WRITE_CONFIG
                    | CMD_WRITE_OUTPUT_PORT
                    | CMD_WRITE_KBD_OUTPUT
                    | CMD_AUX_LOOP
                    | CMD_WRITE_AUX => {
                        let command = std::mem::take(&mut self.last_command);
                        self.command_data(command, byte);
                    }
                    _ => self.keyboard(byte),
                }
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

    fn device() -> (I8042, Arc<RunControl>) {
        let control = Arc::new(RunControl::new(1));
        let dev = I8042::new(control.clone(), EventFd::new(libc::EFD_NONBLOCK).unwrap());
        (dev, control)
    }

    fn status(dev: &mut I8042) -> u8 {
        let mut b = [0u8];
        dev.read(OFFSET_STATUS, &mut b);
        b[0]
    }

    /// Every byte the guest can read now.
    fn drain(dev: &mut I8042) -> Vec<u8> {
        let mut out = Vec::new();
        while status(dev) & STATUS_OUTPUT_FULL != 0 {
            let mut b = [0u8];
            dev.read(OFFSET_DATA, &mut b);
            out.push(b[0]);
        }
        out
    }

    /// How many interrupts were raised since the last call.
    fn irqs(dev: &I8042) -> u64 {
        dev.interrupt.read().unwrap_or(0)
    }

    #[test]
    fn linux_probe_finds_a_controller_without_an_aux_port_at_once() {
        let (mut dev, _) = device();
        assert_ne!(status(&mut dev) & STATUS_UNLOCKED, 0, "keylock active");
        dev.write(OFFSET_STATUS, &[CMD_SELF_TEST]);
        assert_eq!(drain(&mut dev), [SELF_TEST_OK]);
        dev.write(OFFSET_STATUS, &[CMD_WRITE_CONFIG]);
        dev.write(OFFSET_DATA, &[0x47]);
        dev.write(OFFSET_STATUS, &[CMD_READ_CONFIG]);
        assert_eq!(drain(&mut dev), [0x47]);
        // AUX loopback: the byte comes back, but not flagged as AUX data.
        dev.write(OFFSET_STATUS, &[CMD_AUX_LOOP]);
        dev.write(OFFSET_DATA, &[0x5a]);
        assert_eq!(status(&mut dev) & 0x20, 0, "AUX data flag set");
        // Linux leaves that byte unread and runs the AUX test, whose answer replaces it.
        dev.write(OFFSET_STATUS, &[CMD_AUX_TEST]);
        assert_eq!(drain(&mut dev), [AUX_TEST_NO_DEVICE]);
        dev.write(OFFSET_STATUS, &[CMD_KBD_TEST]);
        assert_eq!(drain(&mut dev), [PORT_TEST_OK]);
        dev.write(OFFSET_STATUS, &[CMD_KBD_DISABLE]);
        dev.write(OFFSET_STATUS, &[CMD_READ_CONFIG]);
        assert_eq!(
            drain(&mut dev)[0] & CONFIG_KBD_DISABLED,
            CONFIG_KBD_DISABLED
        );
        dev.write(OFFSET_STATUS, &[CMD_KBD_ENABLE]);
        dev.write(OFFSET_STATUS, &[CMD_AUX_DISABLE]);
        dev.write(OFFSET_STATUS, &[CMD_READ_CONFIG]);
        assert_eq!(
            drain(&mut dev)[0] & (CONFIG_KBD_DISABLED | CONFIG_AUX_DISABLED),
            CONFIG_AUX_DISABLED
        );
        dev.write(OFFSET_STATUS, &[CMD_READ_OUTPUT_PORT]);
        assert_eq!(drain(&mut dev), [OUTPUT_PORT]);
    }

    #[test]
    fn the_keyboard_answers_atkbd_with_an_interrupt_per_byte() {
        let (mut dev, _) = device();
        // Interrupts off: the answer is there to poll, no IRQ.
        dev.write(OFFSET_DATA, &[KBD_GET_ID]);
        assert_eq!(irqs(&dev), 0);
        assert_eq!(drain(&mut dev), [KBD_ACK, 0xab, 0x83]);
        dev.write(OFFSET_STATUS, &[CMD_WRITE_CONFIG]);
        dev.write(OFFSET_DATA, &[CONFIG_KBD_INT]);
        dev.write(OFFSET_DATA, &[KBD_GET_ID]);
        assert_eq!(irqs(&dev), 1);
        let mut b = [0u8];
        dev.read(OFFSET_DATA, &mut b);
        assert_eq!(b[0], KBD_ACK);
        assert_eq!(irqs(&dev), 1, "no interrupt for the next byte");
        assert_eq!(drain(&mut dev), [0xab, 0x83]);
        // Commands with a parameter byte: both acknowledged.
        dev.write(OFFSET_DATA, &[KBD_SET_LEDS]);
        dev.write(OFFSET_DATA, &[0]);
        assert_eq!(drain(&mut dev), [KBD_ACK, KBD_ACK]);
        dev.write(OFFSET_DATA, &[KBD_SCAN_CODE_SET]);
        dev.write(OFFSET_DATA, &[0]);
        assert_eq!(drain(&mut dev), [KBD_ACK, KBD_ACK, KBD_SCAN_CODE_SET_2]);
        dev.write(OFFSET_DATA, &[KBD_SCAN_CODE_SET]);
        dev.write(OFFSET_DATA, &[2]);
        dev.write(OFFSET_DATA, &[KBD_RESET]);
        dev.write(OFFSET_DATA, &[KBD_ECHO]);
        dev.write(OFFSET_DATA, &[0xf4]);
        assert_eq!(
            drain(&mut dev),
            [
                KBD_ACK,
                KBD_ACK,
                KBD_ACK,
                KBD_SELF_TEST_PASSED,
                KBD_ECHO,
                KBD_ACK
            ]
        );
        // A disabled keyboard port raises no interrupt.
        irqs(&dev);
        dev.write(OFFSET_STATUS, &[CMD_KBD_DISABLE]);
        dev.write(OFFSET_DATA, &[0xf4]);
        assert_eq!(irqs(&dev), 0);
    }

    #[test]
    fn pulsing_the_output_port_reset_line_resets() {
        let (mut dev, control) = device();
        dev.write(OFFSET_STATUS, &[CMD_WRITE_OUTPUT_PORT]);
        dev.write(OFFSET_DATA, &[OUTPUT_PORT]);
        assert_eq!(control.exit(), None);
        dev.write(OFFSET_STATUS, &[CMD_WRITE_OUTPUT_PORT]);
        dev.write(OFFSET_DATA, &[0x02]);
        assert_eq!(control.exit(), Some(VmExit::Reset));
    }

    #[test]
    fn a_guest_cannot_grow_the_output_buffer_past_its_limit() {
        let (mut dev, _) = device();
        for _ in 0..1000 {
            dev.write(OFFSET_DATA, &[KBD_GET_ID]);
        }
        assert_eq!(drain(&mut dev).len(), BUFFER_LIMIT);
    }
}
