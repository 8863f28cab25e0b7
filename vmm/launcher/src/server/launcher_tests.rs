use vmm::config::VmConfig;

use super::*;

#[test]
fn firmware_runs_on_qemu_or_fails_with_the_reason() {
    let seabios = converter::Firmware::SeaBios { serial: false };
    let kvm = BackendChoice {
        kind: BackendKind::Kvm,
        reason: "/dev/kvm has hardware virtualization".into(),
    };
    let qemu = BackendChoice {
        kind: BackendKind::QemuTcg,
        reason: "useEmulation is set in the KubeVirt configuration".into(),
    };
    assert_eq!(
        firmware_backend(qemu.clone(), &seabios, None).unwrap(),
        qemu
    );
    let moved = firmware_backend(kvm.clone(), &seabios, None).unwrap();
    assert_eq!(moved.kind, BackendKind::QemuTcg);
    assert_eq!(
        moved.reason,
        "firmware.bootloader asks for SeaBIOS, which only the QEMU backend runs (the KVM VMM \
         has no firmware); /dev/kvm has hardware virtualization"
    );
    let forced = firmware_backend(kvm, &seabios, Some(BackendKind::Kvm)).unwrap_err();
    assert_eq!(
        forced.to_string(),
        "firmware.bootloader (SeaBIOS) runs on the QEMU backend only, and this launcher's \
         --backend flag forces the KVM VMM"
    );
    assert_eq!(forced.code(), tonic::Code::FailedPrecondition);
}

#[test]
fn the_guest_agent_socket_must_fit() {
    // A run directory where qmp.sock just fits and agent.sock does not.
    let dir = format!("/{}", "r".repeat(contract::sockets::MAX_SOCKET_PATH - 10));
    let settings = Settings {
        socket_dir: "/s".into(),
        run_dir: dir.clone().into(),
        container_disk_dir: "/cd".into(),
        kernel_boot_dir: "/kb".into(),
        pvc_dir: "/pvc".into(),
        generated_disk_dir: "/d".into(),
        default_kernel: "/k".into(),
        default_initramfs: None,
        no_os_disk_boots_kernel: false,
        tap_device: "tap0".into(),
        pod_network: false,
        force_backend: None,
        ovmf_dir: "/ovmf".into(),
        drop_capabilities: false,
    };
    let facts = settings.host_facts(false);
    let mut config = VmConfig {
        serial: ConsoleConfig::Null,
        ..VmConfig::default()
    };
    assert!(check_sockets(&config, &facts).is_ok());
    config.agent = Some(vmm::config::AgentChannelConfig {
        socket: facts.run_dir.join(crate::backend::AGENT_SOCKET),
    });
    let err = check_sockets(&config, &facts).unwrap_err();
    assert!(
        err.to_string().contains(&format!("{dir}/agent.sock")),
        "{err}"
    );
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}
