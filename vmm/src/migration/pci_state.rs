//! The PCI machine's part of the STATE section.
//!
//! Per virtio-pci device, in slot order: its transport state as for virtio-mmio
//! ([`state::encode_transport`]), the configuration vector and each queue's vector (u16), the 256
//! bytes of configuration space (BAR addresses, command, MSI-X control), the MSI-X table (count
//! u32, then address low/high, data, vector control u32 each) and the PBA (count u32, u64 each).
//! After the devices: the host bridge's configuration space and the ACPI PM registers
//! (PM1_STS, PM1_EN, PM1_CNT u16).

use super::state;
use super::wire::{Decoder, Encoder, WireError};
use crate::devices::legacy::acpi_pm::AcpiPmState;
use crate::devices::pci::msix::{MsixEntry, MsixSnapshot, MAX_VECTORS};
use crate::devices::virtio::pci::VirtioPciState;

pub fn encode_pci_transport(s: &VirtioPciState) -> Vec<u8> {
    let mut e = Encoder::default();
    e.bytes(&state::encode_transport(&s.transport));
    e.u16(s.config_vector).u32(s.queue_vectors.len() as u32);
    for v in &s.queue_vectors {
        e.u16(*v);
    }
    e.bytes(&s.config);
    e.u32(s.msix.entries.len() as u32);
    for entry in &s.msix.entries {
        e.u32(entry.address_low)
            .u32(entry.address_high)
            .u32(entry.data)
            .u32(entry.vector_control);
    }
    e.u32(s.msix.pending.len() as u32);
    for word in &s.msix.pending {
        e.u64(*word);
    }
    e.0
}

pub fn decode_pci_transport(bytes: &[u8], index: usize) -> Result<VirtioPciState, WireError> {
    let what = format!("virtio-pci device {index} state");
    let mut d = Decoder::new(bytes, what);
    let transport = state::decode_transport(d.bytes()?, index)?;
    let config_vector = d.u16()?;
    let queues = d.count(64, "queue vectors")? as usize;
    let queue_vectors = (0..queues)
        .map(|_| d.u16())
        .collect::<Result<Vec<_>, _>>()?;
    let config = d.bytes()?.to_vec();
    let vectors = d.count(u32::from(MAX_VECTORS), "MSI-X vectors")? as usize;
    let mut entries = Vec::with_capacity(vectors);
    for _ in 0..vectors {
        entries.push(MsixEntry {
            address_low: d.u32()?,
            address_high: d.u32()?,
            data: d.u32()?,
            vector_control: d.u32()?,
        });
    }
    let words = d.count(u32::from(MAX_VECTORS) / 64, "MSI-X pending words")?;
    let pending = (0..words).map(|_| d.u64()).collect::<Result<Vec<_>, _>>()?;
    d.finish()?;
    Ok(VirtioPciState {
        transport,
        config_vector,
        queue_vectors,
        config,
        msix: MsixSnapshot { entries, pending },
    })
}

/// The host bridge's configuration space and the ACPI PM registers.
pub fn encode_platform(host_bridge: &[u8], pm: &AcpiPmState) -> Vec<u8> {
    let mut e = Encoder::default();
    e.bytes(host_bridge).u16(pm.sts).u16(pm.en).u16(pm.cnt);
    e.0
}

pub fn decode_platform(bytes: &[u8]) -> Result<(Vec<u8>, AcpiPmState), WireError> {
    let mut d = Decoder::new(bytes, "PCI platform state");
    let host_bridge = d.bytes()?.to_vec();
    let pm = AcpiPmState {
        sts: d.u16()?,
        en: d.u16()?,
        cnt: d.u16()?,
    };
    d.finish()?;
    Ok((host_bridge, pm))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::virtio::transport::{QueueConfig, TransportState};

    #[test]
    fn pci_states_round_trip_and_truncation_is_named() {
        let state = VirtioPciState {
            transport: TransportState {
                device_type: 4,
                status: 0xf,
                acked_features: 1 << 32,
                device_features_sel: 1,
                driver_features_sel: 0,
                queue_sel: 0,
                interrupt_status: 0,
                broken: false,
                activated: true,
                queues: vec![QueueConfig {
                    max_size: 256,
                    size: 64,
                    ready: true,
                    desc_table: 0x10_0000,
                    avail_ring: 0x10_1000,
                    used_ring: 0x10_2000,
                }],
                device_state: vec![1, 2, 3],
            },
            config_vector: 0,
            queue_vectors: vec![1],
            config: (0..=255).collect(),
            msix: MsixSnapshot {
                entries: vec![
                    MsixEntry {
                        address_low: 0xfee0_0000,
                        address_high: 0,
                        data: 0x41,
                        vector_control: 0,
                    },
                    MsixEntry::default(),
                ],
                pending: vec![0b10],
            },
        };
        let bytes = encode_pci_transport(&state);
        assert_eq!(decode_pci_transport(&bytes, 3).unwrap(), state);
        let err = decode_pci_transport(&bytes[..bytes.len() - 2], 3).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("malformed virtio-pci device 3 state"),
            "{err}"
        );

        let pm = AcpiPmState {
            sts: 0x100,
            en: 0x100,
            cnt: 1,
        };
        let bytes = encode_platform(&[7; 256], &pm);
        assert_eq!(decode_platform(&bytes).unwrap(), (vec![7; 256], pm));
        assert!(decode_platform(&bytes[1..]).is_err());
    }
}
