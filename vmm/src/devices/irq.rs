//! Interrupt plumbing shared by the PCI devices and ACPI: MSI routes and level-triggered lines.
//!
//! MSI: each MSI-X vector has its own GSI (24 upwards, past the IOAPIC's pins) and a KVM irqfd
//! bound to it. What the guest programs into the vector (address, data) becomes the GSI's MSI
//! route: [`GsiRouting`] keeps every MSI route and hands the whole table to a [`RouteSink`]
//! (KVM_SET_GSI_ROUTING replaces all routes at once, so the IOAPIC and PIC pins go with them).
//!
//! Level-triggered lines (PCI INTx, the ACPI SCI): a KVM irqfd registered with a resample
//! eventfd. Writing the irqfd raises the line and it stays up until the guest acknowledges the
//! interrupt (EOI at the IOAPIC); KVM then lowers it and signals the resample eventfd. The
//! [`Resampler`] thread waits on those: if the device still has something pending (the guest's
//! handler did not clear it, or a new event came in meanwhile) it raises the line again.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use log::warn;
use vmm_sys_util::eventfd::EventFd;

use crate::devices::worker::{self, WorkerEvent, WorkerHandle};
use crate::seccomp::ThreadKind;

/// First GSI past the IOAPIC's 24 pins: where MSI vectors start.
pub const FIRST_MSI_GSI: u32 = 24;
/// KVM's limit on routes (KVM_MAX_IRQ_ROUTES).
pub const MAX_GSI: u32 = 4096;

/// An MSI message as the guest programmed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsiMessage {
    pub address: u64,
    pub data: u32,
}

/// Where the routing table goes: KVM, or a recorder in tests.
pub trait RouteSink: Send + Sync {
    /// Replaces every MSI route with `routes` (the irqchip pins are the sink's to add).
    fn set_routes(&self, routes: &[(u32, MsiMessage)]) -> std::io::Result<()>;
}

/// The VM's MSI routes.
pub struct GsiRouting {
    routes: Mutex<BTreeMap<u32, MsiMessage>>,
    sink: Box<dyn RouteSink>,
}

impl GsiRouting {
    pub fn new(sink: Box<dyn RouteSink>) -> Self {
        GsiRouting {
            routes: Mutex::new(BTreeMap::new()),
            sink,
        }
    }

    /// Routes `gsi` to `message`; the table is handed over only when it changed.
    pub fn set_msi(&self, gsi: u32, message: MsiMessage) {
        let mut routes = self.routes.lock().unwrap_or_else(crate::poison::fatal);
        if routes.insert(gsi, message) == Some(message) {
            return;
        }
        Self::commit(self.sink.as_ref(), &routes);
    }

    /// Hands the current table over (at build, to fail early if KVM refuses routing at all).
    pub fn commit_now(&self) -> std::io::Result<()> {
        let routes = self.routes.lock().unwrap_or_else(crate::poison::fatal);
        let table: Vec<_> = routes.iter().map(|(g, m)| (*g, *m)).collect();
        self.sink.set_routes(&table)
    }

    fn commit(sink: &dyn RouteSink, routes: &BTreeMap<u32, MsiMessage>) {
        let table: Vec<_> = routes.iter().map(|(g, m)| (*g, *m)).collect();
        if let Err(e) = sink.set_routes(&table) {
            warn!(
                "irq: set the GSI routing table ({} MSI routes): {e}",
                table.len()
            );
        }
    }
}

/// Something behind a level-triggered line: whether it still wants the line up.
pub type PendingCheck = Box<dyn Fn() -> bool + Send + Sync>;

/// A level-triggered line as its device raises it.
pub struct LevelLine {
    irqfd: EventFd,
}

impl LevelLine {
    pub fn new(irqfd: EventFd) -> Self {
        LevelLine { irqfd }
    }

    /// Raises the line (it stays up until the guest's EOI).
    pub fn raise(&self) {
        if let Err(e) = self.irqfd.write(1) {
            warn!("irq: raise a level-triggered line: {e}");
        }
    }
}

/// One line the resampler watches: the resample eventfd KVM signals on EOI, the irqfd to raise
/// again and the device's pending check.
pub struct ResampledLine {
    pub resamplefd: EventFd,
    pub line: LevelLine,
    pub pending: PendingCheck,
}

/// The lines of a VM, and the thread that raises them again after an EOI.
#[derive(Clone, Default)]
pub struct Resampler {
    lines: Arc<Vec<ResampledLine>>,
}

impl Resampler {
    pub fn new(lines: Vec<ResampledLine>) -> Self {
        Resampler {
            lines: Arc::new(lines),
        }
    }

    /// Raises every line whose device has something pending (after a restore: the line's level
    /// is not part of the saved interrupt controller state).
    pub fn raise_pending(&self) {
        for line in self.lines.iter() {
            if (line.pending)() {
                line.line.raise();
            }
        }
    }

    /// Starts the thread (none when there is no line).
    pub fn spawn(&self) -> std::io::Result<Option<WorkerHandle>> {
        if self.lines.is_empty() {
            return Ok(None);
        }
        let events = self
            .lines
            .iter()
            .enumerate()
            .map(|(i, l)| WorkerEvent {
                fd: l.resamplefd.as_raw_fd(),
                token: i as u64,
                edge_triggered: false,
            })
            .collect();
        let lines = self.lines.clone();
        worker::spawn(
            "irq-resample",
            ThreadKind::Worker,
            events,
            move |token, _| {
                if let Some(line) = lines.get(token as usize) {
                    let _ = line.resamplefd.read();
                    if (line.pending)() {
                        line.line.raise();
                    }
                }
            },
        )
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    type Tables = Arc<Mutex<Vec<Vec<(u32, MsiMessage)>>>>;

    #[derive(Clone, Default)]
    struct Recorder(Tables);

    impl RouteSink for Recorder {
        fn set_routes(&self, routes: &[(u32, MsiMessage)]) -> std::io::Result<()> {
            self.0.lock().unwrap().push(routes.to_vec());
            Ok(())
        }
    }

    #[test]
    fn the_whole_table_goes_to_the_sink_when_a_route_changes() {
        let recorder = Recorder::default();
        let routing = GsiRouting::new(Box::new(recorder.clone()));
        let a = MsiMessage {
            address: 0xfee0_0000,
            data: 0x41,
        };
        let b = MsiMessage {
            address: 0xfee0_1000,
            data: 0x42,
        };
        routing.set_msi(25, a);
        routing.set_msi(24, b);
        routing.set_msi(24, b);
        let tables = recorder.0.lock().unwrap().clone();
        assert_eq!(tables, vec![vec![(25, a)], vec![(24, b), (25, a)]]);
        routing.commit_now().unwrap();
        assert_eq!(recorder.0.lock().unwrap().len(), 3);
    }

    fn eventfd() -> EventFd {
        EventFd::new(libc::EFD_NONBLOCK).unwrap()
    }

    #[test]
    fn a_line_is_raised_again_after_eoi_while_its_device_has_something_pending() {
        let irqfd = eventfd();
        let resamplefd = eventfd();
        let kvm_side = resamplefd.try_clone().unwrap();
        let pending = Arc::new(AtomicBool::new(true));
        let check = pending.clone();
        let resampler = Resampler::new(vec![ResampledLine {
            resamplefd,
            line: LevelLine::new(irqfd.try_clone().unwrap()),
            pending: Box::new(move || check.load(Ordering::SeqCst)),
        }]);
        resampler.raise_pending();
        assert_eq!(irqfd.read().unwrap(), 1);
        let mut worker = resampler.spawn().unwrap().expect("a thread for one line");
        // The guest EOIs with the device still pending: raised again.
        kvm_side.write(1).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(n) = irqfd.read() {
                assert_eq!(n, 1);
                break;
            }
            assert!(Instant::now() < deadline, "the line was not raised again");
            std::thread::sleep(Duration::from_millis(2));
        }
        // Nothing pending: the line stays down.
        pending.store(false, Ordering::SeqCst);
        kvm_side.write(1).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(irqfd.read().is_err(), "raised with nothing pending");
        resampler.raise_pending();
        assert!(irqfd.read().is_err());
        worker.stop();
        assert!(Resampler::default().spawn().unwrap().is_none());
    }
}
