//! Host capability probe: can this host's `/dev/kvm` run a standard guest?
//!
//! `/dev/kvm` can exist without hardware virtualization: PVM (module `kvm_pvm`) runs guest user
//! mode natively but interprets guest kernel mode in KVM's instruction emulator, so a stock Linux
//! kernel never boots on it. The launcher uses [`probe`] to choose the QEMU TCG fallback, and
//! virt-handler labels its node with it (`ferrovirt.io/kvm`). Only the project's own test
//! guests, which spend almost no time in kernel mode, run there.
//!
//! It lives in the contract so that the handler probes its node without linking the VMM; the
//! `vmm` crate re-exports it as `vmm::capability`.

use std::path::Path;

/// What this host's KVM can do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvmCapability {
    /// `/dev/kvm` with hardware virtualization (vmx or svm): any guest runs at full speed.
    Hardware,
    /// `/dev/kvm` is PVM: only PVM-aware guests (or the project's test guests) are usable.
    PvmOnly,
    /// No usable `/dev/kvm`; the reason says what is missing.
    Unavailable(String),
}

impl KvmCapability {
    /// Whether a stock Linux guest can run on this host's KVM.
    pub fn runs_standard_guests(&self) -> bool {
        *self == KvmCapability::Hardware
    }
}

/// The message a command that needs hardware virtualization stops with on a PVM host.
pub const NEEDS_HARDWARE_VIRT: &str = "needs hardware virtualization: this /dev/kvm is PVM";

/// Probes this host: `/dev/kvm`, `/proc/cpuinfo` flags and the loaded KVM modules.
pub fn probe() -> KvmCapability {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    classify(
        Path::new("/dev/kvm").exists(),
        &cpuinfo,
        Path::new("/sys/module/kvm_pvm").exists(),
    )
    .and_then_open()
}

impl KvmCapability {
    /// Refines a `Hardware`/`PvmOnly` verdict by opening `/dev/kvm` (permissions, busy module).
    fn and_then_open(self) -> KvmCapability {
        match self {
            KvmCapability::Unavailable(_) => self,
            // What `kvm_ioctls::Kvm::new` does: open `/dev/kvm` read-write (close-on-exec).
            _ => match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/kvm")
            {
                Ok(_) => self,
                Err(e) => KvmCapability::Unavailable(format!("cannot open /dev/kvm: {e}")),
            },
        }
    }
}

/// Pure classification from the facts `probe` gathers.
pub fn classify(dev_kvm: bool, cpuinfo: &str, kvm_pvm_loaded: bool) -> KvmCapability {
    if !dev_kvm {
        return KvmCapability::Unavailable("/dev/kvm does not exist".into());
    }
    let hw = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
    if hw && !kvm_pvm_loaded {
        KvmCapability::Hardware
    } else {
        KvmCapability::PvmOnly
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let vmx = "processor\t: 0\nflags\t\t: fpu vme vmx sse\n";
        let plain = "processor\t: 0\nflags\t\t: fpu vme sse\n";
        assert_eq!(classify(true, vmx, false), KvmCapability::Hardware);
        assert_eq!(classify(true, plain, false), KvmCapability::PvmOnly);
        assert_eq!(classify(true, vmx, true), KvmCapability::PvmOnly);
        assert!(matches!(
            classify(false, vmx, false),
            KvmCapability::Unavailable(_)
        ));
        assert!(!KvmCapability::PvmOnly.runs_standard_guests());
    }
}
