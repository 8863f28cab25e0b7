//! `virtctl vnc`: the VMI's screen through a local VNC viewer, as KubeVirt's virtctl does it.
//!
//! 1. Connect: a WebSocket (`plain.kubevirt.io`) to the VMI's `vnc` subresource through
//!    kube-apiserver ([`crate::websocket`], as `console` does), carrying the VM's VNC (RFB)
//!    byte stream both ways. A refusal ends it at once: `can't access VMI NAME: MESSAGE`.
//! 2. Listen on `--address`:`--port` (port 0: any free port) for one VNC client.
//! 3. `--proxy-only`: print `{"port":PORT}` and wait for a client as long as it takes.
//!    Otherwise start a VNC viewer on `127.0.0.1:PORT` (`--vnc-type`/`--vnc-path`, else the
//!    first of [`REMOTE_VIEWER`] and [`TIGER_VNC`] in `$PATH`; on macOS the TigerVNC, Chicken
//!    and RealVNC apps first), which must connect within [`LISTEN_TIMEOUT`].
//! 4. Relay that one connection; the listener then takes no other. virtctl ends, exit 0, when
//!    the client closes its connection, the server closes the WebSocket normally, the viewer
//!    exits, or on Ctrl+C; with an error (`error encountered: ...`, exit 1) when a copy fails,
//!    the WebSocket breaks, no viewer is found, or none connects in time.
//!
//! `virtctl vnc screenshot` is one GET of `vnc/screenshot?moveCursor=...` ([`crate::cli::plan`]);
//! the PNG goes to `--file` (`-`: stdout) ([`write_screenshot`]).

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kube::Client;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use virt_api::routes::{subresource_path, Subresource};

use crate::cli::{ApiCall, VncArgs, VncType};
use crate::websocket::{open_websocket, relay};

/// How long a started viewer has to connect (KubeVirt's).
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(60);
/// virt-viewer's VNC (and SPICE) client.
pub const REMOTE_VIEWER: &str = "remote-viewer";
/// TigerVNC's viewer.
pub const TIGER_VNC: &str = "vncviewer";
/// TigerVNC 1.16 and later on macOS.
pub const MACOS_TIGER_VNC: &str = "/Applications/TigerVNC.app/Contents/MacOS/vncviewer";
/// Earlier TigerVNC apps on macOS: `/Applications/TigerVNC Viewer VERSION.app`, this inside.
const MACOS_TIGER_VNC_LEGACY: (&str, &str, &str) =
    ("TigerVNC Viewer ", ".app", "Contents/MacOS/TigerVNC Viewer");
/// Chicken on macOS.
pub const MACOS_CHICKEN_VNC: &str = "/Applications/Chicken.app/Contents/MacOS/Chicken";
/// RealVNC's viewer on macOS.
pub const MACOS_REAL_VNC: &str = "/Applications/VNC Viewer.app/Contents/MacOS/vncviewer";
/// Where macOS apps are.
const APPLICATIONS: &str = "/Applications";
/// The address a started viewer connects to (the listener's, which must then be this one).
const LOOPBACK: &str = "127.0.0.1";
/// Where the not-found messages point.
const PROXY_ONLY_HINT: &str = "install one, or run `virtctl vnc VMI --proxy-only` and connect \
                               a VNC viewer to the port it prints";

/// Which viewer to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewerChoice {
    /// The first found, in KubeVirt's order.
    Auto,
    /// `--vnc-type`, at `--vnc-path` or found in `$PATH`.
    Given {
        kind: VncType,
        path: Option<PathBuf>,
    },
}

/// `virtctl vnc`'s flags, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub address: String,
    pub port: u16,
    pub proxy_only: bool,
    pub viewer: ViewerChoice,
}

impl Options {
    /// Checks the flags before anything is connected, refusing those that cannot be honoured
    /// (`macos`: the viewers of macOS are allowed).
    pub fn from_args(args: &VncArgs, macos: bool) -> Result<Options, String> {
        if !args.extra.is_empty() {
            return Err(format!(
                "accepts 1 arg(s), received {}",
                1 + args.extra.len()
            ));
        }
        if args.preserve_session {
            return Err(
                "--preserve-session is not supported by ferrovirt's virtctl: \
                        ferrovirt's vnc subresource cannot refuse a connection while another \
                        VNC session is open"
                    .into(),
            );
        }
        let viewer = match (args.vnc_type, &args.vnc_path) {
            (None, None) => ViewerChoice::Auto,
            (None, Some(_)) => {
                return Err(
                    "--vnc-path needs --vnc-type (tiger, chicken, real, remote-viewer), \
                            which says how to pass the address to the viewer"
                        .into(),
                )
            }
            (Some(kind), path) => {
                if !macos && matches!(kind, VncType::Chicken | VncType::Real) {
                    return Err(format!(
                        "unsupported vnc-type for {}: {}",
                        std::env::consts::OS,
                        type_name(kind)
                    ));
                }
                ViewerChoice::Given {
                    kind,
                    path: path.clone(),
                }
            }
        };
        if args.proxy_only {
            if viewer != ViewerChoice::Auto {
                return Err(
                    "--vnc-type and --vnc-path choose the viewer virtctl starts, and with \
                     --proxy-only it starts none"
                        .into(),
                );
            }
        } else if args.address != LOOPBACK {
            return Err(format!(
                "--address={} needs --proxy-only: without it virtctl starts a VNC viewer, \
                 which connects on {LOOPBACK}",
                args.address
            ));
        }
        Ok(Options {
            address: args.address.clone(),
            port: args.port,
            proxy_only: args.proxy_only,
            viewer,
        })
    }
}

/// `--vnc-type`'s word for a viewer.
fn type_name(kind: VncType) -> &'static str {
    match kind {
        VncType::Tiger => "tiger",
        VncType::Chicken => "chicken",
        VncType::Real => "real",
        VncType::RemoteViewer => "remote-viewer",
    }
}

/// A viewer to start: its program and arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Viewer {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// What finding a viewer looks at (the host's; a test's in tests).
pub trait Lookup {
    /// The executable `program` in `$PATH` (or at that path if it has a `/`).
    fn in_path(&self, program: &str) -> Option<PathBuf>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// The names in macOS's `/Applications`.
    fn applications(&self) -> Vec<String>;
}

/// The host: `$PATH` and the file system.
pub struct Host;

impl Lookup for Host {
    fn in_path(&self, program: &str) -> Option<PathBuf> {
        find_in_path(program, std::env::var_os("PATH").as_deref())
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn applications(&self) -> Vec<String> {
        std::fs::read_dir(APPLICATIONS)
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The executable `program` in the directories of `path` (`$PATH`'s value); a `program` with
/// a `/` is looked at where it says.
pub fn find_in_path(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |candidate: &Path| {
        std::fs::metadata(candidate)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let candidate = PathBuf::from(program);
        return executable(&candidate).then_some(candidate);
    }
    std::env::split_paths(path?)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                PathBuf::from(".").join(program)
            } else {
                dir.join(program)
            }
        })
        .find(|candidate| executable(candidate))
}

/// The arguments each viewer takes to connect to `127.0.0.1:port`.
fn viewer_args(kind: VncType, port: u16) -> Vec<String> {
    match kind {
        // `host::port` (two colons): always a port, where `host:N` is a display below 100.
        VncType::Tiger => vec![format!("{LOOPBACK}::{port}")],
        VncType::Chicken => vec![format!("{LOOPBACK}:{port}")],
        VncType::Real => vec![
            format!("{LOOPBACK}:{port}"),
            "-WarnUnencrypted=0".into(),
            "-Shared=0".into(),
            "-ShareFiles=0".into(),
        ],
        VncType::RemoteViewer => vec![format!("vnc://{LOOPBACK}:{port}")],
    }
}

/// The viewer to start for a proxy on `port`, in KubeVirt's order of preference.
pub fn find_viewer(
    choice: &ViewerChoice,
    macos: bool,
    port: u16,
    lookup: &impl Lookup,
) -> Result<Viewer, String> {
    let found = |kind: VncType, program: PathBuf| Viewer {
        program,
        args: viewer_args(kind, port),
    };
    match choice {
        ViewerChoice::Given {
            kind,
            path: Some(path),
        } => {
            if !lookup.exists(path) {
                return Err(format!(
                    "specified VNC path does not exist: {}",
                    path.display()
                ));
            }
            Ok(found(*kind, path.clone()))
        }
        ViewerChoice::Given { kind, path: None } => {
            let program = match kind {
                VncType::Tiger => TIGER_VNC,
                VncType::RemoteViewer => REMOTE_VIEWER,
                VncType::Chicken => MACOS_CHICKEN_VNC,
                VncType::Real => MACOS_REAL_VNC,
            };
            lookup
                .in_path(program)
                .map(|path| found(*kind, path))
                .ok_or_else(|| format!("could not find {program} in $PATH; {PROXY_ONLY_HINT}"))
        }
        ViewerChoice::Auto if macos => {
            let (prefix, suffix, inside) = MACOS_TIGER_VNC_LEGACY;
            let mut legacy: Vec<String> = lookup
                .applications()
                .into_iter()
                .filter(|name| name.starts_with(prefix) && name.ends_with(suffix))
                .collect();
            legacy.sort();
            if lookup.exists(Path::new(MACOS_TIGER_VNC)) {
                Ok(found(VncType::Tiger, MACOS_TIGER_VNC.into()))
            } else if let Some(app) = legacy.last() {
                let program = Path::new(APPLICATIONS).join(app).join(inside);
                Ok(found(VncType::Tiger, program))
            } else if lookup.exists(Path::new(MACOS_CHICKEN_VNC)) {
                Ok(found(VncType::Chicken, MACOS_CHICKEN_VNC.into()))
            } else if lookup.exists(Path::new(MACOS_REAL_VNC)) {
                Ok(found(VncType::Real, MACOS_REAL_VNC.into()))
            } else if let Some(program) = lookup.in_path(REMOTE_VIEWER) {
                Ok(found(VncType::RemoteViewer, program))
            } else {
                Err(format!(
                    "no supported VNC app found for darwin (TigerVNC, Chicken or VNC Viewer in \
                     {APPLICATIONS}, or {REMOTE_VIEWER} in $PATH); {PROXY_ONLY_HINT}"
                ))
            }
        }
        ViewerChoice::Auto => {
            if let Some(program) = lookup.in_path(REMOTE_VIEWER) {
                Ok(found(VncType::RemoteViewer, program))
            } else if let Some(program) = lookup.in_path(TIGER_VNC) {
                Ok(found(VncType::Tiger, program))
            } else {
                Err(format!(
                    "could not find {REMOTE_VIEWER} or {TIGER_VNC} binary in $PATH; \
                     {PROXY_ONLY_HINT}"
                ))
            }
        }
    }
}

/// Runs the viewer until it exits; its output is kept and shown if it fails. Dropping the
/// future kills it.
async fn run_viewer(viewer: Viewer) -> Result<(), String> {
    let program = viewer.program.display().to_string();
    let output = tokio::process::Command::new(&viewer.program)
        .args(&viewer.args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("{program} execution failed: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Err(format!(
        "{program} execution failed: {}, output: {}",
        output.status,
        text.trim_end()
    ))
}

/// Resolves on Ctrl+C (never, if it cannot be watched).
async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The proxy: relays the WebSocket `stream` (opened already, as KubeVirt's virtctl does) to the
/// first client of `listener` and takes no other. `accept_timeout` bounds the wait for that
/// client; `viewer` and `interrupt` end it when they resolve; `connected` is spawned once the
/// client is in.
pub async fn proxy<S, V, I, C>(
    listener: TcpListener,
    stream: S,
    accept_timeout: Option<Duration>,
    viewer: V,
    interrupt: I,
    connected: C,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
    V: Future<Output = Result<(), String>>,
    I: Future<Output = ()>,
    C: Future<Output = ()> + Send + 'static,
{
    let encountered = |e: String| format!("error encountered: {e}");
    // The WebSocket is relayed at once to one end of a pipe; the client, once in, is copied to
    // the other. Until then the server's first bytes (its RFB greeting) wait in the pipe, and a
    // WebSocket that ends is seen.
    let (pipe, relayed) = tokio::io::duplex(64 * 1024);
    let (relayed_read, relayed_write) = tokio::io::split(relayed);
    let mut relay = AbortOnDrop(tokio::spawn(relay(stream, relayed_read, relayed_write)));
    let relay_ended = |joined: Result<crate::websocket::Ended, tokio::task::JoinError>| {
        joined
            .map_err(|e| encountered(e.to_string()))?
            .result()
            .map_err(encountered)
    };
    tokio::pin!(viewer, interrupt);
    let accept = async {
        match accept_timeout {
            Some(limit) => tokio::time::timeout(limit, listener.accept())
                .await
                .map_err(|_| {
                    format!(
                        "no VNC client connected to {} within {limit:?}",
                        listener
                            .local_addr()
                            .map(|a| a.to_string())
                            .unwrap_or_default()
                    )
                })?
                .map_err(|e| e.to_string()),
            None => listener.accept().await.map_err(|e| e.to_string()),
        }
    };
    let mut client = tokio::select! {
        accepted = accept => accepted.map_err(encountered)?.0,
        joined = &mut relay.0 => return relay_ended(joined),
        ended = &mut viewer => return ended.map_err(encountered),
        () = &mut interrupt => return Ok(()),
    };
    drop(listener);
    let _warning = AbortOnDrop(tokio::spawn(connected));
    let mut pipe = pipe;
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut pipe) => {
            copied.map(|_| ()).map_err(|e| encountered(e.to_string()))
        }
        joined = &mut relay.0 => relay_ended(joined),
        ended = &mut viewer => ended.map_err(encountered),
        () = &mut interrupt => Ok(()),
    }
}

/// `virtctl vnc VMI`: connects, listens, prints the port or starts the viewer, and proxies.
pub async fn run(
    client: &Client,
    namespace: &str,
    name: &str,
    options: &Options,
) -> Result<(), String> {
    let path = subresource_path(namespace, name, Subresource::Vnc);
    let stream = open_websocket(client, &path)
        .await
        .map_err(|e| format!("can't access VMI {name}: {e}"))?;
    let listener = TcpListener::bind((options.address.as_str(), options.port))
        .await
        .map_err(|e| format!("can't listen on {}:{}: {e}", options.address, options.port))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("can't listen on {}: {e}", options.address))?
        .port();
    let viewer = if options.proxy_only {
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "{}", serde_json::json!({ "port": port }));
        let _ = stdout.flush();
        None
    } else {
        let macos = cfg!(target_os = "macos");
        Some(
            find_viewer(&options.viewer, macos, port, &Host)
                .map_err(|e| format!("error encountered: {e}"))?,
        )
    };
    let accept_timeout = viewer.as_ref().map(|_| LISTEN_TIMEOUT);
    let viewer = async move {
        match viewer {
            Some(viewer) => run_viewer(viewer).await,
            None => std::future::pending().await,
        }
    };
    let warning = warn_if_paused(client.clone(), namespace.to_string(), name.to_string());
    proxy(
        listener,
        TokioIo::new(stream),
        accept_timeout,
        viewer,
        interrupted(),
        warning,
    )
    .await
}

/// Whether a VMI (as JSON) is paused.
pub fn is_paused(vmi: &serde_json::Value) -> bool {
    vmi["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Paused" && c["status"] != "False")
        })
}

/// KubeVirt's warning once a client is in, when the VMI is paused (its screen then stands
/// still).
async fn warn_if_paused(client: Client, namespace: String, name: String) {
    let call = ApiCall {
        method: http::Method::GET,
        path: format!("/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}"),
        body: Vec::new(),
        success: None,
        failure: String::new(),
    };
    let Ok(body) = crate::client::send(&client, &call).await else {
        return;
    };
    let vmi = serde_json::from_str(&body).unwrap_or_default();
    if is_paused(&vmi) {
        eprint!("\rWarning: {name} is paused. Console will be active after unpause.\n");
    }
}

/// Writes a screenshot to `file`, or to `stdout` when `file` is `-`, with KubeVirt's messages.
pub fn write_screenshot(file: &str, png: &[u8], stdout: &mut dyn Write) -> Result<(), String> {
    if file == "-" {
        return stdout
            .write_all(png)
            .and_then(|()| stdout.flush())
            .map_err(|e| format!("failed to write image to stdout: {e}"));
    }
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(file)
        .and_then(|mut f| f.write_all(png))
        .map_err(|e| format!("Can't write image to a file: {file}: {e}"))
}

#[cfg(test)]
#[path = "vnc_tests.rs"]
mod tests;
