//! Loading the payload into guest memory: the kernel (ELF with a 64-bit entry, e.g. vmlinux or
//! the project's test guests, or a bzImage), the initramfs (at the top of low RAM) and the
//! command line (with the virtio-mmio device entries appended); for a guestless VM, instead of
//! all that, a `hlt` loop ([`IDLE_CODE`]).
//!
//! Both kernel formats enter in 64-bit long mode (Linux's 64-bit boot protocol): ELF at its
//! entry point, bzImage at its protected-mode start + 0x200 (`startup_64`). A PVH note, if the
//! ELF has one, is not used: this VMM always enters in long mode, which also works on PVM hosts.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::guest_memory::GuestMemoryMmap;
use linux_loader::cmdline::Cmdline;
use linux_loader::loader::bootparam::setup_header;
use linux_loader::loader::{load_cmdline, BzImage, Elf, KernelLoader};
use vm_memory::{Bytes, GuestAddress};

use crate::arch::boot_params::InitramfsRange;
use crate::arch::{ram_ranges, CMDLINE_MAX_SIZE, CMDLINE_START, HIMEM_START};

/// Offset of `startup_64` from a bzImage's protected-mode code.
const BZIMAGE_64BIT_ENTRY_OFFSET: u64 = 0x200;
const ELF_MAGIC: [u8; 4] = *b"\x7fELF";

/// The loaded kernel.
#[derive(Debug)]
pub struct LoadedKernel {
    /// 64-bit entry point.
    pub entry: u64,
    /// First byte after the kernel image.
    pub end: u64,
    /// The setup header of a bzImage, for the zero page.
    pub bzimage_header: Option<setup_header>,
}

/// Loading the kernel failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadKernelError {
    #[error("open kernel {0}")]
    Open(PathBuf, #[source] io::Error),
    #[error("read kernel header")]
    ReadMagic(#[source] io::Error),
    #[error("load ELF kernel")]
    Elf(#[source] linux_loader::loader::Error),
    #[error("load bzImage kernel")]
    BzImage(#[source] linux_loader::loader::Error),
}

/// Loads an ELF or bzImage kernel.
pub fn load_kernel(mem: &GuestMemoryMmap, path: &Path) -> Result<LoadedKernel, LoadKernelError> {
    let mut file = File::open(path).map_err(|e| LoadKernelError::Open(path.into(), e))?;
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic)
        .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
        .map_err(LoadKernelError::ReadMagic)?;
    let himem = Some(GuestAddress(HIMEM_START));
    if magic == ELF_MAGIC {
        let loaded = Elf::load(mem, None, &mut file, himem).map_err(LoadKernelError::Elf)?;
        Ok(LoadedKernel {
            entry: loaded.kernel_load.0,
            end: loaded.kernel_end,
            bzimage_header: None,
        })
    } else {
        let loaded =
            BzImage::load(mem, None, &mut file, himem).map_err(LoadKernelError::BzImage)?;
        Ok(LoadedKernel {
            entry: loaded.kernel_load.0 + BZIMAGE_64BIT_ENTRY_OFFSET,
            end: loaded.kernel_end,
            bzimage_header: loaded.setup_header,
        })
    }
}

/// What a guestless VM runs instead of a kernel: `hlt; jmp <the hlt>`. The vCPU enters it in long
/// mode with interrupts off (RFLAGS 0x2), so it halts in KVM until the VMM kicks it (pause,
/// stop) and halts again if anything wakes it.
pub const IDLE_CODE: [u8; 3] = [
    0xf4, // hlt
    0xeb, 0xfd, // jmp short -3: back to the hlt
];

/// Where [`IDLE_CODE`] goes: where a kernel would ([`HIMEM_START`], 1 MiB).
pub const IDLE_CODE_START: u64 = HIMEM_START;

/// Writes [`IDLE_CODE`] at [`IDLE_CODE_START`]; returns its entry.
pub fn load_idle_code(mem: &GuestMemoryMmap) -> Result<u64, vm_memory::GuestMemoryError> {
    mem.write_slice(&IDLE_CODE, GuestAddress(IDLE_CODE_START))?;
    Ok(IDLE_CODE_START)
}

/// Loading the initramfs failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadInitramfsError {
    #[error("open initramfs {0}")]
    Open(PathBuf, #[source] io::Error),
    #[error("initramfs of {size} bytes does not fit between the kernel end {kernel_end:#x} and {low_end:#x}")]
    DoesNotFit {
        size: u64,
        kernel_end: u64,
        low_end: u64,
    },
    #[error("copy initramfs into guest memory")]
    Copy(#[source] vm_memory::GuestMemoryError),
}

/// Loads the initramfs at the top of low RAM (page aligned), above the kernel.
pub fn load_initramfs(
    mem: &GuestMemoryMmap,
    path: &Path,
    memory_size: u64,
    kernel_end: u64,
) -> Result<InitramfsRange, LoadInitramfsError> {
    let mut file = File::open(path).map_err(|e| LoadInitramfsError::Open(path.into(), e))?;
    let size = file
        .metadata()
        .map_err(|e| LoadInitramfsError::Open(path.into(), e))?
        .len();
    // Linux's initrd_addr_max defaults to 2 GiB - 1.
    let low_end = ram_ranges(memory_size)[0].1.min(0x8000_0000);
    let address = low_end
        .checked_sub(size)
        .map(|a| a & !0xfff)
        .filter(|a| *a >= kernel_end)
        .ok_or(LoadInitramfsError::DoesNotFit {
            size,
            kernel_end,
            low_end,
        })?;
    mem.read_exact_volatile_from(GuestAddress(address), &mut file, size as usize)
        .map_err(LoadInitramfsError::Copy)?;
    Ok(InitramfsRange { address, size })
}

/// Building or writing the command line failed.
#[derive(Debug, thiserror::Error)]
pub enum CmdlineError {
    #[error("command line too long or invalid")]
    Build(#[source] linux_loader::cmdline::Error),
    #[error("write command line")]
    Write(#[source] linux_loader::loader::Error),
}

/// The command line: the configured one plus `virtio_mmio.device=4K@<base>:<irq>` per device.
pub fn build_cmdline(base: &str, virtio: &[(u64, u32)]) -> Result<Cmdline, CmdlineError> {
    let mut cmdline = Cmdline::new(CMDLINE_MAX_SIZE).map_err(CmdlineError::Build)?;
    if !base.trim().is_empty() {
        cmdline
            .insert_str(base.trim())
            .map_err(CmdlineError::Build)?;
    }
    for (addr, irq) in virtio {
        cmdline
            .insert_str(format!("virtio_mmio.device=4K@{addr:#x}:{irq}"))
            .map_err(CmdlineError::Build)?;
    }
    Ok(cmdline)
}

/// Writes the command line; returns its size with the NUL.
pub fn write_cmdline(mem: &GuestMemoryMmap, cmdline: &Cmdline) -> Result<usize, CmdlineError> {
    load_cmdline(mem, GuestAddress(CMDLINE_START), cmdline).map_err(CmdlineError::Write)?;
    Ok(cmdline
        .as_cstring()
        .map(|c| c.as_bytes_with_nul().len())
        .unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_gets_virtio_entries() {
        let cmdline =
            build_cmdline("console=ttyS0", &[(0xd000_0000, 5), (0xd000_1000, 6)]).unwrap();
        let text = cmdline.as_cstring().unwrap().into_string().unwrap();
        assert_eq!(
            text,
            "console=ttyS0 virtio_mmio.device=4K@0xd0000000:5 virtio_mmio.device=4K@0xd0001000:6"
        );
        assert!(build_cmdline(&"x".repeat(CMDLINE_MAX_SIZE + 1), &[]).is_err());
    }

    #[test]
    fn the_idle_code_is_a_hlt_loop_where_a_kernel_would_be() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 16 << 20)]).unwrap();
        let entry = load_idle_code(&mem).unwrap();
        assert_eq!(entry, HIMEM_START);
        let mut code = [0u8; 3];
        mem.read_slice(&mut code, GuestAddress(entry)).unwrap();
        assert_eq!(code, [0xf4, 0xeb, 0xfd]);
        // The jump lands on the hlt: its target is the end of the jmp (entry + 3) plus -3.
        let target = (entry + 3).wrapping_add_signed(i64::from(code[2] as i8));
        assert_eq!(target, entry);
    }

    #[test]
    fn missing_and_bad_kernels_are_errors() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 16 << 20)]).unwrap();
        assert!(matches!(
            load_kernel(&mem, Path::new("/nonexistent/kernel")),
            Err(LoadKernelError::Open(..))
        ));
        let junk =
            std::env::temp_dir().join(format!("ferrovirt-junk-kernel-{}", std::process::id()));
        std::fs::write(&junk, vec![0x55u8; 8192]).unwrap();
        assert!(matches!(
            load_kernel(&mem, &junk),
            Err(LoadKernelError::BzImage(_))
        ));
        std::fs::remove_file(junk).unwrap();
    }
}
