//! Long-mode entry state: identity page tables and GDT in guest memory, then the vCPU's
//! segment, control and general registers as a 64-bit kernel expects them (Linux's 64-bit boot
//! protocol: paging on, flat segments, `rsi` = zero page).

use crate::guest_memory::GuestMemoryMmap;
use kvm_bindings::{kvm_fpu, kvm_regs, kvm_segment, kvm_sregs};
use vm_memory::{Bytes, GuestAddress, GuestMemoryError};

use super::{BOOT_STACK_POINTER, GDT_START, IDT_START, PML4_START, ZERO_PAGE_START};

const X86_CR0_PE: u64 = 1 << 0;
const X86_CR0_ET: u64 = 1 << 4;
const X86_CR0_PG: u64 = 1 << 31;
const X86_CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;

/// Flat 64-bit GDT: null, code (0x08), data (0x10), TSS (0x18).
const GDT: [u64; 4] = [
    0,
    0x00af_9b00_0000_ffff,
    0x00cf_9300_0000_ffff,
    0x008f_8b00_0000_ffff,
];

/// Writing the boot structures into guest memory failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteBootTablesError {
    #[error("write GDT")]
    Gdt(#[source] GuestMemoryError),
    #[error("write IDT")]
    Idt(#[source] GuestMemoryError),
    #[error("write page tables")]
    PageTables(#[source] GuestMemoryError),
}

/// Writes the GDT, an empty IDT and identity page tables for the first 1 GiB.
pub fn write_boot_tables(mem: &GuestMemoryMmap) -> Result<(), WriteBootTablesError> {
    for (i, entry) in GDT.iter().enumerate() {
        mem.write_obj(*entry, GuestAddress(GDT_START + 8 * i as u64))
            .map_err(WriteBootTablesError::Gdt)?;
    }
    mem.write_obj(0u64, GuestAddress(IDT_START))
        .map_err(WriteBootTablesError::Idt)?;
    let pdpt = PML4_START + 0x1000;
    let pd = PML4_START + 0x2000;
    mem.write_obj(pdpt | 0x3, GuestAddress(PML4_START))
        .map_err(WriteBootTablesError::PageTables)?;
    mem.write_obj(pd | 0x3, GuestAddress(pdpt))
        .map_err(WriteBootTablesError::PageTables)?;
    for i in 0..512u64 {
        // Present, writable, 2 MiB page.
        mem.write_obj((i << 21) | 0x83, GuestAddress(pd + i * 8))
            .map_err(WriteBootTablesError::PageTables)?;
    }
    Ok(())
}

fn segment(selector: u16, descriptor: u64) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_: ((descriptor >> 40) & 0xf) as u8,
        present: ((descriptor >> 47) & 1) as u8,
        dpl: ((descriptor >> 45) & 3) as u8,
        db: ((descriptor >> 54) & 1) as u8,
        s: ((descriptor >> 44) & 1) as u8,
        l: ((descriptor >> 53) & 1) as u8,
        g: ((descriptor >> 55) & 1) as u8,
        avl: ((descriptor >> 52) & 1) as u8,
        unusable: 0,
        padding: 0,
    }
}

/// Sets long mode, flat segments and the boot page tables on `sregs`.
pub fn long_mode_sregs(sregs: &mut kvm_sregs) {
    sregs.gdt.base = GDT_START;
    sregs.gdt.limit = (GDT.len() * 8 - 1) as u16;
    sregs.idt.base = IDT_START;
    sregs.idt.limit = 7;
    sregs.cs = segment(0x08, GDT[1]);
    let data = segment(0x10, GDT[2]);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = segment(0x18, GDT[3]);
    sregs.cr3 = PML4_START;
    sregs.cr4 |= X86_CR4_PAE;
    sregs.cr0 |= X86_CR0_PE | X86_CR0_ET | X86_CR0_PG;
    sregs.efer |= EFER_LME | EFER_LMA;
}

/// General registers at the kernel's 64-bit entry point.
pub fn boot_regs(entry: u64) -> kvm_regs {
    kvm_regs {
        rflags: 0x2,
        rip: entry,
        rsp: BOOT_STACK_POINTER,
        rbp: BOOT_STACK_POINTER,
        rsi: ZERO_PAGE_START,
        ..Default::default()
    }
}

/// FPU state after reset (x87 control word, SSE MXCSR).
pub fn boot_fpu() -> kvm_fpu {
    kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_and_segments() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        write_boot_tables(&mem).unwrap();
        let pde: u64 = mem.read_obj(GuestAddress(PML4_START + 0x2000 + 8)).unwrap();
        assert_eq!(pde, (1 << 21) | 0x83);
        let mut sregs = kvm_sregs::default();
        long_mode_sregs(&mut sregs);
        assert_eq!(sregs.cs.l, 1);
        assert_eq!(sregs.cs.type_, 0xb);
        assert_eq!(sregs.ds.db, 1);
        assert_eq!(sregs.efer & EFER_LMA, EFER_LMA);
        let small = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x1000)]).unwrap();
        assert!(write_boot_tables(&small).is_err());
    }
}
