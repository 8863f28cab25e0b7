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
//!    [`state`]), COM1, the i8042 and each virtio transport; on the PCI machine each device's
//!    configuration space, vectors and MSI-X table and PBA, then the host bridge and the ACPI
//!    PM registers ([`pci_state`]); then `END`. The target maps the BARs where the source's
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
//! config). Read-only disks are not copied: the target must have the same image.

pub mod pci_state;
pub mod state;
pub mod wire;

use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use log::warn;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryError, GuestMemoryRegion};

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

/// An error and its sources on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
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

/// Pages of one MEMORY section being built: runs of consecutive pages.
struct Batch {
    buf: Vec<u8>,
    run_header: Option<usize>,
    next_gpa: u64,
    run_pages: u32,
}

impl Batch {
    fn new(round: u32) -> Batch {
        let mut buf = Vec::with_capacity(MEMORY_SECTION_BYTES + PAGE_SIZE as usize + 16);
        buf.extend_from_slice(&round.to_le_bytes());
        Batch {
            buf,
            run_header: None,
            next_gpa: u64::MAX,
            run_pages: 0,
        }
    }

    fn push(&mut self, gpa: u64, page: &[u8]) {
        if self.run_header.is_none() || gpa != self.next_gpa {
            self.run_header = Some(self.buf.len());
            self.buf.extend_from_slice(&gpa.to_le_bytes());
            self.buf.extend_from_slice(&0u32.to_le_bytes());
            self.run_pages = 0;
        }
        self.buf.extend_from_slice(page);
        self.run_pages += 1;
        self.next_gpa = gpa + PAGE_SIZE;
        if let Some(at) = self.run_header {
            self.buf[at + 8..at + 12].copy_from_slice(&self.run_pages.to_le_bytes());
        }
    }

    fn is_full(&self) -> bool {
        self.buf.len() >= MEMORY_SECTION_BYTES
    }

    fn has_pages(&self) -> bool {
        self.run_header.is_some()
    }
}

/// Sends pages `gpas` (ascending) of `mem` as MEMORY sections of round `round`; with
/// `skip_zero`, pages that are all zero are left out. Returns the pages sent.
fn send_pages<S: Write>(
    stream: &mut S,
    mem: &GuestMemoryMmap,
    round: u32,
    gpas: impl Iterator<Item = u64>,
    skip_zero: bool,
    stats: &mut MigrationStats,
) -> Result<u64, SendError> {
    let mut page = vec![0u8; PAGE_SIZE as usize];
    let mut batch = Batch::new(round);
    let mut sent = 0u64;
    for gpa in gpas {
        mem.read_slice(&mut page, GuestAddress(gpa))
            .map_err(|e| SendError::ReadMemory(gpa, e))?;
        if skip_zero && page.iter().all(|b| *b == 0) {
            continue;
        }
        batch.push(gpa, &page);
        sent += 1;
        if batch.is_full() {
            flush_batch(stream, &mut batch, round, stats)?;
        }
    }
    if batch.has_pages() {
        flush_batch(stream, &mut batch, round, stats)?;
    }
    stats.pages_sent += sent;
    Ok(sent)
}

fn flush_batch<S: Write>(
    stream: &mut S,
    batch: &mut Batch,
    round: u32,
    stats: &mut MigrationStats,
) -> Result<(), SendError> {
    wire::write_section(stream, wire::TAG_MEMORY, &batch.buf)?;
    stats.bytes_sent += batch.buf.len() as u64 + 12;
    *batch = Batch::new(round);
    Ok(())
}

/// Every page of guest memory, ascending.
fn all_pages(mem: &GuestMemoryMmap) -> Vec<u64> {
    mem.iter()
        .flat_map(|r| {
            let start = r.start_addr().0;
            (0..r.len() / PAGE_SIZE).map(move |i| start + i * PAGE_SIZE)
        })
        .collect()
}

/// The pages set in per-region dirty bitmaps, ascending.
fn dirty_gpas(mem: &GuestMemoryMmap, bitmaps: &[Vec<u64>]) -> Vec<u64> {
    let mut gpas = Vec::new();
    for (region, bitmap) in mem.iter().zip(bitmaps) {
        let start = region.start_addr().0;
        let pages = region.len() / PAGE_SIZE;
        for (w, word) in bitmap.iter().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                let bit = u64::from(bits.trailing_zeros());
                let page = w as u64 * 64 + bit;
                if page < pages {
                    gpas.push(start + page * PAGE_SIZE);
                }
                bits &= bits - 1;
            }
        }
    }
    gpas
}

/// The set bits of `bitmap` below `limit`, ascending.
fn set_bits(bitmap: &[u64], limit: u64) -> Vec<u64> {
    let mut bits = Vec::new();
    for (w, word) in bitmap.iter().enumerate() {
        let mut rest = *word;
        while rest != 0 {
            let bit = w as u64 * 64 + u64::from(rest.trailing_zeros());
            if bit < limit {
                bits.push(bit);
            }
            rest &= rest - 1;
        }
    }
    bits
}

/// A disk whose content the migration copies, and its blocks written and not sent yet.
struct CopiedDisk {
    slot: u32,
    handle: DiskHandle,
    size: u64,
    pending: Vec<u64>,
}

impl CopiedDisk {
    fn blocks(&self) -> u64 {
        self.size.div_ceil(DIRTY_BLOCK)
    }

    /// Takes the blocks written since the last call into `pending`.
    fn take_written(&mut self) {
        let written = self.handle.take_written();
        for (a, b) in self.pending.iter_mut().zip(written) {
            *a |= b;
        }
    }

    /// Sends the pending blocks (all blocks, zero ones left out, when `all`) as DISK sections.
    fn send<S: Write>(
        &mut self,
        stream: &mut S,
        round: u32,
        all: bool,
        stats: &mut MigrationStats,
    ) -> Result<(), SendError> {
        let blocks: Vec<u64> = if all {
            (0..self.blocks()).collect()
        } else {
            set_bits(&self.pending, self.blocks())
        };
        self.pending.fill(0);
        let mut payload = Encoder::default();
        payload.u32(self.slot).u32(round);
        let header = payload.0.len();
        let mut buf = vec![0u8; DIRTY_BLOCK as usize];
        for block in blocks {
            let offset = block * DIRTY_BLOCK;
            let len = DIRTY_BLOCK.min(self.size - offset) as usize;
            self.handle
                .read_at(&mut buf[..len], offset)
                .map_err(|source| SendError::ReadDisk {
                    id: self.handle.id().to_string(),
                    offset,
                    source,
                })?;
            if all && buf[..len].iter().all(|b| *b == 0) {
                continue;
            }
            payload.u64(offset).bytes(&buf[..len]);
            stats.disk_blocks_sent += 1;
            if payload.0.len() >= MEMORY_SECTION_BYTES {
                wire::write_section(stream, wire::TAG_DISK, &payload.0)?;
                stats.bytes_sent += payload.0.len() as u64 + 12;
                payload.0.truncate(header);
            }
        }
        if payload.0.len() > header {
            wire::write_section(stream, wire::TAG_DISK, &payload.0)?;
            stats.bytes_sent += payload.0.len() as u64 + 12;
        }
        Ok(())
    }
}

fn merge(into: &mut [Vec<u64>], more: Vec<Vec<u64>>) {
    for (a, b) in into.iter_mut().zip(more) {
        for (x, y) in a.iter_mut().zip(b) {
            *x |= y;
        }
    }
}

impl Vmm {
    /// Live-migrates this VM to the target at the other end of `stream` (see the module docs
    /// for the protocol). On success the VM here is stopped and the stats say what was sent; on
    /// failure it is running again (or still paused, if it was paused) and nothing is lost.
    pub fn send_migration<S: Read + Write>(
        &self,
        stream: &mut S,
        options: &MigrationOptions,
    ) -> Result<MigrationStats, SendError> {
        let started = Instant::now();
        if self.migrating.swap(true, Ordering::SeqCst) {
            return Err(SendError::AlreadyMigrating);
        }
        // A reset in place that began before stays out of the copied state.
        self.control.wait_for_reset();
        let was_paused = match self.state() {
            VmState::Stopped(exit) => {
                self.migrating.store(false, Ordering::SeqCst);
                return Err(SendError::NotRunning(exit));
            }
            VmState::Paused => true,
            VmState::Running => false,
        };
        let result = self.migrate_out(stream, options, was_paused, started);
        if let Err(e) = set_dirty_logging(&self.vm.fd, self.guest_memory(), false) {
            warn!("migration: turn dirty-page logging off: {e}");
        }
        match result {
            Ok(stats) => {
                // The vCPU threads leave their parking at once; `stop`, `wait` or drop joins them.
                self.control.request_exit(crate::lifecycle::VmExit::Stopped);
                self.migrating.store(false, Ordering::SeqCst);
                Ok(stats)
            }
            Err(e) => {
                for transport in &self.devices.virtio {
                    transport
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .resume_device();
                }
                if !was_paused && self.state() == VmState::Paused {
                    if let Err(resume) = self.resume_vcpus() {
                        warn!("migration failed and the VM cannot resume: {resume}");
                    }
                }
                self.migrating.store(false, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    fn migrate_out<S: Read + Write>(
        &self,
        stream: &mut S,
        options: &MigrationOptions,
        was_paused: bool,
        started: Instant,
    ) -> Result<MigrationStats, SendError> {
        let mem = self.guest_memory().clone();
        let hello = Hello {
            ranges: ranges(&mem),
            vcpus: self.vcpu_fds.len() as u32,
            devices: device_types(&self.devices.virtio),
            paused: was_paused,
            disks: Vec::new(),
            pci: self.devices.pci.is_some(),
        };
        let mut disks: Vec<CopiedDisk> = Vec::new();
        for (slot, transport) in self.devices.virtio.iter().enumerate() {
            let Some(handle) = transport.lock().unwrap_or_else(|e| e.into_inner()).disk() else {
                continue;
            };
            if handle.readonly() || options.shared_disks.iter().any(|id| id == handle.id()) {
                continue;
            }
            let size = handle.size_bytes();
            let words = size.div_ceil(DIRTY_BLOCK).div_ceil(64) as usize;
            disks.push(CopiedDisk {
                slot: slot as u32,
                handle,
                size,
                pending: vec![0; words],
            });
        }
        let hello = Hello {
            disks: disks.iter().map(|d| (d.slot, d.size)).collect(),
            ..hello
        };
        wire::write_preamble(stream)?;
        wire::write_section(stream, wire::TAG_HELLO, &hello.encode())?;
        flush(stream)?;
        wire::read_preamble(stream)?;
        match read_reply(stream)? {
            (REPLY_ACCEPTED, _) => {}
            (_, message) => return Err(SendError::Refused(message)),
        }

        let mut stats = MigrationStats::default();
        set_dirty_logging(&self.vm.fd, &mem, true).map_err(SendError::DirtyLogging)?;
        for disk in &mut disks {
            disk.handle.take_written();
        }
        let round0 = send_pages(
            stream,
            &mem,
            0,
            all_pages(&mem).into_iter(),
            true,
            &mut stats,
        )?;
        stats.pages_per_round.push(round0);
        for disk in &mut disks {
            disk.send(stream, 0, true, &mut stats)?;
        }
        let mut round = 1u32;
        let mut pending = take_dirty_pages(&self.vm.fd, &mem).map_err(SendError::DirtyLog)?;
        for disk in &mut disks {
            disk.take_written();
        }
        while !was_paused && round <= options.max_rounds {
            let gpas = dirty_gpas(&mem, &pending);
            let disk_blocks: u64 = disks
                .iter()
                .map(|d| set_bits(&d.pending, d.blocks()).len() as u64)
                .sum();
            if gpas.len() as u64 + disk_blocks * (DIRTY_BLOCK / PAGE_SIZE)
                <= options.stop_copy_pages
            {
                break;
            }
            let sent = send_pages(stream, &mem, round, gpas.into_iter(), false, &mut stats)?;
            stats.pages_per_round.push(sent);
            for disk in &mut disks {
                disk.send(stream, round, false, &mut stats)?;
            }
            round += 1;
            pending = take_dirty_pages(&self.vm.fd, &mem).map_err(SendError::DirtyLog)?;
            for disk in &mut disks {
                disk.take_written();
            }
        }

        // Stop and copy.
        let paused_at = Instant::now();
        if !was_paused {
            self.pause_vcpus().map_err(|e| match e {
                crate::vmm::LifecycleError::NotRunning(exit) => SendError::NotRunning(exit),
                crate::vmm::LifecycleError::Migrating => SendError::AlreadyMigrating,
            })?;
        }
        for transport in &self.devices.virtio {
            transport
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pause_device();
        }
        merge(
            &mut pending,
            take_dirty_pages(&self.vm.fd, &mem).map_err(SendError::DirtyLog)?,
        );
        let gpas = dirty_gpas(&mem, &pending);
        let sent = send_pages(stream, &mem, round, gpas.into_iter(), false, &mut stats)?;
        stats.pages_per_round.push(sent);
        for disk in &mut disks {
            disk.take_written();
            disk.send(stream, round, false, &mut stats)?;
        }

        let state = self.save_state().map_err(SendError::SaveState)?;
        wire::write_section(stream, wire::TAG_STATE, &state)?;
        wire::write_section(stream, wire::TAG_END, &[])?;
        stats.bytes_sent += state.len() as u64 + 24;
        flush(stream)?;
        match read_reply(stream)? {
            (REPLY_READY, _) => {}
            (_, message) => return Err(SendError::Refused(message)),
        }
        stats.downtime = paused_at.elapsed();
        stats.total = started.elapsed();
        Ok(stats)
    }

    /// The STATE payload: VM, vCPUs, COM1, i8042, virtio transports (the VM must be paused).
    fn save_state(&self) -> Result<Vec<u8>, KvmStateError> {
        let mut e = Encoder::default();
        e.bytes(&state::save_vm(&self.vm.fd)?);
        e.u32(self.vcpu_fds.len() as u32);
        let mut msrs = None;
        for (id, fd) in self.vcpu_fds.iter().enumerate() {
            let fd = lock_vcpu(fd);
            if msrs.is_none() {
                msrs = Some(state::migratable_msrs(&self.vm.kvm, &fd)?);
            }
            let indices = msrs.as_deref().unwrap_or_default();
            e.bytes(&state::save_vcpu(&fd, id, indices)?);
        }
        let serial = self
            .devices
            .serial
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .state();
        e.bytes(&state::encode_serial(&serial));
        let i8042 = self
            .devices
            .i8042
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .state();
        e.bytes(&state::encode_i8042(&i8042));
        e.u32(self.devices.virtio.len() as u32);
        for transport in &self.devices.virtio {
            let snapshot = transport
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .snapshot();
            match snapshot {
                TransportSnapshot::Mmio(t) => e.bytes(&state::encode_transport(&t)),
                TransportSnapshot::Pci(t) => e.bytes(&pci_state::encode_pci_transport(&t)),
            };
        }
        if let Some(pci) = &self.devices.pci {
            let host_bridge = pci.root().host_bridge_state();
            let pm = pci.acpi_pm().state();
            e.bytes(&pci_state::encode_platform(&host_bridge, &pm));
        }
        Ok(e.0)
    }

    /// Builds a VM from `config` (the same devices and memory as the source's) and receives
    /// the migration at the other end of `stream` into it. Returns the VM running (or paused,
    /// if the source was paused). On error the source is told why (best effort) and no VM runs.
    pub fn restore_from<S: Read + Write>(
        config: &VmConfig,
        stream: &mut S,
    ) -> Result<Vmm, ReceiveError> {
        let mut preamble_sent = false;
        let result = receive(config, stream, &mut preamble_sent);
        match result {
            Ok((vmm, paused)) => {
                if let Err(e) = write_reply(stream, &mut preamble_sent, REPLY_READY, "ready") {
                    let mut vmm = vmm;
                    vmm.stop();
                    return Err(e.into());
                }
                if !paused {
                    if let Err(e) = vmm.resume() {
                        warn!("migration target: resume: {e}");
                    }
                }
                Ok(vmm)
            }
            Err(e) => {
                let message = error_chain(&e);
                if let Err(reply) = write_reply(stream, &mut preamble_sent, REPLY_REFUSED, &message)
                {
                    warn!("migration target: could not tell the source why it failed: {reply}");
                }
                Err(e)
            }
        }
    }
}

fn flush<S: Write>(stream: &mut S) -> Result<(), WireError> {
    stream.flush().map_err(|source| WireError::Io {
        what: "flush".into(),
        source,
    })
}

/// The target's side up to a restored, paused VM; returns it and whether the source was paused.
fn receive<S: Read + Write>(
    config: &VmConfig,
    stream: &mut S,
    preamble_sent: &mut bool,
) -> Result<(Vmm, bool), ReceiveError> {
    let machine = build_machine(config).map_err(ReceiveError::Build)?;
    wire::read_preamble(stream)?;
    let (tag, len) = wire::read_section_header(stream)?;
    if tag != wire::TAG_HELLO {
        return Err(WireError::UnexpectedSection {
            expected: "HELLO",
            got: tag,
        }
        .into());
    }
    let hello = Hello::decode(&wire::read_payload(stream, tag, len, HELLO_LIMIT)?)?;
    check_hello(&machine, &hello)?;
    let disks = target_disks(&machine, &hello)?;
    write_reply(stream, preamble_sent, REPLY_ACCEPTED, "accepted")?;

    let mem = machine.mem.clone();
    let memory_limit = MEMORY_SECTION_BYTES as u64 + DIRTY_BLOCK + 64;
    let mut state = None;
    loop {
        let (tag, len) = wire::read_section_header(stream)?;
        match tag {
            wire::TAG_MEMORY => {
                let payload = wire::read_payload(stream, tag, len, memory_limit)?;
                apply_memory(&mem, &payload)?;
            }
            wire::TAG_DISK => {
                let payload = wire::read_payload(stream, tag, len, memory_limit)?;
                apply_disk(&disks, &payload)?;
            }
            wire::TAG_STATE => state = Some(wire::read_payload(stream, tag, len, STATE_LIMIT)?),
            wire::TAG_END => break,
            other => {
                return Err(WireError::UnexpectedSection {
                    expected: "MEMORY, STATE or END",
                    got: other,
                }
                .into())
            }
        }
    }
    let state = state.ok_or(ReceiveError::NoState)?;
    for (slot, disk) in &disks {
        disk.flush().map_err(|source| ReceiveError::WriteDisk {
            slot: *slot,
            offset: 0,
            source,
        })?;
    }
    let vmm = restore_machine(machine, &state)?;
    Ok((vmm, hello.paused))
}

fn check_hello(machine: &Machine, hello: &Hello) -> Result<(), ReceiveError> {
    let here = ranges(&machine.mem);
    if hello.ranges != here {
        return Err(ReceiveError::MemoryMismatch {
            source_ranges: hello.ranges.clone(),
            target_ranges: here,
        });
    }
    if hello.vcpus != u32::from(machine.vcpu_count) {
        return Err(ReceiveError::VcpuMismatch {
            source_vcpus: hello.vcpus,
            target_vcpus: u32::from(machine.vcpu_count),
        });
    }
    let pci = machine.pci.is_some();
    if hello.pci != pci {
        return Err(ReceiveError::TransportMismatch {
            source_transport: transport_name(hello.pci),
            target_transport: transport_name(pci),
        });
    }
    let devices = device_types(&machine.virtio);
    if hello.devices != devices {
        return Err(ReceiveError::DeviceMismatch {
            source_devices: hello.devices.clone(),
            target_devices: devices,
        });
    }
    Ok(())
}

/// This VM's disks for the copied disks the HELLO announces, checked: same slot, writable,
/// same size.
fn target_disks(machine: &Machine, hello: &Hello) -> Result<Vec<(u32, DiskHandle)>, ReceiveError> {
    let mut disks = Vec::new();
    for &(slot, size) in &hello.disks {
        let mismatch = |why: String| ReceiveError::DiskMismatch { slot, why };
        let handle = machine
            .virtio
            .get(slot as usize)
            .and_then(|t| t.lock().unwrap_or_else(|e| e.into_inner()).disk())
            .ok_or_else(|| mismatch("this VM has no disk there".into()))?;
        if handle.readonly() {
            return Err(mismatch(format!(
                "disk {:?} is read-only here",
                handle.id()
            )));
        }
        let here = handle.size_bytes();
        if here != size {
            return Err(mismatch(format!(
                "the source's disk has {size} bytes, disk {:?} here {here}",
                handle.id()
            )));
        }
        disks.push((slot, handle));
    }
    Ok(disks)
}

fn apply_disk(disks: &[(u32, DiskHandle)], payload: &[u8]) -> Result<(), ReceiveError> {
    let mut d = Decoder::new(payload, "DISK");
    let slot = d.u32()?;
    let _round = d.u32()?;
    let handle = disks
        .iter()
        .find(|(s, _)| *s == slot)
        .map(|(_, h)| h)
        .ok_or(ReceiveError::UnknownDisk { slot })?;
    let size = handle.size_bytes();
    while !d.is_empty() {
        let offset = d.u64()?;
        let data = d.bytes()?;
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > size)
        {
            return Err(d
                .malformed(format!(
                    "{} bytes at {offset:#x} are past the end of the {size}-byte disk",
                    data.len()
                ))
                .into());
        }
        handle
            .write_at(data, offset)
            .map_err(|source| ReceiveError::WriteDisk {
                slot,
                offset,
                source,
            })?;
    }
    Ok(())
}

fn apply_memory(mem: &GuestMemoryMmap, payload: &[u8]) -> Result<(), ReceiveError> {
    let mut d = Decoder::new(payload, "MEMORY");
    let _round = d.u32()?;
    while !d.is_empty() {
        let gpa = d.u64()?;
        let pages = d.u32()?;
        let len = u64::from(pages) * PAGE_SIZE;
        let data = d.raw(len as usize)?;
        let inside = gpa % PAGE_SIZE == 0
            && mem.iter().any(|r| {
                let start = r.start_addr().0;
                gpa >= start
                    && gpa
                        .checked_add(len)
                        .is_some_and(|end| end <= start + r.len())
            });
        if !inside {
            return Err(ReceiveError::PageOutsideMemory { gpa, pages });
        }
        mem.write_slice(data, GuestAddress(gpa))
            .map_err(|_| ReceiveError::PageOutsideMemory { gpa, pages })?;
    }
    Ok(())
}

/// Restores the STATE payload into `machine` and starts its vCPUs parked (paused).
fn restore_machine(machine: Machine, state: &[u8]) -> Result<Vmm, ReceiveError> {
    let mut d = Decoder::new(state, "STATE");
    state::restore_vm(&machine.vm.fd, d.bytes()?)?;
    let count = d.u32()?;
    if count != u32::from(machine.vcpu_count) {
        return Err(ReceiveError::VcpuMismatch {
            source_vcpus: count,
            target_vcpus: u32::from(machine.vcpu_count),
        });
    }
    let mut vcpus = Vec::new();
    for id in 0..machine.vcpu_count {
        let vcpu = Vcpu::create(
            &machine.vm,
            id,
            machine.vcpu_count,
            machine.buses.clone(),
            machine.control.clone(),
        )
        .map_err(ReceiveError::CreateVcpu)?;
        state::restore_vcpu(&lock_vcpu(&vcpu.fd()), usize::from(id), d.bytes()?)?;
        vcpus.push(vcpu);
    }
    let serial = state::decode_serial(d.bytes()?)?;
    machine
        .serial
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .restore(&serial)
        .map_err(ReceiveError::RestoreSerial)?;
    let i8042 = state::decode_i8042(d.bytes()?)?;
    machine
        .i8042
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .restore(&i8042);
    let devices = d.u32()? as usize;
    if devices != machine.virtio.len() {
        return Err(d
            .malformed(format!(
                "{devices} virtio devices where this VM has {}",
                machine.virtio.len()
            ))
            .into());
    }
    for (i, transport) in machine.virtio.iter().enumerate() {
        let snapshot = match machine.pci {
            None => TransportSnapshot::Mmio(state::decode_transport(d.bytes()?, i)?),
            Some(_) => {
                TransportSnapshot::Pci(Box::new(pci_state::decode_pci_transport(d.bytes()?, i)?))
            }
        };
        transport
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .restore(&snapshot)
            .map_err(|e| ReceiveError::RestoreDevice(i, e))?;
    }
    if let Some(pci) = &machine.pci {
        let (host_bridge, pm) = pci_state::decode_platform(d.bytes()?)?;
        let mut root = pci.root();
        root.restore_host_bridge(&host_bridge)
            .map_err(ReceiveError::RestoreHostBridge)?;
        root.sync_all();
        drop(root);
        pci.acpi_pm().restore(&pm);
        pci.resampler.raise_pending();
    }
    d.finish()?;
    machine.control.lock().requested = Requested::Pause;
    machine.start(vcpus).map_err(ReceiveError::Start)
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
