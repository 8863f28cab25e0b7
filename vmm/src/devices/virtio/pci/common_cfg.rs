//! The virtio-pci common configuration structure (virtio 1.x, 4.1.4.3), at the start of BAR 0:
//!
//! | offset | size | field | |
//! |---|---|---|---|
//! | 0x00 | 4 | device_feature_select | rw |
//! | 0x04 | 4 | device_feature | ro: the half the select picks |
//! | 0x08 | 4 | driver_feature_select | rw |
//! | 0x0c | 4 | driver_feature | rw: the accepted half, offered bits only |
//! | 0x10 | 2 | config_msix_vector | rw: reads NO_VECTOR if the table has no such vector |
//! | 0x12 | 2 | num_queues | ro |
//! | 0x14 | 1 | device_status | rw: 0 resets the device and every vector |
//! | 0x15 | 1 | config_generation | ro: 0, the configuration never changes |
//! | 0x16 | 2 | queue_select | rw |
//! | 0x18 | 2 | queue_size | rw: the maximum until the driver writes less |
//! | 0x1a | 2 | queue_msix_vector | rw, as config_msix_vector |
//! | 0x1c | 2 | queue_enable | rw: 1 enables the queue |
//! | 0x1e | 2 | queue_notify_off | ro: the queue index (notify at index * 4) |
//! | 0x20 | 8 | queue_desc | rw |
//! | 0x28 | 8 | queue_driver | rw |
//! | 0x30 | 8 | queue_device | rw |
//!
//! Queue fields apply to the queue selected; size, enable and addresses only between
//! FEATURES_OK and DRIVER_OK. Any width and alignment works: a read is cut from the whole
//! structure, a write is merged into the current value of each field it touches (so the 64-bit
//! addresses can come as two 32-bit halves, as Linux writes them).

use virtio_queue::QueueT;

use super::interrupt::{PciInterrupt, NO_VECTOR};
use crate::devices::virtio::transport::VirtioCore;

/// Bytes of the structure.
pub const SIZE: u64 = 0x38;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    DeviceFeatureSelect,
    DeviceFeature,
    DriverFeatureSelect,
    DriverFeature,
    ConfigMsixVector,
    NumQueues,
    DeviceStatus,
    ConfigGeneration,
    QueueSelect,
    QueueSize,
    QueueMsixVector,
    QueueEnable,
    QueueNotifyOff,
    QueueDesc,
    QueueDriver,
    QueueDevice,
}

/// `(offset, size, field)`.
const FIELDS: [(u64, u64, Field); 16] = [
    (0x00, 4, Field::DeviceFeatureSelect),
    (0x04, 4, Field::DeviceFeature),
    (0x08, 4, Field::DriverFeatureSelect),
    (0x0c, 4, Field::DriverFeature),
    (0x10, 2, Field::ConfigMsixVector),
    (0x12, 2, Field::NumQueues),
    (0x14, 1, Field::DeviceStatus),
    (0x15, 1, Field::ConfigGeneration),
    (0x16, 2, Field::QueueSelect),
    (0x18, 2, Field::QueueSize),
    (0x1a, 2, Field::QueueMsixVector),
    (0x1c, 2, Field::QueueEnable),
    (0x1e, 2, Field::QueueNotifyOff),
    (0x20, 8, Field::QueueDesc),
    (0x28, 8, Field::QueueDriver),
    (0x30, 8, Field::QueueDevice),
];

fn value(core: &VirtioCore, irq: &PciInterrupt, field: Field) -> u64 {
    let queue = core.selected_queue();
    let selected = core.queue_sel as usize;
    match field {
        Field::DeviceFeatureSelect => u64::from(core.device_features_sel),
        Field::DeviceFeature => u64::from(core.device_features()),
        Field::DriverFeatureSelect => u64::from(core.driver_features_sel),
        Field::DriverFeature => u64::from(core.driver_features()),
        Field::ConfigMsixVector => u64::from(irq.config_vector()),
        Field::NumQueues => core.queue_count() as u64,
        Field::DeviceStatus => u64::from(core.status() as u8),
        Field::ConfigGeneration => 0,
        Field::QueueSelect => u64::from(core.queue_sel as u16),
        Field::QueueSize => queue.map_or(0, |q| u64::from(q.size())),
        Field::QueueMsixVector => match queue {
            Some(_) => u64::from(irq.queue_vector(selected)),
            None => u64::from(NO_VECTOR),
        },
        Field::QueueEnable => queue.map_or(0, |q| u64::from(q.ready())),
        Field::QueueNotifyOff => queue.map_or(0, |_| selected as u64),
        Field::QueueDesc => queue.map_or(0, |q| q.desc_table()),
        Field::QueueDriver => queue.map_or(0, |q| q.avail_ring()),
        Field::QueueDevice => queue.map_or(0, |q| q.used_ring()),
    }
}

fn apply(core: &mut VirtioCore, irq: &PciInterrupt, field: Field, value: u64) {
    let selected = core.queue_sel as usize;
    match field {
        Field::DeviceFeatureSelect => core.device_features_sel = value as u32,
        Field::DriverFeatureSelect => core.driver_features_sel = value as u32,
        Field::DriverFeature => core.write_driver_features(value as u32),
        Field::ConfigMsixVector => irq.set_config_vector(value as u16),
        Field::DeviceStatus => {
            core.set_status(value as u32);
            if value == 0 {
                irq.reset_vectors();
            }
        }
        Field::QueueSelect => core.queue_sel = u32::from(value as u16),
        Field::QueueSize => {
            if let Some(q) = core.selected_queue_for_setup("queue_size") {
                q.set_size(value as u16);
            }
        }
        Field::QueueMsixVector => irq.set_queue_vector(selected, value as u16),
        Field::QueueEnable => {
            if value != 1 {
                guest_warn!("virtio-pci: queue_enable written with {value}, not 1: ignored");
            } else if let Some(q) = core.selected_queue_for_setup("queue_enable") {
                q.set_ready(true);
            }
        }
        Field::QueueDesc => {
            if let Some(q) = core.selected_queue_for_setup("queue_desc") {
                q.set_desc_table_address(Some(value as u32), Some((value >> 32) as u32));
            }
        }
        Field::QueueDriver => {
            if let Some(q) = core.selected_queue_for_setup("queue_driver") {
                q.set_avail_ring_address(Some(value as u32), Some((value >> 32) as u32));
            }
        }
        Field::QueueDevice => {
            if let Some(q) = core.selected_queue_for_setup("queue_device") {
                q.set_used_ring_address(Some(value as u32), Some((value >> 32) as u32));
            }
        }
        Field::DeviceFeature
        | Field::NumQueues
        | Field::ConfigGeneration
        | Field::QueueNotifyOff => {
            guest_warn!("virtio-pci: write to read-only common configuration field {field:?}");
        }
    }
}

/// The driver reads `data.len()` bytes at `offset`; past the structure reads as zero.
pub fn read(core: &VirtioCore, irq: &PciInterrupt, offset: u64, data: &mut [u8]) {
    data.fill(0);
    let end = offset.saturating_add(data.len() as u64);
    for (start, size, field) in FIELDS {
        if start >= end || start + size <= offset {
            continue;
        }
        let bytes = value(core, irq, field).to_le_bytes();
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset + i as u64;
            if at >= start && at < start + size {
                *byte = bytes[(at - start) as usize];
            }
        }
    }
}

/// The driver writes `data` at `offset`.
pub fn write(core: &mut VirtioCore, irq: &PciInterrupt, offset: u64, data: &[u8]) {
    let end = offset.saturating_add(data.len() as u64);
    if end > SIZE {
        guest_warn!("virtio-pci: common configuration write past its end at {offset:#x}");
    }
    for (start, size, field) in FIELDS {
        if start >= end || start + size <= offset {
            continue;
        }
        let mut bytes = value(core, irq, field).to_le_bytes();
        for (i, byte) in data.iter().enumerate() {
            let at = offset + i as u64;
            if at >= start && at < start + size {
                bytes[(at - start) as usize] = *byte;
            }
        }
        apply(core, irq, field, u64::from_le_bytes(bytes));
    }
}
