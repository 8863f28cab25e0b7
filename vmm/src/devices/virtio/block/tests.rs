//! virtio-blk request tests against `virtio_queue::mock` chains: each request type, host-side
//! failures reported as status, and malformed chains rejected as errors (never a panic).

use std::io;
use std::sync::Arc;

use crate::guest_memory::GuestMemoryMmap;
use virtio_queue::mock::MockSplitQueue;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use super::request::{disk_id, DiskBackend, DiskView, ExecuteError, ParseRequestError, Request};
use super::*;
use crate::devices::virtio::chain::ChainError;
use crate::devices::virtio::test_utils::*;
use crate::devices::virtio::Interrupt;

const HDR: u64 = BUF;
const DATA: u64 = BUF + 0x1000;
const STATUS: u64 = BUF + 0x100;

struct MemDisk {
    bytes: Vec<u8>,
    fail: bool,
    flushed: bool,
}

impl MemDisk {
    fn new(sectors: usize) -> Self {
        let bytes = (0..sectors * 512).map(|i| (i / 512) as u8).collect();
        MemDisk {
            bytes,
            fail: false,
            flushed: false,
        }
    }
}

impl DiskBackend for MemDisk {
    fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.fail {
            return Err(io::Error::other("injected"));
        }
        let o = offset as usize;
        buf.copy_from_slice(&self.bytes[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.fail {
            return Err(io::Error::other("injected"));
        }
        let o = offset as usize;
        self.bytes[o..o + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.flushed = true;
        Ok(())
    }
}

fn header(mem: &GuestMemoryMmap, kind: u32, sector: u64) {
    mem.write_obj(kind, GuestAddress(HDR)).unwrap();
    mem.write_obj(0u32, GuestAddress(HDR + 4)).unwrap();
    mem.write_obj(sector, GuestAddress(HDR + 8)).unwrap();
    mem.write_obj(0xffu8, GuestAddress(STATUS)).unwrap();
}

fn run(
    mem: &GuestMemoryMmap,
    descs: &[virtio_queue::desc::RawDescriptor],
    disk: &mut MemDisk,
    readonly: bool,
) -> Result<u32, String> {
    let mock = MockSplitQueue::new(mem, 16);
    let chain = mock.build_desc_chain(descs).unwrap();
    let request = Request::parse(mem, chain).map_err(|e| format!("parse: {e:?}"))?;
    let id = disk_id("disk-under-test-with-a-long-name");
    request
        .execute(
            mem,
            DiskView {
                backend: disk,
                readonly,
                id: &id,
            },
        )
        .map_err(|e| format!("execute: {e:?}"))
}

fn status(mem: &GuestMemoryMmap) -> u8 {
    mem.read_obj(GuestAddress(STATUS)).unwrap()
}

#[test]
fn read_sectors() {
    let mem = mem();
    let mut disk = MemDisk::new(8);
    header(&mem, VIRTIO_BLK_T_IN, 2);
    let descs = [
        desc(HDR, 16, 0, 0),
        desc(DATA, 512, WRITE, 0),
        desc(DATA + 512, 512, WRITE, 0),
        desc(STATUS, 1, WRITE, 0),
    ];
    assert_eq!(run(&mem, &descs, &mut disk, false), Ok(1025));
    assert_eq!(status(&mem), VIRTIO_BLK_S_OK);
    let mut buf = [0u8; 1024];
    mem.read_slice(&mut buf, GuestAddress(DATA)).unwrap();
    assert!(buf[..512].iter().all(|b| *b == 2));
    assert!(buf[512..].iter().all(|b| *b == 3));
}

#[test]
fn write_sectors_and_flush() {
    let mem = mem();
    let mut disk = MemDisk::new(8);
    header(&mem, VIRTIO_BLK_T_OUT, 5);
    mem.write_slice(&[0xab; 512], GuestAddress(DATA)).unwrap();
    let descs = [
        desc(HDR, 16, 0, 0),
        desc(DATA, 512, 0, 0),
        desc(STATUS, 1, WRITE, 0),
    ];
    assert_eq!(run(&mem, &descs, &mut disk, false), Ok(1));
    assert_eq!(status(&mem), VIRTIO_BLK_S_OK);
    assert!(disk.bytes[5 * 512..6 * 512].iter().all(|b| *b == 0xab));
    assert!(disk.bytes[4 * 512..5 * 512].iter().all(|b| *b == 4));

    header(&mem, VIRTIO_BLK_T_FLUSH, 0);
    let descs = [desc(HDR, 16, 0, 0), desc(STATUS, 1, WRITE, 0)];
    assert_eq!(run(&mem, &descs, &mut disk, false), Ok(1));
    assert_eq!(status(&mem), VIRTIO_BLK_S_OK);
    assert!(disk.flushed);
}

#[test]
fn get_id_is_truncated_to_20_bytes() {
    let mem = mem();
    let mut disk = MemDisk::new(1);
    header(&mem, VIRTIO_BLK_T_GET_ID, 0);
    let descs = [
        desc(HDR, 16, 0, 0),
        desc(DATA, 64, WRITE, 0),
        desc(STATUS, 1, WRITE, 0),
    ];
    assert_eq!(run(&mem, &descs, &mut disk, false), Ok(21));
    let mut id = [0u8; 20];
    mem.read_slice(&mut id, GuestAddress(DATA)).unwrap();
    assert_eq!(&id, b"disk-under-test-with");
}

#[test]
fn failures_the_guest_sees_as_status() {
    let mem = mem();
    let write = [
        desc(HDR, 16, 0, 0),
        desc(DATA, 512, 0, 0),
        desc(STATUS, 1, WRITE, 0),
    ];
    let read = [
        desc(HDR, 16, 0, 0),
        desc(DATA, 512, WRITE, 0),
        desc(STATUS, 1, WRITE, 0),
    ];
    let cases: [(u32, u64, &[_], bool, bool, u8); 6] = [
        // Write to a read-only disk.
        (VIRTIO_BLK_T_OUT, 0, &write, true, false, VIRTIO_BLK_S_IOERR),
        // Past the end of the disk, and a sector number whose byte offset overflows.
        (VIRTIO_BLK_T_IN, 8, &read, false, false, VIRTIO_BLK_S_IOERR),
        (
            VIRTIO_BLK_T_IN,
            u64::MAX / 2,
            &read,
            false,
            false,
            VIRTIO_BLK_S_IOERR,
        ),
        // The host file fails.
        (VIRTIO_BLK_T_IN, 0, &read, false, true, VIRTIO_BLK_S_IOERR),
        // Unknown request type.
        (77, 0, &read, false, false, VIRTIO_BLK_S_UNSUPP),
        // Not a whole sector.
        (
            VIRTIO_BLK_T_IN,
            0,
            &[
                desc(HDR, 16, 0, 0),
                desc(DATA, 100, WRITE, 0),
                desc(STATUS, 1, WRITE, 0),
            ],
            false,
            false,
            VIRTIO_BLK_S_IOERR,
        ),
    ];
    for (kind, sector, descs, readonly, fail, expected) in cases {
        let mut disk = MemDisk::new(8);
        disk.fail = fail;
        header(&mem, kind, sector);
        assert_eq!(
            run(&mem, descs, &mut disk, readonly),
            Ok(1),
            "{kind} {sector}"
        );
        assert_eq!(status(&mem), expected, "{kind} {sector}");
        assert!(disk.bytes[..512].iter().all(|b| *b == 0));
    }
}

fn parse_error(
    mem: &GuestMemoryMmap,
    descs: &[virtio_queue::desc::RawDescriptor],
) -> ParseRequestError {
    let mock = MockSplitQueue::new(mem, 16);
    let chain = mock.build_multiple_desc_chains(descs).unwrap();
    Request::parse(mem, chain).unwrap_err()
}

#[test]
fn malformed_chains_are_errors() {
    let mem = mem();
    header(&mem, VIRTIO_BLK_T_IN, 0);
    let out_of_memory = MEM_SIZE + 0x1000;
    let cases: Vec<(&str, Vec<_>)> = vec![
        (
            "loop",
            vec![desc(HDR, 16, NEXT, 1), desc(DATA, 512, NEXT | WRITE, 0)],
        ),
        ("next out of table", vec![desc(HDR, 16, NEXT, 99)]),
        (
            "zero length data",
            vec![
                desc(HDR, 16, NEXT, 1),
                desc(DATA, 0, NEXT | WRITE, 2),
                desc(STATUS, 1, WRITE, 0),
            ],
        ),
        ("single descriptor", vec![desc(HDR, 16, 0, 0)]),
        (
            "header write-only",
            vec![desc(HDR, 16, NEXT | WRITE, 1), desc(STATUS, 1, WRITE, 0)],
        ),
        (
            "header too small",
            vec![desc(HDR, 8, NEXT, 1), desc(STATUS, 1, WRITE, 0)],
        ),
        (
            "header outside memory",
            vec![desc(out_of_memory, 16, NEXT, 1), desc(STATUS, 1, WRITE, 0)],
        ),
        (
            "header at the top of the address space",
            vec![desc(u64::MAX - 4, 16, NEXT, 1), desc(STATUS, 1, WRITE, 0)],
        ),
        (
            "status read-only",
            vec![desc(HDR, 16, NEXT, 1), desc(STATUS, 1, 0, 0)],
        ),
        (
            "read into device-readable data",
            vec![
                desc(HDR, 16, NEXT, 1),
                desc(DATA, 512, NEXT, 2),
                desc(STATUS, 1, WRITE, 0),
            ],
        ),
    ];
    for (what, descs) in cases {
        let err = parse_error(&mem, &descs);
        if what == "loop" || what == "next out of table" {
            assert!(
                matches!(err, ParseRequestError::Chain(ChainError::Unterminated)),
                "{what}: {err:?}"
            );
        }
        if what == "zero length data" {
            assert!(
                matches!(err, ParseRequestError::Chain(ChainError::ZeroLength(1))),
                "{what}: {err:?}"
            );
        }
    }
    header(&mem, VIRTIO_BLK_T_OUT, 0);
    let err = parse_error(
        &mem,
        &[
            desc(HDR, 16, NEXT, 1),
            desc(DATA, 512, NEXT | WRITE, 2),
            desc(STATUS, 1, WRITE, 0),
        ],
    );
    assert!(
        matches!(err, ParseRequestError::DataDirection { index: 0, .. }),
        "{err:?}"
    );
    header(&mem, VIRTIO_BLK_T_FLUSH, 0);
    let err = parse_error(
        &mem,
        &[
            desc(HDR, 16, NEXT, 1),
            desc(DATA, 512, NEXT, 2),
            desc(STATUS, 1, WRITE, 0),
        ],
    );
    assert!(matches!(err, ParseRequestError::FlushWithData), "{err:?}");
}

#[test]
fn buffers_outside_guest_memory_are_errors() {
    let mem = mem();
    let mut disk = MemDisk::new(8);
    header(&mem, VIRTIO_BLK_T_IN, 0);
    // Data straddles the end of guest memory.
    let descs = [
        desc(HDR, 16, 0, 0),
        desc(MEM_SIZE - 256, 512, WRITE, 0),
        desc(STATUS, 1, WRITE, 0),
    ];
    let err = run(&mem, &descs, &mut disk, false).unwrap_err();
    assert!(err.starts_with("execute: GuestMemory"), "{err}");
    // Status outside guest memory.
    let descs = [
        desc(HDR, 16, 0, 0),
        desc(DATA, 512, WRITE, 0),
        desc(MEM_SIZE + 10, 1, WRITE, 0),
    ];
    let err = run(&mem, &descs, &mut disk, false).unwrap_err();
    assert!(err.starts_with("execute: WriteStatus"), "{err}");
    // A huge data descriptor near the end of the address space.
    header(&mem, VIRTIO_BLK_T_OUT, 0);
    let mut big = MemDisk::new(1 << 14);
    let descs = [
        desc(HDR, 16, 0, 0),
        desc(u64::MAX - 0x1000, 1 << 20, 0, 0),
        desc(STATUS, 1, WRITE, 0),
    ];
    let err = run(&mem, &descs, &mut big, false).unwrap_err();
    assert!(err.starts_with("execute: GuestMemory"), "{err}");
    let _: Option<ExecuteError> = None;
}

#[test]
fn device_marks_itself_broken_on_a_malformed_chain() {
    let mem = mem();
    let mock = MockSplitQueue::new(&mem, 16);
    mock.add_desc_chains(
        &[desc(HDR, 16, NEXT, 1), desc(DATA, 512, NEXT | WRITE, 0)],
        0,
    )
    .unwrap();
    let queue: Queue = mock.create_queue().unwrap();
    let interrupt = Arc::new(Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap()));
    let mut worker = super::device::tests_support::worker(
        mem.clone(),
        queue,
        interrupt.clone(),
        MemDisk::new(4),
    );
    worker.process_queue();
    assert!(interrupt.is_broken());
    assert_eq!(mock.used().idx().load(), 0);
}

#[test]
fn device_processes_a_good_chain() {
    let mem = mem();
    header(&mem, VIRTIO_BLK_T_IN, 1);
    let mock = MockSplitQueue::new(&mem, 16);
    mock.add_desc_chains(
        &[
            desc(HDR, 16, NEXT, 1),
            desc(DATA, 512, NEXT | WRITE, 2),
            desc(STATUS, 1, WRITE, 0),
        ],
        0,
    )
    .unwrap();
    let queue: Queue = mock.create_queue().unwrap();
    let interrupt = Arc::new(Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap()));
    let mut worker = super::device::tests_support::worker(
        mem.clone(),
        queue,
        interrupt.clone(),
        MemDisk::new(4),
    );
    worker.process_queue();
    assert!(!interrupt.is_broken());
    assert_eq!(mock.used().idx().load(), 1);
    assert_eq!(mock.used().ring().ref_at(0).unwrap().load().len(), 513);
    assert_eq!(status(&mem), VIRTIO_BLK_S_OK);
    let _ = Queue::new(16).unwrap().max_size();
}

#[test]
fn writes_are_recorded_for_migration() {
    let mem = mem();
    // Sector 200 is byte 102400: block 1 of 64 KiB.
    header(&mem, VIRTIO_BLK_T_OUT, 200);
    let mock = MockSplitQueue::new(&mem, 16);
    mock.add_desc_chains(
        &[
            desc(HDR, 16, NEXT, 1),
            desc(DATA, 512, NEXT, 2),
            desc(STATUS, 1, WRITE, 0),
        ],
        0,
    )
    .unwrap();
    let queue: Queue = mock.create_queue().unwrap();
    let interrupt = Arc::new(Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap()));
    let (mut worker, handle) = super::device::tests_support::worker_and_handle(
        mem.clone(),
        queue,
        interrupt.clone(),
        MemDisk::new(1024),
    );
    assert_eq!(handle.take_written(), vec![0]);
    worker.process_queue();
    assert_eq!(status(&mem), VIRTIO_BLK_S_OK);
    assert_eq!(handle.take_written(), vec![0b10]);
    assert_eq!(handle.take_written(), vec![0], "taking clears");
    assert_eq!(handle.size_bytes(), 1024 * 512);
    assert_eq!(handle.id(), "t");
}

/// A disk on a host filesystem that is full until `room` is set.
struct FullDisk {
    disk: MemDisk,
    room: Arc<std::sync::atomic::AtomicBool>,
}

impl DiskBackend for FullDisk {
    fn size_bytes(&self) -> u64 {
        self.disk.size_bytes()
    }
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.disk.read_at(buf, offset)
    }
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.room.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.disk.write_at(buf, offset)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.disk.flush()
    }
}

#[test]
fn a_write_the_host_has_no_room_for_waits_and_is_retried() {
    let mem = mem();
    header(&mem, VIRTIO_BLK_T_OUT, 3);
    mem.write_slice(&[0xab; 512], GuestAddress(DATA)).unwrap();
    let mock = MockSplitQueue::new(&mem, 16);
    mock.add_desc_chains(
        &[
            desc(HDR, 16, NEXT, 1),
            desc(DATA, 512, NEXT, 2),
            desc(STATUS, 1, WRITE, 0),
        ],
        0,
    )
    .unwrap();
    let queue: Queue = mock.create_queue().unwrap();
    let interrupt = Arc::new(Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap()));
    let room = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let disk = FullDisk {
        disk: MemDisk::new(8),
        room: room.clone(),
    };
    let (mut worker, handle) = super::device::tests_support::worker_and_handle(
        mem.clone(),
        queue,
        interrupt.clone(),
        disk,
    );

    // No room: the request is neither completed nor failed, and the disk says why.
    worker.process_queue();
    assert_eq!(mock.used().idx().load(), 0, "the guest's request completed");
    assert!(!interrupt.is_broken());
    assert_eq!(status(&mem), 0xff, "a status reached the guest");
    let why = handle.stalled().expect("the disk is stalled");
    assert!(
        why.contains("write at 0x600") && why.contains("os error 28"),
        "{why}"
    );
    // A notification while stalled changes nothing; a retry without room stalls again.
    worker.process_queue();
    handle.retry();
    assert_eq!(handle.stalled(), None);
    worker.process_queue();
    assert!(handle.stalled().is_some());
    assert_eq!(mock.used().idx().load(), 0);

    // Room: the retry writes what the guest asked for, once.
    room.store(true, std::sync::atomic::Ordering::SeqCst);
    handle.retry();
    worker.process_queue();
    assert_eq!(handle.stalled(), None);
    assert_eq!(mock.used().idx().load(), 1);
    assert_eq!(status(&mem), VIRTIO_BLK_S_OK);
    let mut sector = [0u8; 512];
    handle.read_at(&mut sector, 3 * 512).unwrap();
    assert!(sector.iter().all(|b| *b == 0xab));
}
