use std::collections::HashMap;

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use virt_api::websocket::{read_frame, write_frame, OP_BINARY, OP_CLOSE};

use super::*;
use crate::cli::{Cli, Command};

fn vnc_args(args: &[&str]) -> VncArgs {
    let cli = Cli::try_parse_from(["virtctl", "vnc"].iter().chain(args)).unwrap();
    match cli.command {
        Command::Vnc(args) => args,
        other => panic!("{other:?}"),
    }
}

fn options(args: &[&str]) -> Result<Options, String> {
    Options::from_args(&vnc_args(args), false)
}

#[test]
fn flags_that_cannot_be_honoured_are_refused() {
    assert_eq!(
        options(&["vm1"]),
        Ok(Options {
            address: "127.0.0.1".into(),
            port: 0,
            proxy_only: false,
            viewer: ViewerChoice::Auto,
        })
    );
    let proxy = options(&["vm1", "--proxy-only", "--address=0.0.0.0", "--port", "5901"]).unwrap();
    assert_eq!((proxy.address.as_str(), proxy.port), ("0.0.0.0", 5901));
    assert!(proxy.proxy_only);
    assert_eq!(
        options(&["vm1", "vm2"]).unwrap_err(),
        "accepts 1 arg(s), received 2"
    );
    assert!(options(&["vm1", "--preserve-session"])
        .unwrap_err()
        .starts_with("--preserve-session is not supported"));
    assert!(options(&["vm1", "--preserve-session=false"]).is_ok());
    assert!(options(&["vm1", "--address", "0.0.0.0"])
        .unwrap_err()
        .starts_with("--address=0.0.0.0 needs --proxy-only"));
    assert!(options(&["vm1", "--vnc-path", "/usr/bin/vncviewer"])
        .unwrap_err()
        .starts_with("--vnc-path needs --vnc-type"));
    assert!(options(&["vm1", "--proxy-only", "--vnc-type=tiger"])
        .unwrap_err()
        .contains("with --proxy-only it starts none"));
    assert_eq!(
        options(&["vm1", "--vnc-type=chicken"]).unwrap_err(),
        format!("unsupported vnc-type for {}: chicken", std::env::consts::OS)
    );
    let mac = Options::from_args(&vnc_args(&["vm1", "--vnc-type=real"]), true).unwrap();
    assert_eq!(
        mac.viewer,
        ViewerChoice::Given {
            kind: VncType::Real,
            path: None
        }
    );
    let given = options(&[
        "vm1",
        "--vnc-type",
        "remote-viewer",
        "--vnc-path",
        "/opt/rv",
    ])
    .unwrap();
    assert_eq!(
        given.viewer,
        ViewerChoice::Given {
            kind: VncType::RemoteViewer,
            path: Some("/opt/rv".into())
        }
    );
}

/// A host with these programs in `$PATH`, these files and these apps.
#[derive(Default)]
struct FakeHost {
    path: HashMap<&'static str, &'static str>,
    files: Vec<&'static str>,
    apps: Vec<&'static str>,
}

impl Lookup for FakeHost {
    fn in_path(&self, program: &str) -> Option<PathBuf> {
        self.path.get(program).map(PathBuf::from)
    }
    fn exists(&self, path: &Path) -> bool {
        self.files.iter().any(|f| Path::new(f) == path)
    }
    fn applications(&self) -> Vec<String> {
        self.apps.iter().map(|a| a.to_string()).collect()
    }
}

fn viewer(program: &str, args: &[&str]) -> Viewer {
    Viewer {
        program: program.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

#[test]
fn viewers_are_looked_for_in_kubevirts_order() {
    let both = FakeHost {
        path: HashMap::from([
            ("remote-viewer", "/usr/bin/remote-viewer"),
            ("vncviewer", "/usr/bin/vncviewer"),
        ]),
        ..Default::default()
    };
    assert_eq!(
        find_viewer(&ViewerChoice::Auto, false, 41000, &both),
        Ok(viewer("/usr/bin/remote-viewer", &["vnc://127.0.0.1:41000"]))
    );
    let tiger = FakeHost {
        path: HashMap::from([("vncviewer", "/usr/bin/vncviewer")]),
        ..Default::default()
    };
    assert_eq!(
        find_viewer(&ViewerChoice::Auto, false, 41000, &tiger),
        Ok(viewer("/usr/bin/vncviewer", &["127.0.0.1::41000"]))
    );
    let none = find_viewer(&ViewerChoice::Auto, false, 41000, &FakeHost::default()).unwrap_err();
    assert!(
        none.starts_with("could not find remote-viewer or vncviewer binary in $PATH"),
        "{none}"
    );
    assert!(none.contains("--proxy-only"), "{none}");

    // Given: at --vnc-path, which must exist, or the type's program in $PATH.
    let given = |kind, path: Option<&str>| ViewerChoice::Given {
        kind,
        path: path.map(PathBuf::from),
    };
    let host = FakeHost {
        files: vec!["/opt/tiger/vncviewer"],
        ..Default::default()
    };
    assert_eq!(
        find_viewer(
            &given(VncType::Tiger, Some("/opt/tiger/vncviewer")),
            false,
            5,
            &host
        ),
        Ok(viewer("/opt/tiger/vncviewer", &["127.0.0.1::5"]))
    );
    assert_eq!(
        find_viewer(&given(VncType::Tiger, Some("/nope")), false, 5, &host),
        Err("specified VNC path does not exist: /nope".into())
    );
    assert!(find_viewer(&given(VncType::Tiger, None), false, 5, &host)
        .unwrap_err()
        .starts_with("could not find vncviewer in $PATH"));
    assert_eq!(
        find_viewer(&given(VncType::RemoteViewer, None), false, 5, &both),
        Ok(viewer("/usr/bin/remote-viewer", &["vnc://127.0.0.1:5"]))
    );
}

#[test]
fn macos_apps_come_before_path() {
    let legacy = FakeHost {
        apps: vec![
            "TigerVNC Viewer 1.12.0.app",
            "TigerVNC Viewer 1.15.0.app",
            "Safari.app",
        ],
        files: vec![MACOS_CHICKEN_VNC],
        path: HashMap::from([("remote-viewer", "/opt/homebrew/bin/remote-viewer")]),
    };
    assert_eq!(
        find_viewer(&ViewerChoice::Auto, true, 6000, &legacy),
        Ok(viewer(
            "/Applications/TigerVNC Viewer 1.15.0.app/Contents/MacOS/TigerVNC Viewer",
            &["127.0.0.1::6000"]
        ))
    );
    let current = FakeHost {
        files: vec![MACOS_TIGER_VNC, MACOS_REAL_VNC],
        ..Default::default()
    };
    assert_eq!(
        find_viewer(&ViewerChoice::Auto, true, 6000, &current).map(|v| v.program),
        Ok(PathBuf::from(MACOS_TIGER_VNC))
    );
    let real = FakeHost {
        files: vec![MACOS_REAL_VNC],
        ..Default::default()
    };
    assert_eq!(
        find_viewer(&ViewerChoice::Auto, true, 6000, &real),
        Ok(viewer(
            MACOS_REAL_VNC,
            &[
                "127.0.0.1:6000",
                "-WarnUnencrypted=0",
                "-Shared=0",
                "-ShareFiles=0"
            ]
        ))
    );
    assert!(
        find_viewer(&ViewerChoice::Auto, true, 6000, &FakeHost::default())
            .unwrap_err()
            .starts_with("no supported VNC app found for darwin")
    );
}

/// A directory of its own under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("virtctl-vnc-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn path_search_finds_executables_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("path");
    let (first, second) = (dir.0.join("a"), dir.0.join("b"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(first.join("vncviewer"), "not executable").unwrap();
    std::fs::write(second.join("vncviewer"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        second.join("vncviewer"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let path = std::env::join_paths([&first, &second]).unwrap();
    assert_eq!(
        find_in_path("vncviewer", Some(&path)),
        Some(second.join("vncviewer"))
    );
    assert_eq!(find_in_path("remote-viewer", Some(&path)), None);
    assert_eq!(find_in_path("vncviewer", None), None);
    let direct = second.join("vncviewer");
    assert_eq!(
        find_in_path(direct.to_str().unwrap(), None),
        Some(direct.clone())
    );
}

async fn local_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

fn pending_viewer() -> impl Future<Output = Result<(), String>> {
    std::future::pending()
}

/// One VNC client through the proxy to a VNC server played by the test over a WebSocket: the
/// server's greeting waits for the client, bytes go both ways, a second client is refused, and
/// the client closing its connection ends the proxy (exit 0) with a close frame to the server.
#[tokio::test]
async fn proxies_one_client_to_the_websocket() {
    let (listener, port) = local_listener().await;
    let (client_side, mut server) = tokio::io::duplex(1 << 16);
    let (connected_tx, connected_rx) = tokio::sync::oneshot::channel();
    let proxy = tokio::spawn(proxy(
        listener,
        client_side,
        None,
        pending_viewer(),
        std::future::pending(),
        async move {
            let _ = connected_tx.send(());
        },
    ));
    write_frame(&mut server, OP_BINARY, b"RFB 003.008\n", None)
        .await
        .unwrap();
    let mut vnc = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut greeting = [0u8; 12];
    vnc.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"RFB 003.008\n");
    connected_rx.await.unwrap();
    vnc.write_all(b"RFB 003.008\n").await.unwrap();
    let frame = read_frame(&mut server).await.unwrap().unwrap();
    assert_eq!(
        (frame.opcode, frame.payload.as_slice()),
        (OP_BINARY, &b"RFB 003.008\n"[..])
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).await.is_err(),
        "a second client is refused"
    );
    drop(vnc);
    let close = read_frame(&mut server).await.unwrap().unwrap();
    assert_eq!(close.opcode, OP_CLOSE);
    assert_eq!(proxy.await.unwrap(), Ok(()));
}

/// The server ending the stream ends the proxy: normally before any client came (exit 0),
/// with KubeVirt's error when the connection breaks while a client is in.
#[tokio::test]
async fn the_server_ending_the_stream_ends_the_proxy() {
    let (listener, _) = local_listener().await;
    let (client_side, mut server) = tokio::io::duplex(1 << 16);
    let proxy_task = tokio::spawn(proxy(
        listener,
        client_side,
        None,
        pending_viewer(),
        std::future::pending(),
        async {},
    ));
    write_frame(&mut server, OP_CLOSE, &[0x03, 0xe8], None)
        .await
        .unwrap();
    assert_eq!(proxy_task.await.unwrap(), Ok(()));

    let (listener, port) = local_listener().await;
    let (client_side, mut server) = tokio::io::duplex(1 << 16);
    let proxy_task = tokio::spawn(proxy(
        listener,
        client_side,
        None,
        pending_viewer(),
        std::future::pending(),
        async {},
    ));
    let mut vnc = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    vnc.write_all(b"x").await.unwrap();
    // The client's byte reaching the server says the relay runs: now the connection breaks.
    let frame = read_frame(&mut server).await.unwrap().unwrap();
    assert_eq!(frame.payload, b"x");
    drop(server);
    assert_eq!(
        proxy_task.await.unwrap(),
        Err("error encountered: websocket: close 1006 (abnormal closure): unexpected EOF".into())
    );
}

/// With a viewer: it must connect in time, and its exit (or Ctrl+C) ends the proxy.
#[tokio::test]
async fn a_viewer_must_connect_in_time_and_its_exit_ends_it() {
    let (listener, port) = local_listener().await;
    let (client_side, _server) = tokio::io::duplex(1 << 16);
    let ended = proxy(
        listener,
        client_side,
        Some(Duration::from_millis(100)),
        pending_viewer(),
        std::future::pending(),
        async {},
    )
    .await;
    assert_eq!(
        ended,
        Err(format!(
            "error encountered: no VNC client connected to 127.0.0.1:{port} within 100ms"
        ))
    );

    let (listener, _) = local_listener().await;
    let (client_side, _server) = tokio::io::duplex(1 << 16);
    let failed = proxy(
        listener,
        client_side,
        Some(LISTEN_TIMEOUT),
        async { Err("vncviewer execution failed: exit status: 1, output: bad".to_string()) },
        std::future::pending(),
        async {},
    )
    .await;
    assert_eq!(
        failed,
        Err("error encountered: vncviewer execution failed: exit status: 1, output: bad".into())
    );

    let (listener, _) = local_listener().await;
    let (client_side, _server) = tokio::io::duplex(1 << 16);
    let interrupted = proxy(
        listener,
        client_side,
        None,
        pending_viewer(),
        async {},
        async {},
    )
    .await;
    assert_eq!(interrupted, Ok(()));
}

#[tokio::test]
async fn a_viewer_that_runs_and_exits() {
    assert_eq!(run_viewer(viewer("true", &[])).await, Ok(()));
    let failed = run_viewer(viewer("sh", &["-c", "echo cannot connect >&2; exit 3"]))
        .await
        .unwrap_err();
    assert!(failed.starts_with("sh execution failed: "), "{failed}");
    assert!(failed.ends_with("output: cannot connect"), "{failed}");
    assert!(run_viewer(viewer("/nonexistent/viewer", &[]))
        .await
        .unwrap_err()
        .starts_with("/nonexistent/viewer execution failed: "));
}

#[test]
fn paused_vmis_are_seen() {
    let paused = serde_json::json!({"status": {"conditions": [
        {"type": "Ready", "status": "False"},
        {"type": "Paused", "status": "True"}
    ]}});
    assert!(is_paused(&paused));
    let running =
        serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    assert!(!is_paused(&running));
    assert!(!is_paused(&serde_json::json!({})));
}

#[test]
fn screenshots_go_to_the_file_or_stdout() {
    use std::os::unix::fs::PermissionsExt;
    let png = b"\x89PNG\r\n\x1a\n....";
    let mut stdout = Vec::new();
    write_screenshot("-", png, &mut stdout).unwrap();
    assert_eq!(stdout, png);

    let dir = TempDir::new("shot");
    let file = dir.0.join("screenshot.png");
    std::fs::write(&file, "an older, longer screenshot").unwrap();
    write_screenshot(file.to_str().unwrap(), png, &mut stdout).unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), png);
    let fresh = dir.0.join("fresh.png");
    write_screenshot(fresh.to_str().unwrap(), png, &mut stdout).unwrap();
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & !0o644, 0, "{mode:o}");

    let missing = dir.0.join("no/such/dir.png");
    let error = write_screenshot(missing.to_str().unwrap(), png, &mut stdout).unwrap_err();
    assert!(
        error.starts_with(&format!(
            "Can't write image to a file: {}: ",
            missing.display()
        )),
        "{error}"
    );
}
