//! VmConfig tests: validation errors with the offending values, JSON defaults, the transport.

use super::*;

fn vm() -> VmConfig {
    VmConfig {
        payload: PayloadConfig {
            kernel: "/boot/vmlinux".into(),
            initramfs: None,
            cmdline: "console=ttyS0".into(),
            guestless: false,
        },
        disks: vec![DiskConfig {
            id: "rootdisk".into(),
            path: "/disk/disk.img".into(),
            readonly: false,
        }],
        net: vec![NetConfig {
            id: "default".into(),
            tap: "tap0".into(),
            mac: "02:00:00:00:00:01".into(),
        }],
        ..VmConfig::default()
    }
}

#[test]
fn valid_config_passes() {
    assert_eq!(vm().validate(), Ok(()));
}

#[test]
fn invalid_configs_name_the_offending_values() {
    let cases = [
        (
            VmConfig {
                cpus: CpusConfig {
                    boot_vcpus: 2,
                    max_vcpus: 1,
                },
                ..vm()
            },
            ValidationError::CpusMaxLowerThanBoot { max: 1, boot: 2 },
        ),
        (
            VmConfig {
                cpus: CpusConfig {
                    boot_vcpus: 0,
                    max_vcpus: 1,
                },
                ..vm()
            },
            ValidationError::CpusBootZero,
        ),
        (
            VmConfig {
                memory: MemoryConfig { size: 1 << 20 },
                ..vm()
            },
            ValidationError::MemoryTooSmall(1 << 20),
        ),
        (
            VmConfig {
                memory: MemoryConfig {
                    size: (64 << 20) + 1,
                },
                ..vm()
            },
            ValidationError::MemoryUnaligned((64 << 20) + 1),
        ),
        (
            VmConfig {
                payload: PayloadConfig::default(),
                ..vm()
            },
            ValidationError::KernelMissing,
        ),
        (
            VmConfig {
                disks: vec![vm().disks[0].clone(), vm().disks[0].clone()],
                ..vm()
            },
            ValidationError::DuplicateId("rootdisk".into()),
        ),
        (
            VmConfig {
                net: vec![NetConfig {
                    mac: "02:00:00:00:01".into(),
                    ..vm().net[0].clone()
                }],
                ..vm()
            },
            ValidationError::BadMac {
                id: "default".into(),
                mac: "02:00:00:00:01".into(),
            },
        ),
        (
            VmConfig {
                vsock: Some(VsockConfig {
                    cid: 2,
                    socket: "/run/v.sock".into(),
                }),
                ..vm()
            },
            ValidationError::VsockCidReserved(2),
        ),
        (
            VmConfig {
                console: ConsoleConfig::Tty,
                ..vm()
            },
            ValidationError::TwoTtys,
        ),
        (
            VmConfig {
                transport: Transport::Mmio,
                disks: (0..19)
                    .map(|i| DiskConfig {
                        id: format!("d{i}"),
                        ..vm().disks[0].clone()
                    })
                    .collect(),
                ..vm()
            },
            ValidationError::TooManyDevices {
                transport: Transport::Mmio,
                count: 20,
                max: 19,
            },
        ),
        (
            VmConfig {
                disks: (0..31)
                    .map(|i| DiskConfig {
                        id: format!("d{i}"),
                        ..vm().disks[0].clone()
                    })
                    .collect(),
                ..vm()
            },
            ValidationError::TooManyDevices {
                transport: Transport::Pci,
                count: 32,
                max: 31,
            },
        ),
    ];
    for (config, expected) in cases {
        assert_eq!(config.validate(), Err(expected));
    }
}

/// A guestless VM: no kernel, no disks; what the launcher makes of a VMI without an OS disk.
fn guestless() -> VmConfig {
    VmConfig {
        payload: PayloadConfig::guestless(),
        memory: MemoryConfig {
            size: MIN_MEMORY_BYTES,
        },
        serial: ConsoleConfig::Null,
        transport: Transport::Mmio,
        ..VmConfig::default()
    }
}

#[test]
fn a_guestless_config_has_no_kernel_and_nothing_else_of_one() {
    assert_eq!(guestless().validate(), Ok(()));
    let with = |f: fn(&mut PayloadConfig)| {
        let mut config = guestless();
        f(&mut config.payload);
        config.validate()
    };
    assert_eq!(
        with(|p| p.kernel = "/boot/vmlinux".into()),
        Err(ValidationError::GuestlessWithKernel("kernel"))
    );
    assert_eq!(
        with(|p| p.initramfs = Some("/boot/initrd".into())),
        Err(ValidationError::GuestlessWithKernel("initramfs"))
    );
    assert_eq!(
        with(|p| p.cmdline = "console=ttyS0".into()),
        Err(ValidationError::GuestlessWithKernel("cmdline"))
    );
    // Its JSON says so, and only that; a payload that says neither is still refused.
    let json = serde_json::to_string(&guestless().payload).unwrap();
    assert_eq!(json, r#"{"guestless":true}"#);
    let back: VmConfig =
        serde_json::from_str(r#"{"payload":{"guestless":true},"transport":"mmio"}"#).unwrap();
    assert_eq!(back.payload, PayloadConfig::guestless());
    let nothing: VmConfig = serde_json::from_str(r#"{"payload":{}}"#).unwrap();
    assert_eq!(nothing.validate(), Err(ValidationError::KernelMissing));
    // A kernel's payload serializes as before.
    let json = serde_json::to_string(&vm().payload).unwrap();
    assert_eq!(
        json,
        r#"{"kernel":"/boot/vmlinux","cmdline":"console=ttyS0"}"#
    );
}

#[test]
fn json_round_trip_and_defaults() {
    let json = r#"{"payload":{"kernel":"/k"},"serial":{"mode":"socket","path":"/run/s"}}"#;
    let config: VmConfig = serde_json::from_str(json).unwrap();
    assert_eq!(config.cpus.boot_vcpus, 1);
    assert_eq!(config.console, ConsoleConfig::Off);
    assert_eq!(
        config.serial,
        ConsoleConfig::Socket {
            path: "/run/s".into()
        }
    );
    let back: VmConfig = serde_json::from_str(&serde_json::to_string(&config).unwrap()).unwrap();
    assert_eq!(back, config);
}

#[test]
fn the_transport_defaults_to_pci_and_parses_both_ways() {
    let json = r#"{"payload":{"kernel":"/k"}}"#;
    let config: VmConfig = serde_json::from_str(json).unwrap();
    assert_eq!(config.transport, Transport::Pci, "a config without it");
    let json = r#"{"payload":{"kernel":"/k"},"transport":"mmio"}"#;
    let config: VmConfig = serde_json::from_str(json).unwrap();
    assert_eq!(config.transport, Transport::Mmio);
    let text = serde_json::to_string(&config).unwrap();
    assert!(text.contains(r#""transport":"mmio""#), "{text}");
    let json = r#"{"payload":{"kernel":"/k"},"transport":"isa"}"#;
    assert!(serde_json::from_str::<VmConfig>(json).is_err());
    assert_eq!("pci".parse(), Ok(Transport::Pci));
    assert!("PCI".parse::<Transport>().is_err());
    assert_eq!(Transport::Mmio.to_string(), "mmio");
    assert_eq!(max_virtio_devices(Transport::Pci), 31);
    assert_eq!(max_virtio_devices(Transport::Mmio), 19);
    let mut full = vm();
    full.disks = (0..29)
        .map(|i| DiskConfig {
            id: format!("d{i}"),
            ..vm().disks[0].clone()
        })
        .collect();
    full.rng = Some(RngConfig::default());
    assert_eq!(full.virtio_device_count(), 31);
    assert_eq!(full.validate(), Ok(()), "31 devices fit on PCI");
}

#[test]
fn the_agent_channel_is_a_socket_path_that_fits_and_counts_as_a_device() {
    let with_socket = |socket: &str| VmConfig {
        agent: Some(AgentChannelConfig {
            socket: socket.into(),
        }),
        ..vm()
    };
    assert_eq!(with_socket("/run/ferrovirt/agent.sock").validate(), Ok(()));
    assert_eq!(
        with_socket("").validate(),
        Err(ValidationError::AgentSocketEmpty)
    );
    let longest = format!("/{}", "a".repeat(MAX_SOCKET_PATH - 1));
    assert_eq!(with_socket(&longest).validate(), Ok(()));
    let too_long = format!("{longest}b");
    assert_eq!(
        with_socket(&too_long).validate(),
        Err(ValidationError::AgentSocketTooLong {
            path: too_long.clone().into(),
            len: MAX_SOCKET_PATH + 1
        })
    );
    // It counts: with 30 disks and a NIC it is the 32nd device, one more than PCI has slots.
    let mut full = with_socket("/run/a.sock");
    assert_eq!(full.virtio_device_count(), 3);
    full.disks = (0..30)
        .map(|i| DiskConfig {
            id: format!("d{i}"),
            ..vm().disks[0].clone()
        })
        .collect();
    assert_eq!(
        full.validate(),
        Err(ValidationError::TooManyDevices {
            transport: Transport::Pci,
            count: 32,
            max: 31
        })
    );
    // JSON: absent by default, `{"socket": ...}` when there.
    let json = r#"{"payload":{"kernel":"/k"},"agent":{"socket":"/run/a.sock"}}"#;
    let config: VmConfig = serde_json::from_str(json).unwrap();
    assert_eq!(config.agent, with_socket("/run/a.sock").agent);
    let text = serde_json::to_string(&vm()).unwrap();
    assert!(!text.contains("agent"), "{text}");
    let bad = r#"{"payload":{"kernel":"/k"},"agent":{"socket":"/a","name":"x"}}"#;
    assert!(serde_json::from_str::<VmConfig>(bad).is_err());
}

#[test]
fn unknown_fields_are_rejected() {
    let json = r#"{"payload":{"kernel":"/k"},"gpus":[]}"#;
    let err = serde_json::from_str::<VmConfig>(json).unwrap_err();
    assert!(err.to_string().contains("gpus"), "{err}");
}

#[test]
fn mac_parsing() {
    assert_eq!(
        parse_mac("02:ab:00:00:00:ff"),
        Some([2, 0xab, 0, 0, 0, 0xff])
    );
    for bad in [
        "",
        "02:ab:00:00:00",
        "02:ab:00:00:00:ff:00",
        "2:ab:00:00:00:ff",
        "zz:ab:00:00:00:ff",
    ] {
        assert_eq!(parse_mac(bad), None, "{bad}");
    }
}

#[test]
fn smbios_values_must_fit_the_tables() {
    let with = |smbios: SmbiosConfig| VmConfig {
        smbios: Some(smbios),
        ..vm()
    };
    let good = SmbiosConfig {
        uuid: Some("5b1e36ba-1b7b-4d6a-9a65-0f2cd1c2ad63".into()),
        serial: Some("serial-1".into()),
        manufacturer: Some("KubeVirt".into()),
        ..SmbiosConfig::default()
    };
    assert_eq!(with(good.clone()).validate(), Ok(()));
    assert_eq!(
        with(SmbiosConfig {
            uuid: Some("fake-uuid".into()),
            ..good.clone()
        })
        .validate(),
        Err(ValidationError::SmbiosUuid("fake-uuid".into()))
    );
    let nul = with(SmbiosConfig {
        family: Some("a\0b".into()),
        ..good
    })
    .validate()
    .unwrap_err();
    assert!(
        matches!(&nul, ValidationError::SmbiosString { field: "family", problem } if problem.contains("NUL")),
        "{nul}"
    );
    let json = r#"{"payload":{"kernel":"/k"},"smbios":{"uuid":"5b1e36ba-1b7b-4d6a-9a65-0f2cd1c2ad63","serial":"s"}}"#;
    let parsed: VmConfig = serde_json::from_str(json).unwrap();
    assert_eq!(parsed.smbios.unwrap().serial.as_deref(), Some("s"));
    assert!(serde_json::from_str::<VmConfig>(
        r#"{"payload":{"kernel":"/k"},"smbios":{"asset":"x"}}"#
    )
    .is_err());
}
