//! Parsing and executing one virtio-blk request chain.
//!
//! [`Request::parse`] checks the chain's shape (header first, status last, directions, sizes)
//! and reads the header; [`Request::execute`] moves the data between guest memory and the disk
//! in bounded chunks and writes the status byte. Shape errors and guest addresses outside guest
//! memory are [`ParseRequestError`] / [`ExecuteError`] (the device is then marked broken); disk
//! errors and out-of-range sectors are reported to the guest as an I/O error status.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::guest_memory::GuestMemoryMmap;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::DescriptorChain;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryError};

use super::*;
use crate::devices::virtio::chain::{self, ChainError};

/// Data moves through a bounce buffer of at most this many bytes at a time.
const CHUNK: usize = 64 << 10;

/// A disk: a raw file, or anything that reads and writes at offsets.
pub trait DiskBackend: Send {
    fn size_bytes(&self) -> u64;
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()>;
    fn flush(&mut self) -> io::Result<()>;
}

/// A raw disk image file.
pub struct RawFile {
    file: File,
    len: u64,
}

impl RawFile {
    pub fn new(file: File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(RawFile { file, len })
    }
}

impl DiskBackend for RawFile {
    fn size_bytes(&self) -> u64 {
        self.len
    }
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// What the request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    In,
    Out,
    Flush,
    GetId,
    Unsupported(u32),
}

impl RequestKind {
    /// Whether the device writes the data descriptors.
    fn device_writes_data(self) -> bool {
        matches!(self, RequestKind::In | RequestKind::GetId)
    }
}

/// A parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub kind: RequestKind,
    pub sector: u64,
    pub data: Vec<(GuestAddress, u32)>,
    pub status: GuestAddress,
}

/// A malformed request chain.
#[derive(Debug, thiserror::Error)]
pub enum ParseRequestError {
    #[error("descriptor chain")]
    Chain(#[from] ChainError),
    #[error("chain has {0} descriptor(s); a request needs a header and a status")]
    TooShort(usize),
    #[error("header descriptor is device-writable")]
    HeaderWriteOnly,
    #[error("header descriptor is {0} bytes, need 16")]
    HeaderTooSmall(u32),
    #[error("read header at {0:#x}")]
    ReadHeader(u64, #[source] GuestMemoryError),
    #[error("status descriptor is device-readable")]
    StatusReadOnly,
    #[error("data descriptor {index} has the wrong direction for {kind:?}")]
    DataDirection { index: usize, kind: RequestKind },
    #[error("flush request carries data")]
    FlushWithData,
}

/// Executing a request touched memory outside the guest's.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    #[error("guest buffer at {0:#x}")]
    GuestMemory(u64, #[source] GuestMemoryError),
    #[error("status byte at {0:#x}")]
    WriteStatus(u64, #[source] GuestMemoryError),
    /// The host has no room for the write: the request must wait, not fail (the guest would
    /// lose the write); the worker retries it when told there is room.
    #[error("write at {0:#x}: no space left on the host")]
    NoSpace(u64, #[source] std::io::Error),
}

/// ENOSPC (and EDQUOT, a quota that is full).
fn is_no_space(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull
        || matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// The disk as the request sees it.
pub struct DiskView<'a> {
    pub backend: &'a mut dyn DiskBackend,
    pub readonly: bool,
    pub id: &'a [u8; VIRTIO_BLK_ID_BYTES],
}

impl Request {
    pub fn parse(
        mem: &GuestMemoryMmap,
        chain: DescriptorChain<&GuestMemoryMmap>,
    ) -> Result<Request, ParseRequestError> {
        let descs = chain::collect(chain)?;
        let (header, status, data) = match descs.as_slice() {
            [header, data @ .., status] => (header, status, data),
            _ => return Err(ParseRequestError::TooShort(descs.len())),
        };
        if header.is_write_only() {
            return Err(ParseRequestError::HeaderWriteOnly);
        }
        if header.len() < 16 {
            return Err(ParseRequestError::HeaderTooSmall(header.len()));
        }
        let read_header = |e| ParseRequestError::ReadHeader(header.addr().0, e);
        let kind: u32 = mem.read_obj(header.addr()).map_err(read_header)?;
        let sector_addr = header
            .addr()
            .checked_add(8)
            .ok_or(ParseRequestError::ReadHeader(
                header.addr().0,
                GuestMemoryError::InvalidGuestAddress(header.addr()),
            ))?;
        let sector: u64 = mem.read_obj(sector_addr).map_err(read_header)?;
        if !status.is_write_only() {
            return Err(ParseRequestError::StatusReadOnly);
        }
        let kind = match u32::from_le(kind) {
            VIRTIO_BLK_T_IN => RequestKind::In,
            VIRTIO_BLK_T_OUT => RequestKind::Out,
            VIRTIO_BLK_T_FLUSH => RequestKind::Flush,
            VIRTIO_BLK_T_GET_ID => RequestKind::GetId,
            other => RequestKind::Unsupported(other),
        };
        if kind == RequestKind::Flush && !data.is_empty() {
            return Err(ParseRequestError::FlushWithData);
        }
        if !matches!(kind, RequestKind::Unsupported(_)) {
            check_directions(data, kind)?;
        }
        Ok(Request {
            kind,
            sector: u64::from_le(sector),
            data: data.iter().map(|d| (d.addr(), d.len())).collect(),
            status: status.addr(),
        })
    }

    /// Carries the request out and writes its status; returns the used length (bytes written
    /// into guest buffers, status included).
    pub fn execute(&self, mem: &GuestMemoryMmap, disk: DiskView<'_>) -> Result<u32, ExecuteError> {
        let (status, written) = match self.kind {
            RequestKind::In | RequestKind::Out => self.transfer(mem, disk)?,
            RequestKind::Flush => match (disk.readonly, disk.backend.flush()) {
                (false, Err(_)) => (VIRTIO_BLK_S_IOERR, 0),
                _ => (VIRTIO_BLK_S_OK, 0),
            },
            RequestKind::GetId => self.get_id(mem, disk.id)?,
            RequestKind::Unsupported(_) => (VIRTIO_BLK_S_UNSUPP, 0),
        };
        mem.write_obj(status, self.status)
            .map_err(|e| ExecuteError::WriteStatus(self.status.0, e))?;
        Ok(written + 1)
    }

    fn data_len(&self) -> u64 {
        self.data.iter().map(|(_, len)| u64::from(*len)).sum()
    }

    fn transfer(
        &self,
        mem: &GuestMemoryMmap,
        disk: DiskView<'_>,
    ) -> Result<(u8, u32), ExecuteError> {
        let len = self.data_len();
        let in_range = self
            .sector
            .checked_mul(SECTOR_SIZE)
            .and_then(|start| start.checked_add(len).map(|end| (start, end)))
            .filter(|(_, end)| *end <= disk.backend.size_bytes());
        let Some((mut offset, _)) = in_range else {
            return Ok((VIRTIO_BLK_S_IOERR, 0));
        };
        if len % SECTOR_SIZE != 0 || (self.kind == RequestKind::Out && disk.readonly) {
            return Ok((VIRTIO_BLK_S_IOERR, 0));
        }
        let mut buf = vec![0u8; CHUNK.min(len as usize)];
        for (addr, desc_len) in &self.data {
            let mut done = 0u64;
            while done < u64::from(*desc_len) {
                let n = (u64::from(*desc_len) - done).min(CHUNK as u64) as usize;
                let guest = addr.checked_add(done).ok_or(ExecuteError::GuestMemory(
                    addr.0,
                    GuestMemoryError::InvalidGuestAddress(*addr),
                ))?;
                let chunk = &mut buf[..n];
                if self.kind == RequestKind::In {
                    if disk.backend.read_at(chunk, offset).is_err() {
                        return Ok((VIRTIO_BLK_S_IOERR, 0));
                    }
                    mem.write_slice(chunk, guest)
                        .map_err(|e| ExecuteError::GuestMemory(guest.0, e))?;
                } else {
                    mem.read_slice(chunk, guest)
                        .map_err(|e| ExecuteError::GuestMemory(guest.0, e))?;
                    match disk.backend.write_at(chunk, offset) {
                        Ok(()) => {}
                        Err(e) if is_no_space(&e) => return Err(ExecuteError::NoSpace(offset, e)),
                        Err(_) => return Ok((VIRTIO_BLK_S_IOERR, 0)),
                    }
                }
                done += n as u64;
                offset += n as u64;
            }
        }
        let written = if self.kind == RequestKind::In {
            len as u32
        } else {
            0
        };
        Ok((VIRTIO_BLK_S_OK, written))
    }

    fn get_id(
        &self,
        mem: &GuestMemoryMmap,
        id: &[u8; VIRTIO_BLK_ID_BYTES],
    ) -> Result<(u8, u32), ExecuteError> {
        let mut remaining: &[u8] = id;
        let mut written = 0u32;
        for (addr, len) in &self.data {
            let n = remaining.len().min(*len as usize);
            mem.write_slice(&remaining[..n], *addr)
                .map_err(|e| ExecuteError::GuestMemory(addr.0, e))?;
            remaining = &remaining[n..];
            written += n as u32;
        }
        Ok((VIRTIO_BLK_S_OK, written))
    }
}

fn check_directions(data: &[Descriptor], kind: RequestKind) -> Result<(), ParseRequestError> {
    match data
        .iter()
        .position(|d| d.is_write_only() != kind.device_writes_data())
    {
        Some(index) => Err(ParseRequestError::DataDirection { index, kind }),
        None => Ok(()),
    }
}

/// The GET_ID answer for a disk id: its first 20 bytes, NUL-padded.
pub fn disk_id(id: &str) -> [u8; VIRTIO_BLK_ID_BYTES] {
    let mut out = [0u8; VIRTIO_BLK_ID_BYTES];
    let n = id.len().min(VIRTIO_BLK_ID_BYTES);
    out[..n].copy_from_slice(&id.as_bytes()[..n]);
    out
}
