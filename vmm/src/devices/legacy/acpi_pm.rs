//! ACPI fixed hardware in port I/O: the PM1a event block (status, enable), the PM1a control
//! block and the reset register, as the FADT announces them, with the SCI on IRQ 9
//! (level-triggered, active high).
//!
//! | port | register | |
//! |---|---|---|
//! | 0x600 | PM1a_STS (16 bits) | write 1 to clear; bit 8 PWRBTN_STS |
//! | 0x602 | PM1a_EN (16 bits) | bit 8 PWRBTN_EN |
//! | 0x604 | PM1a_CNT (16 bits) | bit 0 SCI_EN (always set: ACPI mode only), bits 10-12 SLP_TYP, bit 13 SLP_EN |
//! | 0x608 | RESET_REG (8 bits) | writing [`RESET_VALUE`] resets the machine |
//!
//! Power button, step by step: the guest's ACPI driver sets PWRBTN_EN (which is how the VMM
//! knows the guest has ACPI, [`AcpiPm::power_button_enabled`]); the VMM presses the button:
//! PWRBTN_STS is set and the SCI goes up; the guest's SCI handler sees the fixed event, clears
//! the status (the line drops at its EOI) and its userspace powers off (systemd-logind). The
//! guest enters S5 by writing SLP_TYP = [`S5_SLP_TYP`] (the value of `\_S5_` in the DSDT) with
//! SLP_EN: the VM ends as a power-off. Other sleep states are not offered and are ignored.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use crate::devices::bus::BusDevice;
use crate::devices::irq::{LevelLine, PendingCheck};
use crate::lifecycle::{RunControl, VmExit};

/// First port of the block.
pub const PM_BASE: u64 = 0x600;
/// Ports of the block.
pub const PM_LEN: u64 = 0x10;
pub const PM1_EVT_OFFSET: u64 = 0;
pub const PM1_EVT_LEN: u8 = 4;
pub const PM1_CNT_OFFSET: u64 = 4;
pub const PM1_CNT_LEN: u8 = 2;
pub const RESET_OFFSET: u64 = 8;
/// What the guest writes to the reset register to reset.
pub const RESET_VALUE: u8 = 1;
/// The SCI's IRQ (and GSI).
pub const SCI_IRQ: u32 = 9;
/// SLP_TYP of S5 (soft off).
pub const S5_SLP_TYP: u16 = 5;

const STS: u64 = PM1_EVT_OFFSET;
const EN: u64 = PM1_EVT_OFFSET + 2;
const PWRBTN: u16 = 1 << 8;
/// GBL_EN: the OS's ACPI driver enables the global lock event; it sticks (so the OS sees the
/// hardware there) but never fires: the firmware never takes the lock.
const GBL: u16 = 1 << 5;
/// The enable bits this block has.
const EN_WRITABLE: u16 = PWRBTN | GBL;
const SCI_EN: u16 = 1;
const SLP_TYP_SHIFT: u16 = 10;
const SLP_TYP_MASK: u16 = 0x7 << SLP_TYP_SHIFT;
const SLP_EN: u16 = 1 << 13;

/// The registers, shared with the SCI resampler.
#[derive(Debug, Default)]
struct Registers {
    sts: AtomicU16,
    en: AtomicU16,
    slp_typ: AtomicU16,
}

impl Registers {
    fn pending(&self) -> bool {
        self.sts.load(Ordering::SeqCst) & self.en.load(Ordering::SeqCst) != 0
    }
}

/// The block's state (for live migration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AcpiPmState {
    pub sts: u16,
    pub en: u16,
    pub cnt: u16,
}

/// The PM1a blocks and reset register.
pub struct AcpiPm {
    control: Arc<RunControl>,
    sci: LevelLine,
    regs: Arc<Registers>,
}

impl AcpiPm {
    pub fn new(control: Arc<RunControl>, sci: LevelLine) -> Self {
        AcpiPm {
            control,
            sci,
            regs: Arc::default(),
        }
    }

    /// Whether the SCI should stay up (for the resampler): an enabled event is pending.
    pub fn sci_pending(&self) -> PendingCheck {
        let regs = self.regs.clone();
        Box::new(move || regs.pending())
    }

    /// Whether the guest's ACPI driver listens to the power button.
    pub fn power_button_enabled(&self) -> bool {
        self.regs.en.load(Ordering::SeqCst) & PWRBTN != 0
    }

    /// Presses the power button: PWRBTN_STS, and the SCI if the guest enabled the event.
    pub fn press_power_button(&self) {
        self.regs.sts.fetch_or(PWRBTN, Ordering::SeqCst);
        self.update_sci();
    }

    fn update_sci(&self) {
        if self.regs.pending() {
            self.sci.raise();
        }
    }

    pub fn state(&self) -> AcpiPmState {
        AcpiPmState {
            sts: self.regs.sts.load(Ordering::SeqCst),
            en: self.regs.en.load(Ordering::SeqCst),
            cnt: self.cnt(),
        }
    }

    /// Takes over `state` (on a migration target); a pending event raises the SCI again.
    pub fn restore(&self, state: &AcpiPmState) {
        self.regs.sts.store(state.sts & PWRBTN, Ordering::SeqCst);
        self.regs.en.store(state.en & EN_WRITABLE, Ordering::SeqCst);
        self.regs
            .slp_typ
            .store(state.cnt & SLP_TYP_MASK, Ordering::SeqCst);
        self.update_sci();
    }

    /// Back to power-on (a machine reset).
    pub fn reset(&self) {
        self.restore(&AcpiPmState::default());
    }

    fn cnt(&self) -> u16 {
        SCI_EN | self.regs.slp_typ.load(Ordering::SeqCst)
    }

    fn register(&self, offset: u64) -> u16 {
        match offset {
            STS => self.regs.sts.load(Ordering::SeqCst),
            EN => self.regs.en.load(Ordering::SeqCst),
            PM1_CNT_OFFSET => self.cnt(),
            _ => 0,
        }
    }

    fn write_register(&mut self, offset: u64, value: u16) {
        match offset {
            STS => {
                self.regs.sts.fetch_and(!value, Ordering::SeqCst);
            }
            EN => {
                self.regs.en.store(value & EN_WRITABLE, Ordering::SeqCst);
                self.update_sci();
            }
            PM1_CNT_OFFSET => {
                self.regs
                    .slp_typ
                    .store(value & SLP_TYP_MASK, Ordering::SeqCst);
                if value & SLP_EN != 0 {
                    let slp_typ = (value & SLP_TYP_MASK) >> SLP_TYP_SHIFT;
                    if slp_typ == S5_SLP_TYP {
                        log::info!("acpi: the guest entered S5 (soft off)");
                        self.control.request_exit(VmExit::PowerOff { code: 0 });
                    } else {
                        guest_warn!("acpi: sleep type {slp_typ} is not offered; ignored");
                    }
                }
            }
            _ => {}
        }
    }
}

impl BusDevice for AcpiPm {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset + i as u64;
            let register = self.register(at & !1);
            *byte = register.to_le_bytes()[(at & 1) as usize];
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if offset == RESET_OFFSET && data.len() == 1 {
            if data[0] == RESET_VALUE {
                log::info!("acpi: the guest reset the machine through the reset register");
                self.control.request_exit(VmExit::Reset);
            }
            return;
        }
        // 16-bit registers, written whole or a byte at a time: merged into the current value
        // (PM1_STS is write-1-to-clear: only the bytes written count).
        let end = offset.saturating_add(data.len() as u64);
        let mut register = offset & !1;
        while register < end {
            let mut bytes = if register == STS {
                [0, 0]
            } else {
                self.register(register).to_le_bytes()
            };
            for (k, byte) in bytes.iter_mut().enumerate() {
                let at = register + k as u64;
                if at >= offset && at < end {
                    *byte = data[(at - offset) as usize];
                }
            }
            self.write_register(register, u16::from_le_bytes(bytes));
            register += 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm_sys_util::eventfd::EventFd;

    fn new_pm() -> (AcpiPm, EventFd, Arc<RunControl>) {
        let control = Arc::new(RunControl::new(1));
        let sci = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let pm = AcpiPm::new(control.clone(), LevelLine::new(sci.try_clone().unwrap()));
        (pm, sci, control)
    }

    fn read16(pm: &mut AcpiPm, offset: u64) -> u16 {
        let mut data = [0u8; 2];
        pm.read(offset, &mut data);
        u16::from_le_bytes(data)
    }

    #[test]
    fn the_power_button_raises_the_sci_once_the_guest_enables_it() {
        let (mut pm, sci, control) = new_pm();
        let pending = pm.sci_pending();
        assert!(!pm.power_button_enabled(), "no ACPI guest yet");
        assert_eq!(
            read16(&mut pm, PM1_CNT_OFFSET) & SCI_EN,
            SCI_EN,
            "ACPI mode"
        );
        pm.press_power_button();
        assert!(sci.read().is_err(), "not enabled: no SCI");
        assert_eq!(read16(&mut pm, STS), PWRBTN);
        pm.write(STS, &PWRBTN.to_le_bytes());
        assert_eq!(read16(&mut pm, STS), 0, "write 1 to clear");

        pm.write(EN, &0xffffu16.to_le_bytes());
        assert_eq!(
            read16(&mut pm, EN),
            PWRBTN | GBL,
            "only the power button and global lock enables"
        );
        assert!(pm.power_button_enabled());
        pm.press_power_button();
        assert_eq!(sci.read().unwrap(), 1);
        assert!(pending(), "the SCI stays up until the status is cleared");
        pm.write(STS + 1, &[0x01]);
        assert!(!pending());
        assert_eq!(control.exit(), None);
    }

    #[test]
    fn s5_powers_off_and_the_reset_register_resets() {
        let (mut pm, _, control) = new_pm();
        pm.write(PM1_CNT_OFFSET, &(3 << SLP_TYP_SHIFT | SLP_EN).to_le_bytes());
        assert_eq!(control.exit(), None, "S3 is not offered");
        pm.write(PM1_CNT_OFFSET, &(S5_SLP_TYP << SLP_TYP_SHIFT).to_le_bytes());
        assert_eq!(control.exit(), None, "SLP_TYP alone does nothing");
        assert_eq!(
            read16(&mut pm, PM1_CNT_OFFSET),
            S5_SLP_TYP << SLP_TYP_SHIFT | SCI_EN
        );
        pm.write(PM1_CNT_OFFSET + 1, &[((S5_SLP_TYP << 2) | 0x20) as u8]);
        assert_eq!(control.exit(), Some(VmExit::PowerOff { code: 0 }));

        let (mut pm, _, control) = new_pm();
        pm.write(RESET_OFFSET, &[0x02]);
        assert_eq!(control.exit(), None);
        pm.write(RESET_OFFSET, &[RESET_VALUE]);
        assert_eq!(control.exit(), Some(VmExit::Reset));
    }

    #[test]
    fn state_round_trip_and_reset() {
        let (target, target_sci, _) = new_pm();
        let (mut pm, sci, _) = new_pm();
        pm.write(EN, &PWRBTN.to_le_bytes());
        pm.press_power_button();
        assert_eq!(sci.read().unwrap(), 1);
        let state = pm.state();
        target.restore(&state);
        assert_eq!(target.state(), state);
        assert_eq!(
            target_sci.read().unwrap(),
            1,
            "a pending event raises the SCI"
        );
        target.reset();
        assert_eq!(
            target.state(),
            AcpiPmState {
                sts: 0,
                en: 0,
                cnt: SCI_EN
            }
        );
        let mut odd = [0u8; 3];
        pm.read(0xe, &mut odd);
        pm.write(0xf, &[1, 2, 3]);
    }
}
