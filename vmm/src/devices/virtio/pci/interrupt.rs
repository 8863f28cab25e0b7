//! How a virtio-pci device's interrupts reach the guest: with MSI-X enabled, the vector the
//! driver gave the queue (or the configuration) fires, and nothing when it gave
//! VIRTIO_MSI_NO_VECTOR; with MSI-X off, the INTx line goes up (unless the command register
//! disables INTx) and stays up until the guest's EOI, raised again while the ISR is not zero.

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;

use crate::devices::irq::{LevelLine, PendingCheck};
use crate::devices::pci::msix::MsixVectors;
use crate::devices::virtio::{Interrupt, InterruptDelivery};

/// "No vector": the driver does not want this interrupt (or the device could not map it).
pub const NO_VECTOR: u16 = 0xffff;

/// The vectors the driver chose, MSI-X, and the INTx line; shared by the transport (which the
/// driver programs) and the device's worker (which raises interrupts).
pub struct PciInterrupt {
    msix: Arc<MsixVectors>,
    config_vector: AtomicU16,
    queue_vectors: Vec<AtomicU16>,
    intx: LevelLine,
    intx_disabled: AtomicBool,
}

impl PciInterrupt {
    pub fn new(msix: Arc<MsixVectors>, queues: usize, intx: LevelLine) -> Self {
        PciInterrupt {
            msix,
            config_vector: AtomicU16::new(NO_VECTOR),
            queue_vectors: (0..queues).map(|_| AtomicU16::new(NO_VECTOR)).collect(),
            intx,
            intx_disabled: AtomicBool::new(false),
        }
    }

    pub fn msix(&self) -> &Arc<MsixVectors> {
        &self.msix
    }

    /// `vector` if the table has it, else NO_VECTOR (what the driver reads back).
    fn valid(&self, vector: u16) -> u16 {
        if vector < self.msix.count() {
            vector
        } else {
            NO_VECTOR
        }
    }

    pub fn config_vector(&self) -> u16 {
        self.config_vector.load(Ordering::SeqCst)
    }

    pub fn set_config_vector(&self, vector: u16) {
        self.config_vector
            .store(self.valid(vector), Ordering::SeqCst);
    }

    /// Queue `queue`'s vector; NO_VECTOR for a queue that does not exist.
    pub fn queue_vector(&self, queue: usize) -> u16 {
        self.queue_vectors
            .get(queue)
            .map_or(NO_VECTOR, |v| v.load(Ordering::SeqCst))
    }

    pub fn set_queue_vector(&self, queue: usize, vector: u16) {
        if let Some(v) = self.queue_vectors.get(queue) {
            v.store(self.valid(vector), Ordering::SeqCst);
        }
    }

    /// Every vector back to NO_VECTOR (a device reset).
    pub fn reset_vectors(&self) {
        self.config_vector.store(NO_VECTOR, Ordering::SeqCst);
        for v in &self.queue_vectors {
            v.store(NO_VECTOR, Ordering::SeqCst);
        }
    }

    /// The command register's INTx disable bit.
    pub fn set_intx_disabled(&self, disabled: bool) {
        self.intx_disabled.store(disabled, Ordering::SeqCst);
    }

    fn deliver(&self, vector: u16) {
        if !self.msix.trigger(vector) && !self.intx_disabled.load(Ordering::SeqCst) {
            self.intx.raise();
        }
    }

    /// Whether the INTx line should stay up: MSI-X off, INTx allowed and the ISR not zero.
    pub fn intx_pending(self: &Arc<Self>, interrupt: Arc<Interrupt>) -> PendingCheck {
        let this = self.clone();
        Box::new(move || {
            interrupt.status() != 0
                && !this.msix.enabled()
                && !this.intx_disabled.load(Ordering::SeqCst)
        })
    }
}

/// [`PciInterrupt`] as the [`Interrupt`] of a device.
pub struct PciDelivery(pub Arc<PciInterrupt>);

impl InterruptDelivery for PciDelivery {
    fn used_queue(&self, queue: u16) {
        self.0.deliver(self.0.queue_vector(usize::from(queue)));
    }

    fn config_changed(&self) {
        self.0.deliver(self.0.config_vector());
    }
}
