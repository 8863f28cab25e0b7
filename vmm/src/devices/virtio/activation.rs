//! What every virtio device does the same way when the driver sets DRIVER_OK and when it
//! resets the device:
//!
//! 1. [`Activation::into_queues`] checks the device got exactly its `N` queues and notify
//!    eventfds and hands them over as arrays;
//! 2. [`queue_events`] makes the worker's events for them: queue `i`'s notify eventfd with token
//!    `i`, so a device's queue event tokens are its queue indexes;
//! 3. [`DeviceWorker::start`] starts the worker thread and keeps its handle;
//!    [`DeviceWorker::stop`] ends it on a reset.
//!
//! A one-queue device (blk, rng) does all three with [`DeviceWorker::start_single_queue`].

use std::os::fd::AsRawFd;
use std::sync::Arc;

use virtio_queue::Queue;
use vmm_sys_util::eventfd::EventFd;

use super::Interrupt;
use crate::devices::worker::{self, EventRegistry, WorkerEvent, WorkerHandle};
use crate::guest_memory::GuestMemoryMmap;
use crate::seccomp::ThreadKind;

/// What a device gets when the driver sets DRIVER_OK.
pub struct Activation {
    pub mem: GuestMemoryMmap,
    pub queues: Vec<Queue>,
    pub queue_evts: Vec<EventFd>,
    pub interrupt: Arc<Interrupt>,
    pub acked_features: u64,
}

/// Activating a device failed.
#[derive(Debug, thiserror::Error)]
pub enum ActivateError {
    #[error("expected {expected} queues, got {got}")]
    QueueCount { expected: usize, got: usize },
    #[error("start worker thread")]
    Worker(#[source] std::io::Error),
    #[error("device setup")]
    Setup(#[source] std::io::Error),
}

/// An [`Activation`] with exactly `N` queues and their notify eventfds, in queue order.
pub struct ActiveQueues<const N: usize> {
    pub mem: GuestMemoryMmap,
    pub queues: [Queue; N],
    pub queue_evts: [EventFd; N],
    pub interrupt: Arc<Interrupt>,
    pub acked_features: u64,
}

impl Activation {
    /// Splits the activation into `N` queues and eventfds; fails unless there are `N` of each.
    pub fn into_queues<const N: usize>(self) -> Result<ActiveQueues<N>, ActivateError> {
        let got = self.queues.len();
        match (
            <[Queue; N]>::try_from(self.queues),
            <[EventFd; N]>::try_from(self.queue_evts),
        ) {
            (Ok(queues), Ok(queue_evts)) => Ok(ActiveQueues {
                mem: self.mem,
                queues,
                queue_evts,
                interrupt: self.interrupt,
                acked_features: self.acked_features,
            }),
            _ => Err(ActivateError::QueueCount { expected: N, got }),
        }
    }
}

/// The worker event token of a one-queue device's wake eventfd.
const WAKE_TOKEN: u64 = 1;

/// The worker events of a device's queues: queue `i`'s notify eventfd, token `i`,
/// level-triggered.
pub fn queue_events(queue_evts: &[EventFd]) -> Vec<WorkerEvent> {
    queue_evts
        .iter()
        .enumerate()
        .map(|(index, evt)| WorkerEvent {
            fd: evt.as_raw_fd(),
            token: index as u64,
            edge_triggered: false,
        })
        .collect()
}

/// The worker thread of an active device; empty while the device is not active.
#[derive(Default)]
pub struct DeviceWorker(Option<WorkerHandle>);

impl DeviceWorker {
    /// Starts the worker thread `name` over `events` (a running one is stopped first), with the
    /// seccomp filter of `kind`.
    pub fn start<F>(
        &mut self,
        name: &str,
        kind: ThreadKind,
        events: Vec<WorkerEvent>,
        handler: F,
    ) -> Result<(), ActivateError>
    where
        F: FnMut(u64, &EventRegistry<'_>) + Send + 'static,
    {
        self.stop();
        self.0 = Some(worker::spawn(name, kind, events, handler).map_err(ActivateError::Worker)?);
        Ok(())
    }

    /// Activates a one-queue device: checks `activation` has one queue, builds the worker's
    /// state with `make` (guest memory, the queue, the interrupt) and starts the worker thread
    /// `name`, which runs `process` on the state at each notification of the queue, and at each
    /// write to `wake` when given (the device's own reason to look at the queue again).
    pub fn start_single_queue<S, M, P>(
        &mut self,
        name: &str,
        activation: Activation,
        wake: Option<Arc<EventFd>>,
        make: M,
        mut process: P,
    ) -> Result<(), ActivateError>
    where
        M: FnOnce(GuestMemoryMmap, Queue, Arc<Interrupt>) -> S,
        S: Send + 'static,
        P: FnMut(&mut S) + Send + 'static,
    {
        let ActiveQueues {
            mem,
            queues: [queue],
            queue_evts: [evt],
            interrupt,
            ..
        } = activation.into_queues()?;
        let mut events = queue_events(std::slice::from_ref(&evt));
        if let Some(wake) = &wake {
            events.push(WorkerEvent {
                fd: wake.as_raw_fd(),
                token: WAKE_TOKEN,
                edge_triggered: false,
            });
        }
        let mut state = make(mem, queue, interrupt);
        self.start(name, ThreadKind::Worker, events, move |token, _| {
            let fired = match token {
                0 => Some(&evt),
                WAKE_TOKEN => wake.as_deref(),
                _ => None,
            };
            if let Some(fired) = fired {
                let _ = fired.read();
                process(&mut state);
            }
        })
    }

    /// The running worker, if any.
    pub fn handle(&mut self) -> Option<&mut WorkerHandle> {
        self.0.as_mut()
    }

    /// Ends and joins the worker thread, if one runs.
    pub fn stop(&mut self) {
        if let Some(mut worker) = self.0.take() {
            worker.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::virtio::test_utils::mem;
    use virtio_queue::QueueT;

    fn activation(queues: usize, evts: usize) -> Activation {
        Activation {
            mem: mem(),
            queues: (0..queues).map(|_| Queue::new(16).unwrap()).collect(),
            queue_evts: (0..evts)
                .map(|_| EventFd::new(libc::EFD_NONBLOCK).unwrap())
                .collect(),
            interrupt: Arc::new(Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap())),
            acked_features: 7,
        }
    }

    #[test]
    fn into_queues_takes_exactly_n_queues_and_eventfds() {
        let active = activation(2, 2).into_queues::<2>().unwrap();
        assert_eq!(active.queues.len(), 2);
        assert_eq!(active.acked_features, 7);
        for (queues, evts) in [(1, 1), (3, 3), (2, 1), (2, 3)] {
            match activation(queues, evts).into_queues::<2>() {
                Err(ActivateError::QueueCount { expected: 2, got }) => assert_eq!(got, queues),
                Err(e) => panic!("{queues} queues, {evts} eventfds: {e}"),
                Ok(_) => panic!("{queues} queues, {evts} eventfds were accepted"),
            }
        }
    }

    #[test]
    fn queue_event_tokens_are_queue_indexes() {
        let evts: Vec<EventFd> = (0..3)
            .map(|_| EventFd::new(libc::EFD_NONBLOCK).unwrap())
            .collect();
        let events = queue_events(&evts);
        for (index, (event, evt)) in events.iter().zip(&evts).enumerate() {
            assert_eq!(event.token, index as u64);
            assert_eq!(event.fd, evt.as_raw_fd());
            assert!(!event.edge_triggered);
        }
    }

    #[test]
    fn a_single_queue_worker_runs_on_each_notification_until_stopped() {
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::time::{Duration, Instant};

        let one_queue = activation(1, 1);
        let notify = one_queue.queue_evts[0].try_clone().unwrap();
        let runs = Arc::new(AtomicU32::new(0));
        let wake = Arc::new(EventFd::new(libc::EFD_NONBLOCK).unwrap());
        let mut worker = DeviceWorker::default();
        assert!(worker.handle().is_none());
        worker
            .start_single_queue(
                "test-queue",
                one_queue,
                Some(wake.clone()),
                |_, queue, _| (queue, runs.clone()),
                |(queue, runs)| {
                    assert_eq!(queue.max_size(), 16);
                    runs.fetch_add(1, Ordering::SeqCst);
                },
            )
            .unwrap();
        assert!(worker.handle().is_some());
        let ran = |at_least: u32, what: &str| {
            let deadline = Instant::now() + Duration::from_secs(5);
            while runs.load(Ordering::SeqCst) < at_least {
                assert!(Instant::now() < deadline, "the worker never ran on {what}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        notify.write(1).unwrap();
        ran(1, "the queue notification");
        wake.write(1).unwrap();
        ran(2, "the wake eventfd");
        worker.stop();
        assert!(worker.handle().is_none());
        let after_stop = runs.load(Ordering::SeqCst);
        notify.write(1).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(runs.load(Ordering::SeqCst), after_stop, "ran after stop");

        let mut refused = DeviceWorker::default();
        assert!(matches!(
            refused.start_single_queue("test-queue", activation(2, 2), None, |_, _, _| (), |_| ()),
            Err(ActivateError::QueueCount {
                expected: 1,
                got: 2
            })
        ));
        assert!(refused.handle().is_none());
    }
}
