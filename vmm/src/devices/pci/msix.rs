//! MSI-X: the capability, the vector table and the pending bit array (PBA), in a BAR.
//!
//! Protocol, step by step (PCI 3.0, 6.8.2):
//!
//! 1. The capability (id 0x11) gives the table size and where table and PBA are (BAR and
//!    offset). Its message control has two guest bits: MSI-X enable and function mask.
//! 2. The table has 16 bytes per vector: message address low/high, message data, vector
//!    control (bit 0: masked). Every vector starts masked.
//! 3. The driver masks a vector, writes its address and data, unmasks it, then enables MSI-X
//!    (INTx is off while MSI-X is on).
//! 4. Delivery ([`MsixVectors::trigger`]): a vector that is masked (itself or by the function
//!    mask) only sets its pending bit; an unmasked one writes its irqfd, whose GSI is routed to
//!    the vector's message ([`GsiRouting`]). When a vector becomes unmasked its route is set
//!    first, then a pending interrupt is delivered and its bit cleared.
//!
//! The PBA is read-only to the guest. Accesses of any width and alignment inside the table are
//! taken byte by byte on a copy of the touched entry, then applied as a whole.

use std::sync::{Arc, Mutex, MutexGuard};

use vmm_sys_util::eventfd::EventFd;

use crate::devices::irq::{GsiRouting, MsiMessage};

/// The MSI-X capability id.
pub const CAPABILITY_ID: u8 = 0x11;
/// Bytes per table entry.
pub const ENTRY_SIZE: u64 = 16;
/// Message control bits.
pub const CONTROL_ENABLE: u16 = 1 << 15;
pub const CONTROL_FUNCTION_MASK: u16 = 1 << 14;
const VECTOR_MASKED: u32 = 1;
/// Most vectors one function may have.
pub const MAX_VECTORS: u16 = 2048;

/// One table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsixEntry {
    pub address_low: u32,
    pub address_high: u32,
    pub data: u32,
    pub vector_control: u32,
}

impl Default for MsixEntry {
    fn default() -> Self {
        MsixEntry {
            address_low: 0,
            address_high: 0,
            data: 0,
            vector_control: VECTOR_MASKED,
        }
    }
}

impl MsixEntry {
    fn bytes(&self) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        bytes[0..4].copy_from_slice(&self.address_low.to_le_bytes());
        bytes[4..8].copy_from_slice(&self.address_high.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.data.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.vector_control.to_le_bytes());
        bytes
    }

    fn from_bytes(bytes: &[u8; 16]) -> Self {
        let word =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        MsixEntry {
            address_low: word(0),
            address_high: word(4),
            data: word(8),
            // Only the mask bit is defined; the rest is reserved (reads 0).
            vector_control: word(12) & VECTOR_MASKED,
        }
    }

    fn message(&self) -> MsiMessage {
        MsiMessage {
            address: u64::from(self.address_high) << 32 | u64::from(self.address_low),
            data: self.data,
        }
    }

    fn masked(&self) -> bool {
        self.vector_control & VECTOR_MASKED != 0
    }
}

/// The table and PBA (for live migration).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MsixSnapshot {
    pub entries: Vec<MsixEntry>,
    pub pending: Vec<u64>,
}

struct MsixState {
    entries: Vec<MsixEntry>,
    pending: Vec<u64>,
    enabled: bool,
    function_masked: bool,
}

impl MsixState {
    fn masked(&self, vector: usize) -> bool {
        self.function_masked || self.entries[vector].masked()
    }

    fn is_pending(&self, vector: usize) -> bool {
        self.pending[vector / 64] & (1 << (vector % 64)) != 0
    }

    fn set_pending(&mut self, vector: usize, on: bool) {
        let bit = 1 << (vector % 64);
        if on {
            self.pending[vector / 64] |= bit;
        } else {
            self.pending[vector / 64] &= !bit;
        }
    }
}

/// Creating the vectors failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MsixError {
    #[error("{vectors} vectors with {gsis} GSIs and {irqfds} irqfds (at most {MAX_VECTORS})")]
    Count {
        vectors: usize,
        gsis: usize,
        irqfds: usize,
    },
    #[error("a saved MSI-X table of {got} vectors where this device has {expected}")]
    Snapshot { expected: usize, got: usize },
}

/// A function's MSI-X vectors: table, PBA, and per vector a GSI and its irqfd.
pub struct MsixVectors {
    state: Mutex<MsixState>,
    gsis: Vec<u32>,
    irqfds: Vec<EventFd>,
    routing: Arc<GsiRouting>,
}

impl MsixVectors {
    /// One vector per `(gsi, irqfd)`; the irqfds are registered for their GSIs by the caller.
    pub fn new(
        gsis: Vec<u32>,
        irqfds: Vec<EventFd>,
        routing: Arc<GsiRouting>,
    ) -> Result<Self, MsixError> {
        let vectors = gsis.len();
        if vectors == 0 || vectors != irqfds.len() || vectors > usize::from(MAX_VECTORS) {
            return Err(MsixError::Count {
                vectors,
                gsis: gsis.len(),
                irqfds: irqfds.len(),
            });
        }
        Ok(MsixVectors {
            state: Mutex::new(MsixState {
                entries: vec![MsixEntry::default(); vectors],
                pending: vec![0; vectors.div_ceil(64)],
                enabled: false,
                function_masked: false,
            }),
            gsis,
            irqfds,
            routing,
        })
    }

    fn lock(&self) -> MutexGuard<'_, MsixState> {
        self.state.lock().unwrap_or_else(crate::poison::fatal)
    }

    pub fn count(&self) -> u16 {
        self.gsis.len() as u16
    }

    /// Bytes of the table and of the PBA.
    pub fn table_size(&self) -> u64 {
        u64::from(self.count()) * ENTRY_SIZE
    }

    pub fn pba_size(&self) -> u64 {
        u64::from(self.count()).div_ceil(64) * 8
    }

    /// The capability body (after id and next) and its guest-writable bits, for a table at
    /// `table_offset` and a PBA at `pba_offset` of BAR `bar`.
    pub fn capability(&self, bar: u8, table_offset: u32, pba_offset: u32) -> ([u8; 10], [u8; 10]) {
        let mut body = [0u8; 10];
        body[0..2].copy_from_slice(&(self.count() - 1).to_le_bytes());
        body[2..6].copy_from_slice(&(table_offset | u32::from(bar)).to_le_bytes());
        body[6..10].copy_from_slice(&(pba_offset | u32::from(bar)).to_le_bytes());
        let mut writable = [0u8; 10];
        writable[0..2].copy_from_slice(&(CONTROL_ENABLE | CONTROL_FUNCTION_MASK).to_le_bytes());
        (body, writable)
    }

    pub fn enabled(&self) -> bool {
        self.lock().enabled
    }

    /// The guest wrote the message control register.
    pub fn set_control(&self, control: u16) {
        let mut state = self.lock();
        state.enabled = control & CONTROL_ENABLE != 0;
        state.function_masked = control & CONTROL_FUNCTION_MASK != 0;
        if state.enabled {
            for vector in 0..state.entries.len() {
                self.unmasked(&mut state, vector);
            }
        }
    }

    /// Delivers `vector`, or records it pending when masked. Returns false when MSI-X is off
    /// (the caller then uses INTx); a vector past the table is dropped.
    pub fn trigger(&self, vector: u16) -> bool {
        let mut state = self.lock();
        if !state.enabled {
            return false;
        }
        let vector = usize::from(vector);
        if vector >= state.entries.len() {
            return true;
        }
        if state.masked(vector) {
            state.set_pending(vector, true);
        } else if let Err(e) = self.irqfds[vector].write(1) {
            log::warn!("msix: vector {vector}: {e}");
        }
        true
    }

    /// For a vector that is (now) unmasked with MSI-X on: sets its route, then delivers what
    /// was pending.
    fn unmasked(&self, state: &mut MsixState, vector: usize) {
        if !state.enabled || state.masked(vector) {
            return;
        }
        self.routing
            .set_msi(self.gsis[vector], state.entries[vector].message());
        if state.is_pending(vector) {
            state.set_pending(vector, false);
            if let Err(e) = self.irqfds[vector].write(1) {
                log::warn!("msix: vector {vector}: {e}");
            }
        }
    }

    /// The guest reads the table at `offset`.
    pub fn read_table(&self, offset: u64, data: &mut [u8]) {
        let state = self.lock();
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset + i as u64;
            *byte = state
                .entries
                .get((at / ENTRY_SIZE) as usize)
                .map_or(0, |e| e.bytes()[(at % ENTRY_SIZE) as usize]);
        }
    }

    /// The guest writes the table at `offset`.
    pub fn write_table(&self, offset: u64, data: &[u8]) {
        let mut state = self.lock();
        let first = offset / ENTRY_SIZE;
        let last = (offset + data.len() as u64).saturating_sub(1) / ENTRY_SIZE;
        for index in first..=last {
            let Some(old) = state.entries.get(index as usize).copied() else {
                guest_warn!("msix: write past the table at {offset:#x}");
                return;
            };
            let mut bytes = old.bytes();
            for (i, value) in data.iter().enumerate() {
                let at = offset + i as u64;
                if at / ENTRY_SIZE == index {
                    bytes[(at % ENTRY_SIZE) as usize] = *value;
                }
            }
            let new = MsixEntry::from_bytes(&bytes);
            let vector = index as usize;
            state.entries[vector] = new;
            if !new.masked() && (old.masked() || old.message() != new.message()) {
                self.unmasked(&mut state, vector);
            }
        }
    }

    /// The guest reads the PBA at `offset`.
    pub fn read_pba(&self, offset: u64, data: &mut [u8]) {
        let state = self.lock();
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset + i as u64;
            *byte = state
                .pending
                .get((at / 8) as usize)
                .map_or(0, |w| (w >> ((at % 8) * 8)) as u8);
        }
    }

    /// Back to power-on: every vector masked, nothing pending, MSI-X off.
    pub fn reset(&self) {
        let mut state = self.lock();
        state.entries.fill(MsixEntry::default());
        state.pending.fill(0);
        state.enabled = false;
        state.function_masked = false;
    }

    pub fn snapshot(&self) -> MsixSnapshot {
        let state = self.lock();
        MsixSnapshot {
            entries: state.entries.clone(),
            pending: state.pending.clone(),
        }
    }

    /// Takes over a snapshot and the capability's message control (on a migration target):
    /// routes are set for every unmasked vector; pending bits stay pending.
    pub fn restore(&self, snapshot: &MsixSnapshot, control: u16) -> Result<(), MsixError> {
        let mut state = self.lock();
        let expected = state.entries.len();
        if snapshot.entries.len() != expected || snapshot.pending.len() != state.pending.len() {
            return Err(MsixError::Snapshot {
                expected,
                got: snapshot.entries.len(),
            });
        }
        state.entries.clone_from(&snapshot.entries);
        state.pending.clone_from(&snapshot.pending);
        state.enabled = control & CONTROL_ENABLE != 0;
        state.function_masked = control & CONTROL_FUNCTION_MASK != 0;
        for vector in 0..expected {
            if state.enabled && !state.masked(vector) {
                self.routing
                    .set_msi(self.gsis[vector], state.entries[vector].message());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "msix_tests.rs"]
mod tests;
