use super::*;

fn parse(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("virtctl").chain(args.iter().copied())).unwrap()
}

fn call(args: &[&str]) -> ApiCall {
    let cli = parse(args);
    plan(&cli.command, cli.namespace.as_deref().unwrap_or("default"))
        .unwrap()
        .unwrap()
}

fn body(call: &ApiCall) -> serde_json::Value {
    serde_json::from_slice(&call.body).unwrap()
}

#[test]
fn start_with_namespace_flag_anywhere() {
    let c = call(&["start", "testvm", "-n", "ns1"]);
    assert_eq!(c.method, Method::PUT);
    assert_eq!(
        c.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/ns1/virtualmachines/testvm/start"
    );
    assert_eq!(body(&c), serde_json::json!({}));
    assert_eq!(
        c.success.as_deref(),
        Some("VM testvm was scheduled to start")
    );
    let c = call(&["--namespace", "ns2", "start", "--paused", "testvm"]);
    assert!(c.path.contains("/namespaces/ns2/"));
    assert_eq!(body(&c), serde_json::json!({"paused": true}));
}

#[test]
fn stop_force_grace_period() {
    let c = call(&["stop", "testvm", "--force", "--grace-period", "0"]);
    assert_eq!(body(&c), serde_json::json!({"gracePeriod": 0}));
    assert_eq!(c.failure, "Error force stopping VirtualMachine,");
    let cli = parse(&["stop", "testvm", "--grace-period", "5"]);
    let error = plan(&cli.command, "default").expect_err("grace period without force");
    assert_eq!(error, UsageError::GracePeriodWithoutForce);
    assert_eq!(
        error.to_string(),
        "Can not set gracePeriod without --force=true"
    );
    let cli = parse(&["stop", "testvm", "--force"]);
    let error = plan(&cli.command, "default").expect_err("force without grace period");
    assert_eq!(error.to_string(), "Can not force stop without gracePeriod");
    let cli = parse(&["restart", "testvm", "--force"]);
    let error = plan(&cli.command, "default").expect_err("force without grace period");
    assert_eq!(
        error.to_string(),
        "Can not force restart without gracePeriod"
    );
    let c = call(&["stop", "testvm"]);
    assert_eq!(c.failure, "Error stopping VirtualMachine");
    assert_eq!(body(&c), serde_json::json!({}));
    let c = call(&["stop", "testvm", "--dry-run"]);
    assert_eq!(body(&c), serde_json::json!({"dryRun": ["All"]}));
}

#[test]
fn restart_pause_unpause_migrate() {
    let c = call(&["restart", "vm1", "--force", "--grace-period", "3"]);
    assert!(c.path.ends_with("/virtualmachines/vm1/restart"));
    assert_eq!(body(&c), serde_json::json!({"gracePeriodSeconds": 3}));
    let c = call(&["pause", "vmi", "vm1"]);
    assert!(c.path.ends_with("/virtualmachineinstances/vm1/pause"));
    assert_eq!(c.success.as_deref(), Some("VMI vm1 was scheduled to pause"));
    let c = call(&["pause", "vm", "vm1"]);
    assert!(c.path.ends_with("/virtualmachineinstances/vm1/pause"));
    let c = call(&["unpause", "vmi", "vm1"]);
    assert!(c.path.ends_with("/virtualmachineinstances/vm1/unpause"));
    assert_eq!(
        c.success.as_deref(),
        Some("VMI vm1 was scheduled to unpause")
    );
    let c = call(&["migrate", "vm1"]);
    assert!(c.path.ends_with("/virtualmachines/vm1/migrate"));
    let c = call(&["guestosinfo", "vm1"]);
    assert_eq!(c.method, Method::GET);
    assert!(c.path.ends_with("/virtualmachineinstances/vm1/guestosinfo"));
}

#[test]
fn console_and_version_are_not_single_calls() {
    let cli = parse(&["console", "vm1", "--kubeconfig", "/tmp/kc"]);
    assert_eq!(cli.kubeconfig, Some(PathBuf::from("/tmp/kc")));
    assert_eq!(plan(&cli.command, "default"), Ok(None));
    assert!(Cli::try_parse_from(["virtctl", "pause", "pod", "x"]).is_err());
    assert!(Cli::try_parse_from(["virtctl", "start"]).is_err());
}

#[test]
fn soft_reboot_is_kubevirts_name_and_softreboot_still_works() {
    for spelling in ["soft-reboot", "softreboot"] {
        let c = call(&[spelling, "testvmi"]);
        assert_eq!(
            c.path,
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/testvmi/softreboot",
            "{spelling}"
        );
        assert_eq!(
            c.success.as_deref(),
            Some("VMI testvmi was scheduled to soft-reboot")
        );
    }
}

#[test]
fn reset_puts_the_vmis_reset_subresource_with_kubevirts_messages() {
    let c = call(&["reset", "testvmi"]);
    assert_eq!(c.method, http::Method::PUT);
    assert_eq!(
        c.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/testvmi/reset"
    );
    assert_eq!(
        c.success.as_deref(),
        Some("VMI testvmi was scheduled to reset")
    );
    assert_eq!(c.failure, "Error reseting VirtualMachineInstance testvmi:");
}

#[test]
fn the_guest_agent_commands_get_their_subresources() {
    for (command, sub) in [
        ("guestosinfo", "guestosinfo"),
        ("userlist", "userlist"),
        ("fslist", "filesystemlist"),
    ] {
        let c = call(&[command, "testvmi"]);
        assert_eq!(c.method, http::Method::GET);
        assert_eq!(
            c.path,
            format!(
                "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/testvmi/{sub}"
            )
        );
        assert_eq!(c.success, None, "{command} prints the answer");
        assert_eq!(c.failure, format!("Error getting {sub}:"));
    }
}

#[test]
fn expand_and_create_parse_and_make_no_planned_call() {
    let cli = parse(&["expand", "--vm", "vm1", "-o", "json", "-n", "ns1"]);
    assert_eq!(cli.namespace.as_deref(), Some("ns1"));
    assert_eq!(
        cli.command,
        Command::Expand(ExpandArgs {
            vm: Some("vm1".into()),
            output: "json".into(),
            ..Default::default()
        })
    );
    assert_eq!(plan(&cli.command, "ns1"), Ok(None));
    let cli = parse(&["expand", "-f", "-"]);
    let Command::Expand(args) = &cli.command else {
        panic!("not expand");
    };
    assert_eq!(args.file.as_deref(), Some("-"));
    assert_eq!(args.output, "yaml");

    let cli = parse(&[
        "create",
        "instancetype",
        "--cpu",
        "2",
        "--memory",
        "-1Gi",
        "--gpu",
        "name:a,devicename:b",
        "--gpu",
        "name:c,devicename:d",
        "--namespaced",
    ]);
    assert_eq!(
        cli.command,
        Command::Create {
            kind: Some(CreateKind::Instancetype(InstancetypeArgs {
                cpu: Some("2".into()),
                memory: Some("-1Gi".into()),
                gpu: vec!["name:a,devicename:b".into(), "name:c,devicename:d".into()],
                namespaced: true,
                ..Default::default()
            }))
        }
    );
    assert_eq!(plan(&cli.command, "default"), Ok(None));
    let cli = parse(&[
        "create",
        "preference",
        "--cpu-topology",
        "spread",
        "--machine-type",
        "q35",
        "--volume-storage-class",
        "local",
    ]);
    assert_eq!(
        cli.command,
        Command::Create {
            kind: Some(CreateKind::Preference(PreferenceArgs {
                cpu_topology: Some("spread".into()),
                machine_type: Some("q35".into()),
                volume_storage_class: Some("local".into()),
                ..Default::default()
            }))
        }
    );
    assert_eq!(parse(&["create"]).command, Command::Create { kind: None });
    assert!(matches!(
        parse(&["create", "vm"]).command,
        Command::Create {
            kind: Some(CreateKind::Vm(_))
        }
    ));
    assert!(Cli::try_parse_from(["virtctl", "create", "bogus"]).is_err());
    assert!(Cli::try_parse_from(["virtctl", "create", "preference", "--bogus"]).is_err());
    assert!(Cli::try_parse_from(["virtctl", "expand", "--bogus"]).is_err());
}

#[test]
fn port_forward_ssh_and_scp_take_kubevirts_flags() {
    let cli = parse(&["port-forward", "--stdio=true", "vmi/debian.ns", "22"]);
    assert_eq!(
        cli.command,
        Command::PortForward {
            stdio: true,
            address: "127.0.0.1".into(),
            target: "vmi/debian.ns".into(),
            ports: vec!["22".into()],
        }
    );
    let cli = parse(&["port-forward", "vm/x", "8080:80", "tcp/2222:22"]);
    assert!(
        matches!(&cli.command, Command::PortForward { stdio: false, ports, .. } if ports.len() == 2)
    );
    assert!(Cli::try_parse_from(["virtctl", "port-forward", "vmi/x"]).is_err());

    let cli = parse(&[
        "ssh",
        "-i",
        "/k/id",
        "-t",
        "-o StrictHostKeyChecking=no",
        "--known-hosts=/tmp/kh",
        "fvuser@vmi/debian",
        "-c",
        "id -un",
    ]);
    let Command::Ssh {
        destination,
        ssh,
        command,
    } = &cli.command
    else {
        panic!("{:?}", cli.command);
    };
    assert_eq!(
        (destination.as_str(), command.as_deref()),
        ("fvuser@vmi/debian", Some("id -un"))
    );
    let options = ssh.options().unwrap();
    assert_eq!(options.port, 22);
    assert_eq!(options.local_ssh_opts, ["-o", "StrictHostKeyChecking=no"]);
    let cli = parse(&["ssh", "--local-ssh=false", "vmi/x"]);
    let Command::Ssh { ssh, .. } = &cli.command else {
        panic!("{:?}", cli.command);
    };
    assert!(ssh
        .options()
        .unwrap_err()
        .contains("not supported by ferrovirt"));

    let cli = parse(&["scp", "-r", "-p", "2222", "./d", "vmi/x:/tmp"]);
    assert!(matches!(&cli.command, Command::Scp { recursive: true, ssh, .. } if ssh.port == 2222));
    assert_eq!(plan(&cli.command, "default"), Ok(None));
}

#[test]
fn vnc_takes_kubevirts_flags_and_makes_no_single_call() {
    let cli = parse(&["vnc", "testvmi"]);
    assert_eq!(
        cli.command,
        Command::Vnc(VncArgs {
            command: None,
            name: Some("testvmi".into()),
            extra: vec![],
            address: "127.0.0.1".into(),
            port: 0,
            preserve_session: false,
            proxy_only: false,
            vnc_path: None,
            vnc_type: None,
        })
    );
    assert_eq!(plan(&cli.command, "default"), Ok(None));
    let cli = parse(&[
        "vnc",
        "--proxy-only",
        "testvmi",
        "--port",
        "5901",
        "--address=0.0.0.0",
        "-n",
        "ns1",
    ]);
    let Command::Vnc(args) = &cli.command else {
        panic!("{:?}", cli.command);
    };
    assert_eq!(
        (
            args.name.as_deref(),
            args.proxy_only,
            args.port,
            args.address.as_str()
        ),
        (Some("testvmi"), true, 5901, "0.0.0.0")
    );
    assert_eq!(cli.namespace.as_deref(), Some("ns1"));
    // A bool flag takes its value after `=` only, as cobra's do.
    let cli = parse(&["vnc", "--proxy-only=false", "--preserve-session", "testvmi"]);
    let Command::Vnc(args) = &cli.command else {
        panic!("{:?}", cli.command);
    };
    assert!(!args.proxy_only && args.preserve_session);
    let cli = parse(&[
        "vnc",
        "testvmi",
        "--vnc-type=remote-viewer",
        "--vnc-path",
        "/opt/rv",
    ]);
    let Command::Vnc(args) = &cli.command else {
        panic!("{:?}", cli.command);
    };
    assert_eq!(args.vnc_type, Some(VncType::RemoteViewer));
    assert_eq!(
        args.vnc_path.as_deref(),
        Some(std::path::Path::new("/opt/rv"))
    );
    for bad in [
        &["vnc"][..],
        &["vnc", "x", "--vnc-type=vnc"],
        &["vnc", "x", "--port=70000"],
        &["vnc", "x", "--port=-1"],
    ] {
        assert!(
            Cli::try_parse_from(std::iter::once("virtctl").chain(bad.iter().copied())).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn vnc_screenshot_gets_the_png_with_kubevirts_flags() {
    let c = call(&["vnc", "screenshot", "testvmi", "-f", "shot.png"]);
    assert_eq!(c.method, Method::GET);
    assert_eq!(
        c.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/testvmi/vnc/screenshot?moveCursor=false"
    );
    assert_eq!(c.failure, "Can't access VMI testvmi:");
    let c = call(&[
        "vnc",
        "screenshot",
        "-m",
        "testvmi",
        "--file=-",
        "-n",
        "ns1",
    ]);
    assert_eq!(
        c.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/ns1/virtualmachineinstances/testvmi/vnc/screenshot?moveCursor=true"
    );
    let cli = parse(&[
        "vnc",
        "screenshot",
        "testvmi",
        "--move-cursor=false",
        "-f",
        "-",
    ]);
    let Command::Vnc(VncArgs {
        command: Some(VncCommand::Screenshot(args)),
        name: None,
        ..
    }) = &cli.command
    else {
        panic!("{:?}", cli.command);
    };
    assert_eq!(
        args,
        &ScreenshotArgs {
            name: "testvmi".into(),
            file: "-".into(),
            move_cursor: false,
        }
    );
    // --file is required, as in KubeVirt's.
    assert!(Cli::try_parse_from(["virtctl", "vnc", "screenshot", "testvmi"]).is_err());
    assert!(Cli::try_parse_from(["virtctl", "vnc", "screenshot", "-f", "x.png"]).is_err());
}
