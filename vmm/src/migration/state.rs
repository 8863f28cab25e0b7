//! Saving and restoring device state as records of the STATE section: COM1, the i8042 and each
//! virtio-mmio transport, with the device's own state when it has any (the console's ports),
//! after its queues (the PCI machine's own state is [`super::pci_state`]).
//!
//! The vCPU and VM records (KVM's state) are [`crate::vstate::state`]'s, re-exported here.
//!
//! A record that does not decode is reported by name; nothing is skipped silently.

use vm_superio::serial::SerialState;

use super::wire::{Decoder, Encoder, WireError};
use crate::devices::legacy::i8042::I8042State;
use crate::devices::virtio::mmio::{QueueConfig, TransportState};
pub use crate::vstate::state::{
    migratable_msrs, restore_vcpu, restore_vm, save_vcpu, save_vm, KvmStateError, RestoreStateError,
};

/// COM1's state as bytes.
pub fn encode_serial(s: &SerialState) -> Vec<u8> {
    let mut e = Encoder::default();
    e.u8(s.baud_divisor_low)
        .u8(s.baud_divisor_high)
        .u8(s.interrupt_enable)
        .u8(s.interrupt_identification)
        .u8(s.line_control)
        .u8(s.line_status)
        .u8(s.modem_control)
        .u8(s.modem_status)
        .u8(s.scratch)
        .bytes(&s.in_buffer);
    e.0
}

pub fn decode_serial(bytes: &[u8]) -> Result<SerialState, WireError> {
    let mut d = Decoder::new(bytes, "serial state");
    let s = SerialState {
        baud_divisor_low: d.u8()?,
        baud_divisor_high: d.u8()?,
        interrupt_enable: d.u8()?,
        interrupt_identification: d.u8()?,
        line_control: d.u8()?,
        line_status: d.u8()?,
        modem_control: d.u8()?,
        modem_status: d.u8()?,
        scratch: d.u8()?,
        in_buffer: d.bytes()?.to_vec(),
    };
    d.finish()?;
    Ok(s)
}

pub fn encode_i8042(s: &I8042State) -> Vec<u8> {
    let mut e = Encoder::default();
    e.bytes(&s.output)
        .u8(s.config)
        .u8(s.last_command)
        .u8(s.status);
    e.0
}

pub fn decode_i8042(bytes: &[u8]) -> Result<I8042State, WireError> {
    let mut d = Decoder::new(bytes, "i8042 state");
    let s = I8042State {
        output: d.bytes()?.to_vec(),
        config: d.u8()?,
        last_command: d.u8()?,
        status: d.u8()?,
    };
    d.finish()?;
    Ok(s)
}

pub fn encode_transport(s: &TransportState) -> Vec<u8> {
    let mut e = Encoder::default();
    e.u32(s.device_type)
        .u32(s.status)
        .u64(s.acked_features)
        .u32(s.device_features_sel)
        .u32(s.driver_features_sel)
        .u32(s.queue_sel)
        .u32(s.interrupt_status)
        .u8(u8::from(s.broken))
        .u8(u8::from(s.activated))
        .u32(s.queues.len() as u32);
    for q in &s.queues {
        e.u16(q.max_size)
            .u16(q.size)
            .u8(u8::from(q.ready))
            .u64(q.desc_table)
            .u64(q.avail_ring)
            .u64(q.used_ring);
    }
    // Only devices with state of their own add it, so that the others' records are those of
    // earlier versions.
    if !s.device_state.is_empty() {
        e.bytes(&s.device_state);
    }
    e.0
}

pub fn decode_transport(bytes: &[u8], index: usize) -> Result<TransportState, WireError> {
    let mut d = Decoder::new(bytes, format!("virtio device {index} state"));
    let mut s = TransportState {
        device_type: d.u32()?,
        status: d.u32()?,
        acked_features: d.u64()?,
        device_features_sel: d.u32()?,
        driver_features_sel: d.u32()?,
        queue_sel: d.u32()?,
        interrupt_status: d.u32()?,
        broken: d.u8()? != 0,
        activated: d.u8()? != 0,
        queues: Vec::new(),
        device_state: Vec::new(),
    };
    let count = d.count(64, "queues")?;
    for _ in 0..count {
        s.queues.push(QueueConfig {
            max_size: d.u16()?,
            size: d.u16()?,
            ready: d.u8()? != 0,
            desc_table: d.u64()?,
            avail_ring: d.u64()?,
            used_ring: d.u64()?,
        });
    }
    if !d.is_empty() {
        s.device_state = d.bytes()?.to_vec();
    }
    d.finish()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_states_round_trip() {
        let serial = SerialState {
            scratch: 7,
            in_buffer: b"abc".to_vec(),
            ..SerialState::default()
        };
        assert_eq!(decode_serial(&encode_serial(&serial)).unwrap(), serial);
        let i8042 = I8042State {
            output: vec![0x14, 0x11],
            config: 1,
            last_command: 0x60,
            status: 4,
        };
        assert_eq!(decode_i8042(&encode_i8042(&i8042)).unwrap(), i8042);
        let transport = TransportState {
            device_type: 2,
            status: 0xf,
            acked_features: 1 << 32,
            device_features_sel: 1,
            driver_features_sel: 1,
            queue_sel: 0,
            interrupt_status: 1,
            broken: false,
            activated: true,
            queues: vec![QueueConfig {
                max_size: 256,
                size: 8,
                ready: true,
                desc_table: 0x10_0000,
                avail_ring: 0x10_0100,
                used_ring: 0x10_0200,
            }],
            device_state: Vec::new(),
        };
        let bytes = encode_transport(&transport);
        assert_eq!(decode_transport(&bytes, 0).unwrap(), transport);
        let err = decode_transport(&bytes[..bytes.len() - 1], 0).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("malformed virtio device 0 state"));
        assert!(decode_serial(&[1, 2]).is_err());

        // A device with state of its own adds it after the queues; without, the record ends
        // there, as in earlier versions.
        let with_state = TransportState {
            device_state: vec![1, 0, 2, 0, 0, 0],
            ..transport.clone()
        };
        let longer = encode_transport(&with_state);
        assert_eq!(&longer[..bytes.len()], &bytes[..]);
        assert_eq!(longer.len(), bytes.len() + 4 + 6);
        assert_eq!(decode_transport(&longer, 1).unwrap(), with_state);
        assert!(decode_transport(&longer[..longer.len() - 1], 1).is_err());
    }
}
