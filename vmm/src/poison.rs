//! A poisoned lock is fatal. A thread that panicked while it held one of the VM's locks may
//! have left what the lock guards half-changed (a queue's indexes, a device's registers, the
//! run state); a VMM that went on would show the guest a machine in a state no real one has.
//! So the process ends at the next use of the lock, with a message that says why, as a panic
//! in Firecracker's VMM ends it.

use std::sync::PoisonError;

/// The message [`fatal`] prints before it aborts the process.
pub const MESSAGE: &str = "ferrovirt vmm: a thread panicked while it held a lock of the VM's \
                           state; the VMM ends rather than run on what it left half-changed";

/// For `lock().unwrap_or_else(poison::fatal)`: prints [`MESSAGE`] and aborts the process.
pub fn fatal<G>(_: PoisonError<G>) -> G {
    eprintln!("{MESSAGE}");
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;
    use std::sync::{Arc, Mutex};

    use super::*;

    const CHILD_ENV: &str = "FERROVIRT_POISON_TEST_CHILD";

    #[test]
    fn the_next_use_of_a_lock_whose_holder_panicked_ends_the_process() {
        if std::env::var_os(CHILD_ENV).is_some() {
            let state = Arc::new(Mutex::new(0u32));
            let held = state.clone();
            let _ = std::thread::spawn(move || {
                let _guard = held.lock().unwrap();
                panic!("a device model bug");
            })
            .join();
            let _value = state.lock().unwrap_or_else(fatal);
            unreachable!("the process went on with a poisoned lock");
        }
        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "poison::tests::the_next_use_of_a_lock_whose_holder_panicked_ends_the_process",
                "--nocapture",
            ])
            .env(CHILD_ENV, "1")
            .output()
            .expect("run the test binary again");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "{:?}: {stderr}",
            out.status
        );
        assert!(stderr.contains("a device model bug"), "{stderr}");
        assert!(stderr.contains(MESSAGE), "{stderr}");
    }
}
