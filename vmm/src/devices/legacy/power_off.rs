//! The power-off port (0xf4): a guest write of a 1-4 byte exit code ends the VM with
//! [`VmExit::PowerOff`]. It follows QEMU's `isa-debug-exit` convention, so the same guest powers
//! off both under this VMM and under QEMU (`-device isa-debug-exit,iobase=0xf4,iosize=4`).

use std::sync::Arc;

use crate::devices::bus::BusDevice;
use crate::lifecycle::{RunControl, VmExit};

pub struct PowerOffPort {
    control: Arc<RunControl>,
}

impl PowerOffPort {
    pub fn new(control: Arc<RunControl>) -> Self {
        PowerOffPort { control }
    }
}

impl BusDevice for PowerOffPort {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        data.fill(0xff);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if offset != 0 || data.is_empty() || data.len() > 4 {
            return;
        }
        let mut code = [0u8; 4];
        code[..data.len()].copy_from_slice(data);
        self.control.request_exit(VmExit::PowerOff {
            code: u32::from_le_bytes(code),
        });
    }
}
