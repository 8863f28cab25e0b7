//! A tap device opened through `/dev/net/tun` (no vhost-net here): `TUNSETIFF` with
//! `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`, a 12-byte vnet header, non-blocking I/O, and
//! `TUNSETOFFLOAD` for the offloads the guest accepted.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use vmm_sys_util::ioctl::ioctl_with_ref;
use vmm_sys_util::ioctl_iow_nr;

use super::VNET_HDR_LEN;

const TUNTAP: u32 = 0x54;
ioctl_iow_nr!(TUNSETIFF, TUNTAP, 202, libc::c_int);
ioctl_iow_nr!(TUNSETOFFLOAD, TUNTAP, 208, libc::c_uint);
ioctl_iow_nr!(TUNSETVNETHDRSZ, TUNTAP, 216, libc::c_int);

const IFF_TAP: i16 = 0x0002;
const IFF_NO_PI: i16 = 0x1000;
const IFF_VNET_HDR: i16 = 0x4000;

/// `TUNSETOFFLOAD` flags.
pub const TUN_F_CSUM: u32 = 0x01;
pub const TUN_F_TSO4: u32 = 0x02;
pub const TUN_F_TSO6: u32 = 0x04;
pub const TUN_F_UFO: u32 = 0x10;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags in the union.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: i16,
    _pad: [u8; 22],
}

/// Opening or configuring the tap failed.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    #[error("tap name {0:?} is empty or longer than 15 bytes")]
    BadName(String),
    #[error("open /dev/net/tun")]
    OpenTun(#[source] io::Error),
    #[error("attach to tap {0:?} (TUNSETIFF)")]
    SetIff(String, #[source] io::Error),
    #[error("set vnet header size")]
    SetVnetHdrSize(#[source] io::Error),
    #[error("set offloads")]
    SetOffload(#[source] io::Error),
}

/// An open tap queue.
pub struct Tap {
    file: File,
}

fn ioctl_result(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Tap {
    /// Opens (creating it if needed and allowed) the tap interface `name`.
    pub fn open(name: &str) -> Result<Tap, TapError> {
        if name.is_empty() || name.len() > 15 {
            return Err(TapError::BadName(name.into()));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(TapError::OpenTun)?;
        let mut req = IfReq {
            name: [0; 16],
            flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads a `struct ifreq` (40 bytes, name then flags) that `req` lays
        // out; the kernel does not keep the pointer. The result is checked.
        let ret = unsafe { ioctl_with_ref(&file, TUNSETIFF(), &req) };
        ioctl_result(ret).map_err(|e| TapError::SetIff(name.into(), e))?;
        let size = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one int from the pointer; result checked.
        let ret = unsafe { ioctl_with_ref(&file, TUNSETVNETHDRSZ(), &size) };
        ioctl_result(ret).map_err(TapError::SetVnetHdrSize)?;
        Ok(Tap { file })
    }

    /// Applies `TUN_F_*` offload flags.
    pub fn set_offload(&self, flags: u32) -> Result<(), TapError> {
        // SAFETY: TUNSETOFFLOAD takes the flags as the ioctl's integer argument: no memory of
        // ours is read or written. The result is checked.
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_val(
                &self.file,
                TUNSETOFFLOAD(),
                libc::c_ulong::from(flags),
            )
        };
        ioctl_result(ret).map_err(TapError::SetOffload)
    }
}

impl Read for Tap {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf)
    }
}

impl Write for Tap {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Tap {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
