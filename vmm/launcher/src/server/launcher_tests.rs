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
