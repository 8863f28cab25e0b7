use super::*;
use vmm::config::VmConfig;

#[test]
fn a_block_io_error_names_the_disk_and_why() {
    let full = json!({"device": "disk2", "node-name": "#block391", "operation": "write",
                      "action": "stop", "nospace": true, "reason": "No space left on device"});
    let names = ["root", "cloudinit", "scratch"].map(String::from);
    assert_eq!(
        io_error_text(&full, &names),
        "write on disk scratch: No space left on device"
    );
    let bare = json!({"device": "", "node-name": "n1", "operation": "read", "nospace": true});
    assert_eq!(
        io_error_text(&bare, &names),
        "read on drive n1: no space left on the host"
    );
}

#[test]
fn query_migrate_answers() {
    let done = json!({"status": "completed", "total-time": 2100, "downtime": 35,
        "ram": {"transferred": 100, "remaining": 0, "total": 400},
        "disk": {"transferred": 50, "remaining": 0, "total": 50}});
    let progress = migration_progress(&done);
    assert_eq!(progress.phase, MigrationPhase::Completed);
    assert_eq!(
        (progress.transferred_bytes, progress.total_bytes),
        (150, 450)
    );
    assert_eq!(
        (progress.total_ms, progress.downtime_ms),
        (Some(2100), Some(35))
    );
    let failed = json!({"status": "failed", "error-desc": "Unable to write to socket"});
    let progress = migration_progress(&failed);
    assert_eq!(progress.phase, MigrationPhase::Failed);
    assert_eq!(progress.error, "Unable to write to socket");
    assert_eq!(
        migration_progress(&json!({"status": "setup"})).phase,
        MigrationPhase::Active
    );
}

#[test]
fn tsc_from_cpuinfo() {
    let with = "cpu MHz\t\t: 2599.998\nflags\t\t: fpu tsc constant_tsc nonstop_tsc\n";
    let without = "cpu MHz\t\t: 2599.998\nflags\t\t: fpu tsc\n";
    assert_eq!(host_tsc_khz(with), Some(2_599_998));
    assert_eq!(host_tsc_khz(without), None);
    assert_eq!(host_tsc_khz(""), None);
}

#[test]
fn missing_files_are_named() {
    let config = VmConfig {
        payload: vmm::config::PayloadConfig {
            kernel: "/nonexistent/vmlinux".into(),
            ..Default::default()
        },
        ..VmConfig::default()
    };
    let err = super::super::check_files(&config).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/vmlinux"), "{err}");
    // A guestless VM has no kernel to look for.
    let guestless = VmConfig {
        payload: vmm::config::PayloadConfig::guestless(),
        ..VmConfig::default()
    };
    assert!(super::super::check_files(&guestless).is_ok());
}
