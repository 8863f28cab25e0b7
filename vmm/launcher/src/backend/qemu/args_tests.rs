//! The arguments of each machine and device, and what QEMU cannot run, refused.

use vmm::config::{DiskConfig, NetConfig, PayloadConfig, RngConfig, VsockConfig};

use super::*;

fn config() -> VmConfig {
    VmConfig {
        payload: PayloadConfig {
            kernel: "/k/vmlinux".into(),
            initramfs: Some("/k/initrd".into()),
            cmdline: "console=ttyS0 root=/dev/vda rw".into(),
            guestless: false,
        },
        disks: vec![
            DiskConfig {
                id: "root".into(),
                path: "/d/root,1.img".into(),
                readonly: false,
            },
            DiskConfig {
                id: "cloudinitdisk".into(),
                path: "/d/ci.img".into(),
                readonly: true,
            },
        ],
        net: vec![NetConfig {
            id: "default".into(),
            tap: "tap0".into(),
            mac: "02:00:00:00:00:01".into(),
        }],
        serial: ConsoleConfig::Socket {
            path: "/run/serial.sock".into(),
        },
        rng: Some(RngConfig::default()),
        ..VmConfig::default()
    }
}

fn paths() -> QemuPaths {
    QemuPaths {
        qmp: "/run/qmp.sock".into(),
        agent: "/run/agent.sock".into(),
        ovmf_vars: "/run/OVMF_VARS.fd".into(),
        sercon_port: "/run/sercon-port".into(),
        smbios_anchor: "/run/smbios-anchor".into(),
        smbios_tables: "/run/smbios-tables".into(),
    }
}

#[test]
fn smbios_is_qboots_fw_cfg_files_on_microvm_and_smbios_type_1_on_q35() {
    let smbios = SmbiosConfig {
        uuid: Some("5d307ca9-b3ef-428c-8861-06e72d69f223".into()),
        serial: Some("a,b".into()),
        manufacturer: Some("KubeVirt".into()),
        product: Some("None".into()),
        family: Some("KubeVirt".into()),
        ..SmbiosConfig::default()
    };
    let with = VmConfig {
        smbios: Some(smbios.clone()),
        ..config()
    };
    let microvm = Machine::Microvm(Acpi::On);
    let args = qemu_args(&with, &paths(), None, &microvm).unwrap();
    for file in ["anchor", "tables"] {
        let value = format!("name=etc/smbios/smbios-{file},file=/run/smbios-{file}");
        assert!(has_pair(&args, "-fw_cfg", &value), "{args:?}");
    }
    assert!(!args.iter().any(|a| a == "-smbios"), "{args:?}");
    let tables = smbios_files(&with, &microvm)
        .unwrap()
        .expect("microvm gets the files");
    assert_eq!(tables, SmbiosTables::build(&smbios, 0).unwrap());

    let q35 = Machine::Q35(Firmware::SeaBios { serial: false }, None);
    let firmware_boot = VmConfig {
        payload: PayloadConfig::guestless(),
        ..with.clone()
    };
    let args = qemu_args(&firmware_boot, &paths(), None, &q35).unwrap();
    let type1 = "type=1,manufacturer=KubeVirt,product=None,serial=a,,b,family=KubeVirt,\
                 uuid=5d307ca9-b3ef-428c-8861-06e72d69f223";
    assert!(has_pair(&args, "-smbios", type1), "{args:?}");
    assert!(!args.iter().any(|a| a.contains("etc/smbios")), "{args:?}");
    assert_eq!(smbios_files(&firmware_boot, &q35).unwrap(), None);

    // None without the config, or for a guestless microvm (its firmware boots nothing).
    for (config, machine) in [
        (config(), &microvm),
        (
            VmConfig {
                payload: PayloadConfig::guestless(),
                ..with
            },
            &microvm,
        ),
    ] {
        let args = qemu_args(&config, &paths(), None, machine).unwrap();
        assert!(!args.iter().any(|a| a.contains("smbios")), "{args:?}");
        assert_eq!(smbios_files(&config, machine).unwrap(), None);
    }
}

fn has_pair(args: &[String], flag: &str, value: &str) -> bool {
    args.windows(2).any(|w| w[0] == flag && w[1] == value)
}

/// Asserts that each `(flag, value)` follows one another in `args`.
fn assert_pairs(args: &[String], pairs: &[(&str, &str)]) {
    for (flag, value) in pairs {
        assert!(
            has_pair(args, flag, value),
            "{flag} {value} missing from {args:?}"
        );
    }
}

#[test]
fn translation() {
    let args = qemu_args(
        &config(),
        &paths(),
        Some(2_600_000),
        &Machine::Microvm(Acpi::Off),
    )
    .unwrap();
    let cases = [
        ("-M", "microvm,acpi=off"),
        ("-device", "i8042"),
        ("-accel", "tcg"),
        ("-m", "512M"),
        ("-smp", "1"),
        ("-qmp", "unix:/run/qmp.sock,server=on,wait=off"),
        (
            "-chardev",
            "socket,id=serial0,path=/run/serial.sock,server=on,wait=off",
        ),
        ("-serial", "chardev:serial0"),
        ("-kernel", "/k/vmlinux"),
        ("-initrd", "/k/initrd"),
        (
            "-append",
            "console=ttyS0 root=/dev/vda rw tsc_early_khz=2600000 panic=-1",
        ),
        (
            "-drive",
            "id=disk0,file=/d/root,,1.img,format=raw,if=none,cache=none,aio=threads",
        ),
        ("-device", "virtio-blk-device,drive=disk0,serial=root"),
        (
            "-drive",
            "id=disk1,file=/d/ci.img,format=raw,if=none,cache=none,aio=threads,readonly=on",
        ),
        ("-netdev", "tap,id=net0,ifname=tap0,script=no,downscript=no"),
        (
            "-device",
            "virtio-net-device,netdev=net0,mac=02:00:00:00:00:01",
        ),
        ("-object", "rng-random,id=rng0,filename=/dev/urandom"),
        ("-device", "virtio-rng-device,rng=rng0"),
    ];
    for (flag, value) in cases {
        assert!(
            has_pair(&args, flag, value),
            "{flag} {value} missing from {args:?}"
        );
    }
    assert!(args.contains(&"-S".to_string()));
    // The boot disk's device comes before the others.
    let first_blk = args.iter().position(|a| a.contains("drive=disk0")).unwrap();
    let second_blk = args.iter().position(|a| a.contains("drive=disk1")).unwrap();
    assert!(first_blk < second_blk);
}

#[test]
fn the_guest_agent_channel_comes_after_every_other_device() {
    let seabios = Machine::Q35(Firmware::SeaBios { serial: false }, None);
    for (machine, controller) in [
        (Machine::Microvm(Acpi::Off), "virtio-serial-device"),
        (Machine::Microvm(Acpi::On), "virtio-serial-device"),
        (seabios, "virtio-serial-pci"),
    ] {
        let args = qemu_args(&config(), &paths(), None, &machine).unwrap();
        let tail: Vec<&str> = args[args.len() - 6..].iter().map(String::as_str).collect();
        assert_eq!(
            tail,
            [
                "-chardev",
                "socket,id=agent0,path=/run/agent.sock,server=on,wait=off",
                "-device",
                &format!("{controller},id=agentserial0"),
                "-device",
                "virtserialport,bus=agentserial0.0,chardev=agent0,name=org.qemu.guest_agent.0",
            ],
            "{machine:?}"
        );
        // The disks, the NIC and the rng keep their places before it.
        let devices: Vec<&str> = args
            .windows(2)
            .filter(|w| w[0] == "-device")
            .map(|w| w[1].split(',').next().unwrap_or(""))
            .filter(|d| d.starts_with("virtio"))
            .collect();
        let (blk, net, rng) = match machine {
            Machine::Q35(..) => ("virtio-blk-pci", "virtio-net-pci", "virtio-rng-pci"),
            Machine::Microvm(_) => (
                "virtio-blk-device",
                "virtio-net-device",
                "virtio-rng-device",
            ),
        };
        assert_eq!(devices, [blk, blk, net, rng, controller], "{args:?}");
    }
    // A guestless VM has the channel too (nothing answers on it).
    let guestless = VmConfig {
        payload: PayloadConfig::guestless(),
        ..config()
    };
    let args = qemu_args(&guestless, &paths(), None, &Machine::Microvm(Acpi::Off)).unwrap();
    assert!(args.iter().any(|a| a.contains(AGENT_PORT_NAME)), "{args:?}");
    // A comma in the path is escaped as in every other QEMU option value.
    let odd = QemuPaths {
        agent: "/run/a,b/agent.sock".into(),
        ..paths()
    };
    let args = qemu_args(&config(), &odd, None, &Machine::Microvm(Acpi::Off)).unwrap();
    assert!(
        has_pair(
            &args,
            "-chardev",
            "socket,id=agent0,path=/run/a,,b/agent.sock,server=on,wait=off"
        ),
        "{args:?}"
    );
}

#[test]
fn a_guestless_vm_has_no_kernel_and_the_machines_firmware() {
    let guestless = VmConfig {
        payload: PayloadConfig::guestless(),
        memory: vmm::config::MemoryConfig { size: 16 << 20 },
        disks: Vec::new(),
        net: Vec::new(),
        rng: None,
        ..config()
    };
    let args = qemu_args(
        &guestless,
        &paths(),
        Some(2_600_000),
        &Machine::Microvm(Acpi::Off),
    )
    .unwrap();
    for flag in ["-kernel", "-initrd", "-append", "-bios", "-drive"] {
        assert!(!args.contains(&flag.to_string()), "{flag} in {args:?}");
    }
    assert_pairs(
        &args,
        &[
            ("-M", "microvm,acpi=off"),
            ("-device", "i8042"),
            ("-m", "16M"),
            ("-serial", "chardev:serial0"),
        ],
    );
    assert!(args.contains(&"-S".to_string()));
}

#[test]
fn acpi_for_distribution_kernels_only() {
    for (acpi, machine) in [
        (Acpi::Off, "microvm,acpi=off"),
        (Acpi::On, "microvm,acpi=on"),
    ] {
        let args = qemu_args(&config(), &paths(), None, &Machine::Microvm(acpi)).unwrap();
        assert!(has_pair(&args, "-M", machine), "{args:?}");
        // The i8042 stays: Ctrl-Alt-Del is the graceful shutdown either way.
        assert!(has_pair(&args, "-device", "i8042"), "{args:?}");
    }
}

fn ovmf() -> Machine {
    Machine::Q35(
        Firmware::Ovmf {
            code: "/usr/share/OVMF/OVMF_CODE_4M.fd".into(),
            vars_template: "/usr/share/OVMF/OVMF_VARS_4M.fd".into(),
        },
        None,
    )
}

#[test]
fn a_graphics_device_is_a_vga_card_shown_by_vnc_on_its_socket_only() {
    let firmware_boot = VmConfig {
        payload: PayloadConfig::guestless(),
        ..config()
    };
    let vnc = PathBuf::from("/run/kubevirt/sockets/vnc-sock");
    let with = Machine::Q35(Firmware::SeaBios { serial: true }, Some(vnc));
    let args = qemu_args(&firmware_boot, &paths(), None, &with).unwrap();
    assert!(has_pair(&args, "-device", "VGA"), "{args:?}");
    assert!(
        has_pair(&args, "-vnc", "unix:/run/kubevirt/sockets/vnc-sock"),
        "{args:?}"
    );
    // No window of QEMU's own: the screen is VNC's alone.
    assert!(has_pair(&args, "-display", "none"), "{args:?}");
    let without = Machine::Q35(Firmware::SeaBios { serial: true }, None);
    let args = qemu_args(&firmware_boot, &paths(), None, &without).unwrap();
    assert!(!args.iter().any(|a| a == "-vnc" || a == "VGA"), "{args:?}");
}

#[test]
fn firmware_gets_q35_pci_devices_and_boot_indexes() {
    let firmware_boot = VmConfig {
        payload: PayloadConfig::guestless(),
        ..config()
    };
    let seabios = Machine::Q35(Firmware::SeaBios { serial: false }, None);
    let sercon = Machine::Q35(Firmware::SeaBios { serial: true }, None);
    for machine in [&seabios, &sercon, &ovmf()] {
        let args = qemu_args(&firmware_boot, &paths(), Some(2_600_000), machine).unwrap();
        assert_pairs(
            &args,
            &[
                ("-M", "q35"),
                ("-accel", "tcg"),
                ("-serial", "chardev:serial0"),
                (
                    "-device",
                    "virtio-blk-pci,drive=disk0,serial=root,bootindex=1",
                ),
                (
                    "-device",
                    "virtio-blk-pci,drive=disk1,serial=cloudinitdisk,bootindex=2",
                ),
                (
                    "-device",
                    "virtio-net-pci,netdev=net0,mac=02:00:00:00:00:01,romfile=",
                ),
                ("-device", "virtio-rng-pci,rng=rng0"),
            ],
        );
        // The firmware boots the disk: no kernel of QEMU's, no microvm devices.
        for absent in ["-kernel", "-initrd", "-append", "i8042", "-bios"] {
            assert!(!args.contains(&absent.to_string()), "{absent} in {args:?}");
        }
        assert!(args.contains(&"-S".to_string()));
    }
    let sercon_arg = ("-fw_cfg", "name=etc/sercon-port,file=/run/sercon-port");
    let args = qemu_args(&firmware_boot, &paths(), None, &sercon).unwrap();
    assert!(has_pair(&args, sercon_arg.0, sercon_arg.1), "{args:?}");
    let args = qemu_args(&firmware_boot, &paths(), None, &seabios).unwrap();
    assert!(!args.contains(&"-fw_cfg".to_string()), "{args:?}");
    assert!(!args.iter().any(|a| a.contains("pflash")), "{args:?}");
    let args = qemu_args(&firmware_boot, &paths(), None, &ovmf()).unwrap();
    for value in [
        "if=pflash,unit=0,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
        // The VM's own copy of the variables, never the template.
        "if=pflash,unit=1,format=raw,file=/run/OVMF_VARS.fd",
    ] {
        assert!(
            has_pair(&args, "-drive", value),
            "{value} missing from {args:?}"
        );
    }
    assert_eq!(SERCON_PORT, [0xf8, 0x03]);
}

#[test]
fn firmware_with_kernel_boot_hands_the_kernel_to_it() {
    let args = qemu_args(&config(), &paths(), Some(2_600_000), &ovmf()).unwrap();
    assert_pairs(
        &args,
        &[
            ("-kernel", "/k/vmlinux"),
            ("-initrd", "/k/initrd"),
            // No microvm TSC workaround on the PC machine.
            ("-append", "console=ttyS0 root=/dev/vda rw panic=-1"),
        ],
    );
}

#[test]
fn serial_modes() {
    let cases = [
        (ConsoleConfig::Null, "null"),
        (ConsoleConfig::Off, "none"),
        (ConsoleConfig::Tty, "stdio"),
    ];
    for (serial, want) in cases {
        let args = qemu_args(
            &VmConfig { serial, ..config() },
            &paths(),
            None,
            &Machine::Microvm(Acpi::Off),
        )
        .unwrap();
        assert!(has_pair(&args, "-serial", want), "{args:?}");
        assert!(!args.iter().any(|a| a.contains("tsc_early_khz")));
    }
}

#[test]
fn unsupported_devices_are_refused() {
    let vsock = VmConfig {
        vsock: Some(VsockConfig {
            cid: 3,
            socket: "/v".into(),
        }),
        ..config()
    };
    assert!(matches!(
        qemu_args(&vsock, &paths(), None, &Machine::Microvm(Acpi::Off)),
        Err(ArgsError::Unsupported("vsock", _))
    ));
    let console = VmConfig {
        console: ConsoleConfig::Null,
        ..config()
    };
    assert!(qemu_args(&console, &paths(), None, &Machine::Microvm(Acpi::Off)).is_err());
}
