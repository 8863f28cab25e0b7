//! The 16550 UART (COM1) from vm-superio on the port I/O bus. Its interrupt line is an eventfd
//! registered as a KVM irqfd for IRQ 4; output goes to a console writer, input is queued into
//! the receive FIFO by the console's input thread.

use std::io::{self, Write};
use std::thread;
use std::time::Duration;

use log::warn;
use vm_superio::serial::{NoEvents, SerialState};
use vm_superio::{Serial, Trigger};
use vmm_sys_util::eventfd::EventFd;

use crate::devices::bus::BusDevice;

/// Raises an IRQ through an eventfd (a KVM irqfd).
pub struct EventFdTrigger(pub EventFd);

impl Trigger for EventFdTrigger {
    type E = io::Error;

    fn trigger(&self) -> io::Result<()> {
        self.0.write(1)
    }
}

/// COM1 on the bus.
pub struct SerialDevice {
    serial: Serial<EventFdTrigger, NoEvents, Box<dyn Write + Send>>,
}

impl SerialDevice {
    pub fn new(interrupt: EventFd, output: Box<dyn Write + Send>) -> Self {
        SerialDevice {
            serial: Serial::new(EventFdTrigger(interrupt), output),
        }
    }

    /// The UART's registers and receive FIFO (for live migration).
    pub fn state(&self) -> SerialState {
        self.serial.state()
    }

    /// Takes over `state` (on a migration target), keeping this device's output and interrupt.
    pub fn restore(&mut self, state: &SerialState) -> io::Result<()> {
        let trigger = EventFdTrigger(self.serial.interrupt_evt().0.try_clone()?);
        let placeholder: Box<dyn Write + Send> = Box::new(io::sink());
        let spare = EventFdTrigger(self.serial.interrupt_evt().0.try_clone()?);
        let old = std::mem::replace(&mut self.serial, Serial::new(spare, placeholder));
        let output = old.into_writer();
        self.serial = Serial::from_state(state, trigger, NoEvents, output)
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
        Ok(())
    }

    /// Puts the UART's registers and FIFO back to their power-on state (a machine reset),
    /// keeping its output and interrupt.
    pub fn reset(&mut self) -> io::Result<()> {
        self.restore(&SerialState::default())
    }

    /// Queues guest input; returns how many bytes fit in the receive FIFO.
    pub fn enqueue_input(&mut self, bytes: &[u8]) -> usize {
        self.serial.enqueue_raw_bytes(bytes).unwrap_or(0)
    }
}

/// Feeds `bytes` to the UART, waiting while its receive FIFO is full.
pub fn feed_input(serial: &std::sync::Mutex<SerialDevice>, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let taken = serial
            .lock()
            .unwrap_or_else(crate::poison::fatal)
            .enqueue_input(bytes);
        bytes = &bytes[taken..];
        if taken == 0 {
            thread::sleep(Duration::from_millis(2));
        }
    }
}

impl BusDevice for SerialDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        match (u8::try_from(offset), data) {
            (Ok(offset), [byte]) => *byte = self.serial.read(offset),
            (_, data) => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let (Ok(offset), [byte]) = (u8::try_from(offset), data) {
            if let Err(e) = self.serial.write(offset, *byte) {
                warn!("serial: {e:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn output_and_input() {
        let out = Shared::default();
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut serial = SerialDevice::new(evt, Box::new(out.clone()));
        serial.write(0, b"h");
        serial.write(0, b"i");
        assert_eq!(out.0.lock().unwrap().as_slice(), b"hi");
        assert_eq!(serial.enqueue_input(b"x"), 1);
        let mut lsr = [0u8];
        serial.read(5, &mut lsr);
        assert_eq!(lsr[0] & 1, 1);
        let mut rbr = [0u8];
        serial.read(0, &mut rbr);
        assert_eq!(rbr[0], b'x');
        let mut wide = [0u8; 2];
        serial.read(0, &mut wide);
        assert_eq!(wide, [0xff, 0xff]);
    }

    #[test]
    fn state_round_trip_keeps_output_and_input() {
        let out = Shared::default();
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut source = SerialDevice::new(evt, Box::new(io::sink()));
        source.write(3, &[0x03]); // line control: 8 bits
        source.write(7, &[0x5a]); // scratch
        source.enqueue_input(b"ab");
        let state = source.state();
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut target = SerialDevice::new(evt, Box::new(out.clone()));
        target.restore(&state).unwrap();
        assert_eq!(target.state(), state);
        let mut byte = [0u8];
        target.read(0, &mut byte);
        assert_eq!(byte[0], b'a');
        target.write(0, b"z");
        assert_eq!(out.0.lock().unwrap().as_slice(), b"z");
    }

    #[test]
    fn reset_clears_the_registers_and_keeps_the_output() {
        let out = Shared::default();
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut serial = SerialDevice::new(evt, Box::new(out.clone()));
        serial.write(7, &[0x5a]); // scratch
        serial.enqueue_input(b"ab");
        serial.reset().unwrap();
        assert_eq!(serial.state(), SerialState::default());
        let mut lsr = [0u8];
        serial.read(5, &mut lsr);
        assert_eq!(lsr[0] & 1, 0, "input survived the reset");
        serial.write(0, b"z");
        assert_eq!(out.0.lock().unwrap().as_slice(), b"z");
    }
}
