//! Live migration of a KVM VM over a byte stream: pre-copy of guest memory with dirty-page
//! logging, then stop-and-copy of the last dirty pages and the vCPU, VM and device state.
//!
//! API: [`Vmm::send_migration`] on the source, [`Vmm::restore_from`] on the target, each over
//! any `Read + Write` stream (a Unix socket, a TCP or TLS stream relayed by virt-handler).
//! A migration that fails for any reason leaves the source VM as it was (running, or paused if
//! it was paused) and returns the reason; one that succeeds stops the source
//! ([`crate::lifecycle::VmExit::Stopped`]) and the target runs (or stays paused if the source
//! was paused: save/restore of a paused VM is the same protocol).
//!
//! # Protocol (version [`wire::VERSION`])
//!
//! Both directions start with the preamble `FVMIGRAT` + version (u32), then sections
//! `tag u32, length u64, payload` (little-endian throughout):
//!
//! 1. source -> target `HELLO`: RAM ranges (count u32, then start u64 + length u64 each), vCPU
//!    count (u32), virtio device types in slot order (count u32, then u32 each), paused (u8),
//!    the disks whose content is copied (count u32, then slot u32 + size u64 each), and for the
//!    PCI machine a last byte 1 (a virtio-mmio HELLO ends before it, as in earlier versions).
//! 2. target -> source `REPLY`: code (u8: 0 accepted, 1 ready, 2 refused) and a message. The
//!    target refuses a stream of another version, another memory layout, vCPU count, device
//!    list or transport, saying which; the source then returns [`SendError::Refused`] and keeps
//!    running.
//! 3. source -> target `MEMORY` sections, round by round: round (u32), then runs of
//!    `gpa u64, pages u32, pages * 4096 bytes`. Round 0 is all of guest memory except pages
//!    that are all zero (the target's fresh memory is zero); KVM dirty logging
//!    (`KVM_MEM_LOG_DIRTY_PAGES`, `KVM_GET_DIRTY_LOG`) and the VMM's own bitmaps
//!    ([`crate::vstate::memory::take_dirty_pages`]) give each next round's pages, while the
//!    guest keeps running. Once a round's dirty set is at most
//!    [`MigrationOptions::stop_copy_pages`] pages, or after [`MigrationOptions::max_rounds`]
//!    rounds, the source pauses the vCPUs and the device workers and sends the last dirty pages.
//!    Each round also sends, in `DISK` sections (slot u32, round u32, then runs of
//!    `offset u64, length u32, bytes`), the blocks of each copied disk that the guest wrote:
//!    round 0 every non-zero 64 KiB block, then the blocks virtio-blk recorded as written
//!    (KubeVirt's block migration). Copied disks are the writable ones except those named in
//!    [`MigrationOptions::shared_disks`] (shared storage, which the target already sees: copying
//!    into it while the source runs would undo the source's newer writes). The target checks
//!    that it has a writable disk of the same size in that slot, writes the blocks into its own
//!    file and flushes it before it reports ready.
//! 4. source -> target `STATE`: the VM (PICs, IOAPIC, PIT, KVM clock), each vCPU (see
//!    [`state`]), COM1, the i8042 and each virtio transport (with, for the virtio-console of
//!    the guest agent channel, which ports the driver readied and opened, what it was last
//!    told of the host side, and the control messages it has yet to receive); on the PCI
//!    machine each device's configuration space, vectors and MSI-X table and PBA, then the host
//!    bridge and the ACPI PM registers ([`pci_state`]); then `END`. The target maps the BARs where the source's
//!    guest had put them, routes the MSI-X vectors again and raises the level-triggered lines
//!    that still have something pending.
//! 5. target -> source `REPLY` ready: the target has restored everything; it then runs (unless
//!    the source was paused) and the source stops. Any other reply, or none, and the source
//!    resumes. A ready reply lost on the way leaves both running: which one goes on is the
//!    cluster's decision (virt-handler and the migration controller stop the other).
//!
//! The downtime is from the source's pause to the target's ready reply. A stream that ends
//! early is reported as truncated, with the part that was incomplete.
//!
//! Limits: host-side connections of virtio-vsock and a frame virtio-net had read from its tap
//! but not yet delivered do not travel (the target opens its own tap and vsock socket from its
//! config). Nor does the guest agent channel's client or the bytes in flight to or from it:
//! the target listens on the socket its own config names, tells the guest the host side
//! closed if a client was connected to the source, and serves the client that connects (the
//! launcher reconnects). Read-only disks are not copied: the target must have the same image.

mod disk;
mod memory;
pub mod pci_state;
mod receive;
pub use receive::parse_stream;
mod send;
pub mod state;
/// The stream's framing and payload encoding (at the bottom of the crate, as saved KVM state
/// uses it too).
pub use crate::wire;

use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use log::warn;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryError, GuestMemoryRegion};

pub use crate::error::error_chain;

use crate::builder::{build_machine, Machine, StartVmError};
use crate::config::VmConfig;
use crate::devices::virtio::block::{DiskHandle, DIRTY_BLOCK};
use crate::devices::virtio::transport::{TransportSnapshot, VirtioTransport};
use crate::lifecycle::Requested;
use crate::vmm::{VmState, Vmm};
use crate::vstate::memory::{
    set_dirty_logging, take_dirty_pages, DirtyLogError, GuestMemoryMmap, MemoryError, PAGE_SIZE,
};
use crate::vstate::vcpu::{lock_vcpu, ConfigureVcpuError, Vcpu};
use state::{KvmStateError, RestoreStateError};
use wire::{Decoder, Encoder, WireError};

use disk::*;
use memory::*;

/// Most payload bytes of one MEMORY section.
const MEMORY_SECTION_BYTES: usize = 4 << 20;
/// Limits of the other sections a target accepts.
const HELLO_LIMIT: u64 = 64 << 10;
const STATE_LIMIT: u64 = 16 << 20;
const REPLY_LIMIT: u64 = 64 << 10;

const REPLY_ACCEPTED: u8 = 0;
const REPLY_READY: u8 = 1;
const REPLY_REFUSED: u8 = 2;

/// When pre-copy stops.
#[derive(Clone, Debug)]
pub struct MigrationOptions {
    /// Pre-copy rounds after the first full pass before stopping the VM regardless.
    pub max_rounds: u32,
    /// Stop and copy once a round's dirty set is this small (pages; a written disk block
    /// counts as 16 pages).
    pub stop_copy_pages: u64,
    /// Ids of writable disks on shared storage, which are not copied.
    pub shared_disks: Vec<String>,
}

impl Default for MigrationOptions {
    fn default() -> Self {
        MigrationOptions {
            max_rounds: 30,
            stop_copy_pages: 256,
            shared_disks: Vec::new(),
        }
    }
}

/// What a successful migration did.
#[derive(Clone, Debug, Default)]
pub struct MigrationStats {
    /// Pages sent in each round: round 0 (full pass), the dirty rounds, and last the
    /// stop-and-copy round.
    pub pages_per_round: Vec<u64>,
    pub pages_sent: u64,
    /// Disk blocks (64 KiB at most) sent, all rounds and disks together.
    pub disk_blocks_sent: u64,
    pub bytes_sent: u64,
    /// From pausing the source to the target's ready reply.
    pub downtime: Duration,
    pub total: Duration,
}

impl MigrationStats {
    /// Pre-copy rounds while the guest ran (round 0 included).
    pub fn precopy_rounds(&self) -> usize {
        self.pages_per_round.len().saturating_sub(1)
    }
}

/// The source side of a migration failed; the source VM is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("the VM is not running: {0}")]
    NotRunning(crate::lifecycle::VmExit),
    #[error("a migration of this VM is already under way")]
    AlreadyMigrating,
    #[error("migration stream")]
    Wire(#[from] WireError),
    #[error("the target refused the migration: {0}")]
    Refused(String),
    #[error("turn dirty-page logging on")]
    DirtyLogging(#[source] MemoryError),
    #[error("read the dirty pages")]
    DirtyLog(#[source] DirtyLogError),
    #[error("read guest memory at {0:#x}")]
    ReadMemory(u64, #[source] GuestMemoryError),
    #[error("read disk {id:?} at {offset:#x}")]
    ReadDisk {
        id: String,
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("save the VM state")]
    SaveState(#[source] KvmStateError),
}

/// The target side of a migration failed; no VM was started.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error("build the target VM")]
    Build(#[source] StartVmError),
    #[error("migration stream")]
    Wire(#[from] WireError),
    #[error(
        "memory size mismatch: the source has {} MiB ({}), this VM {} MiB ({})",
        total(source_ranges) >> 20, show_ranges(source_ranges),
        total(target_ranges) >> 20, show_ranges(target_ranges)
    )]
    MemoryMismatch {
        source_ranges: Vec<(u64, u64)>,
        target_ranges: Vec<(u64, u64)>,
    },
    #[error("vCPU count mismatch: the source has {source_vcpus}, this VM {target_vcpus}")]
    VcpuMismatch {
        source_vcpus: u32,
        target_vcpus: u32,
    },
    #[error("transport mismatch: the source's virtio devices are on {source_transport}, this VM's on {target_transport}")]
    TransportMismatch {
        source_transport: &'static str,
        target_transport: &'static str,
    },
    #[error("virtio device mismatch: the source has types {source_devices:?}, this VM {target_devices:?}")]
    DeviceMismatch {
        source_devices: Vec<u32>,
        target_devices: Vec<u32>,
    },
    #[error("disk mismatch in virtio slot {slot}: {why}")]
    DiskMismatch { slot: u32, why: String },
    #[error("write disk of virtio slot {slot} at {offset:#x}")]
    WriteDisk {
        slot: u32,
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("DISK section for virtio slot {slot}, which the HELLO did not announce")]
    UnknownDisk { slot: u32 },
    #[error("{pages} pages at {gpa:#x} are outside guest memory")]
    PageOutsideMemory { gpa: u64, pages: u32 },
    #[error("the stream ended without a STATE section")]
    NoState,
    #[error("create vCPU")]
    CreateVcpu(#[source] ConfigureVcpuError),
    #[error("restore state")]
    RestoreState(#[from] RestoreStateError),
    #[error("restore COM1")]
    RestoreSerial(#[source] std::io::Error),
    #[error("restore virtio device {0}")]
    RestoreDevice(
        usize,
        #[source] crate::devices::virtio::transport::RestoreTransportError,
    ),
    #[error("restore the PCI host bridge: {0}")]
    RestoreHostBridge(String),
    #[error("start the vCPUs")]
    Start(#[source] StartVmError),
}

fn total(ranges: &[(u64, u64)]) -> u64 {
    ranges.iter().map(|r| r.1).sum()
}

fn show_ranges(ranges: &[(u64, u64)]) -> String {
    let parts: Vec<String> = ranges
        .iter()
        .map(|(start, len)| format!("{len:#x} bytes at {start:#x}"))
        .collect();
    parts.join(", ")
}

struct Hello {
    ranges: Vec<(u64, u64)>,
    vcpus: u32,
    devices: Vec<u32>,
    paused: bool,
    /// Copied disks: (virtio slot, size in bytes).
    disks: Vec<(u32, u64)>,
    /// The virtio devices are on PCI.
    pci: bool,
}

fn transport_name(pci: bool) -> &'static str {
    if pci {
        "pci"
    } else {
        "mmio"
    }
}

impl Hello {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::default();
        e.u32(self.ranges.len() as u32);
        for (start, len) in &self.ranges {
            e.u64(*start).u64(*len);
        }
        e.u32(self.vcpus).u32(self.devices.len() as u32);
        for d in &self.devices {
            e.u32(*d);
        }
        e.u8(u8::from(self.paused));
        e.u32(self.disks.len() as u32);
        for (slot, size) in &self.disks {
            e.u32(*slot).u64(*size);
        }
        if self.pci {
            e.u8(1);
        }
        e.0
    }

    fn decode(bytes: &[u8]) -> Result<Hello, WireError> {
        let mut d = Decoder::new(bytes, "HELLO");
        let n = d.count(16, "memory ranges")?;
        let ranges = (0..n)
            .map(|_| Ok((d.u64()?, d.u64()?)))
            .collect::<Result<Vec<_>, WireError>>()?;
        let vcpus = d.u32()?;
        let n = d.count(64, "devices")?;
        let devices = (0..n).map(|_| d.u32()).collect::<Result<Vec<_>, _>>()?;
        let paused = d.u8()? != 0;
        let n = d.count(64, "disks")?;
        let disks = (0..n)
            .map(|_| Ok((d.u32()?, d.u64()?)))
            .collect::<Result<Vec<_>, WireError>>()?;
        let pci = !d.is_empty() && d.u8()? == 1;
        d.finish()?;
        Ok(Hello {
            ranges,
            vcpus,
            devices,
            paused,
            disks,
            pci,
        })
    }
}

/// The virtio device type of each transport, in slot order.
fn device_types(virtio: &[Arc<Mutex<dyn VirtioTransport>>]) -> Vec<u32> {
    virtio
        .iter()
        .map(|t| t.lock().unwrap_or_else(crate::poison::fatal).device_type())
        .collect()
}

fn ranges(mem: &GuestMemoryMmap) -> Vec<(u64, u64)> {
    mem.iter().map(|r| (r.start_addr().0, r.len())).collect()
}

fn write_reply<S: Write>(
    stream: &mut S,
    preamble_sent: &mut bool,
    code: u8,
    message: &str,
) -> Result<(), WireError> {
    if !*preamble_sent {
        wire::write_preamble(stream)?;
        *preamble_sent = true;
    }
    let mut e = Encoder::default();
    e.u8(code).bytes(message.as_bytes());
    wire::write_section(stream, wire::TAG_REPLY, &e.0)?;
    stream.flush().map_err(|source| WireError::Io {
        what: "flush the reply".into(),
        source,
    })
}

/// Reads a REPLY section; returns (code, message).
fn read_reply<S: Read>(stream: &mut S) -> Result<(u8, String), WireError> {
    let (tag, len) = wire::read_section_header(stream)?;
    if tag != wire::TAG_REPLY {
        return Err(WireError::UnexpectedSection {
            expected: "REPLY",
            got: tag,
        });
    }
    let payload = wire::read_payload(stream, tag, len, REPLY_LIMIT)?;
    let mut d = Decoder::new(&payload, "REPLY");
    let code = d.u8()?;
    let message = String::from_utf8_lossy(d.bytes()?).into_owned();
    d.finish()?;
    Ok((code, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_limits() {
        let hello = Hello {
            ranges: vec![(0, 64 << 20)],
            vcpus: 2,
            devices: vec![2, 4],
            paused: true,
            disks: vec![(0, 1 << 20)],
            pci: false,
        };
        let back = Hello::decode(&hello.encode()).unwrap();
        assert_eq!(back.ranges, hello.ranges);
        assert_eq!(back.vcpus, 2);
        assert_eq!(back.devices, vec![2, 4]);
        assert!(back.paused);
        assert_eq!(back.disks, vec![(0, 1 << 20)]);
        assert!(!back.pci);
        let bytes = hello.encode();
        assert!(Hello::decode(&bytes[..bytes.len() - 1]).is_err());
        // The PCI machine adds one byte; a virtio-mmio HELLO is the one of earlier versions.
        let pci = Hello { pci: true, ..hello };
        let pci_bytes = pci.encode();
        assert_eq!(pci_bytes.len(), bytes.len() + 1);
        assert_eq!(&pci_bytes[..bytes.len()], &bytes[..]);
        assert!(Hello::decode(&pci_bytes).unwrap().pci);
    }

    #[test]
    fn batches_group_consecutive_pages_into_runs() {
        let mut batch = Batch::new(3);
        let page = vec![7u8; PAGE_SIZE as usize];
        batch.push(0x1000, &page);
        batch.push(0x2000, &page);
        batch.push(0x8000, &page);
        let mut d = Decoder::new(&batch.buf, "MEMORY");
        assert_eq!(d.u32().unwrap(), 3);
        assert_eq!(d.u64().unwrap(), 0x1000);
        assert_eq!(d.u32().unwrap(), 2);
        d.raw(2 * PAGE_SIZE as usize).unwrap();
        assert_eq!(d.u64().unwrap(), 0x8000);
        assert_eq!(d.u32().unwrap(), 1);
        d.raw(PAGE_SIZE as usize).unwrap();
        d.finish().unwrap();
    }

    #[test]
    fn memory_outside_guest_ram_is_refused() {
        let mem = crate::vstate::memory::create_guest_memory(1 << 20).unwrap();
        let mut batch = Batch::new(0);
        batch.push(1 << 20, &[1u8; PAGE_SIZE as usize]);
        let err = apply_memory(&mem, &batch.buf).unwrap_err();
        assert!(matches!(err, ReceiveError::PageOutsideMemory { gpa, pages: 1 } if gpa == 1 << 20));
        let mut batch = Batch::new(0);
        batch.push(0x3000, &[9u8; PAGE_SIZE as usize]);
        apply_memory(&mem, &batch.buf).unwrap();
        let mut byte = [0u8];
        mem.read_slice(&mut byte, GuestAddress(0x3fff)).unwrap();
        assert_eq!(byte[0], 9);
    }

    #[test]
    fn dirty_bitmaps_become_page_addresses() {
        let mem = crate::vstate::memory::create_guest_memory(1 << 20).unwrap();
        let bitmaps = vec![vec![0b101u64, 1 << 63, 0, 0]];
        assert_eq!(
            dirty_gpas(&mem, &bitmaps),
            vec![0, 0x2000, (64 + 63) * PAGE_SIZE]
        );
    }
}
