//! Test harness for driving the `virt-launcher` binary as virt-handler does: its directories,
//! the process (killed with its QEMU child, whatever the test does), a gRPC client, a Notify
//! server that records domain events, and a console reader with deadlines.
#![allow(dead_code)]

pub mod cloud_image;
pub mod debian_cloud;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use contract::proto::v1;
use guest_images::artifacts::{Artifacts, BUILD_COMMAND};
use tokio::sync::mpsc;
use tonic::transport::Channel;

pub const LAUNCHER: &str = env!("CARGO_BIN_EXE_virt-launcher");

/// The guest images, or a failure that names the command that builds them.
pub fn artifacts() -> Artifacts {
    match Artifacts::locate() {
        Ok(artifacts) => artifacts,
        Err(e) => panic!("{e} (run `{BUILD_COMMAND}` as root)"),
    }
}

/// QEMU must be installed: the test fails, naming what installs it, when it is not.
/// The VMI of the launcher's QEMU tests, the shape of KubeVirt's `vmi-nocloud.yaml` example
/// written out here: a containerDisk root, a cloudInitNoCloud seed whose userData is
/// `user_data`, a 2 GiB emptyDisk, 128 MiB, no grace period, no pod interface (the pod network
/// needs a network namespace of its own: tests/network.rs covers it).
pub fn nocloud_vmi(uid: &str, user_data: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": "vmi-nocloud",
            "namespace": "default",
            "uid": uid,
            "labels": { "special": "vmi-nocloud" }
        },
        "spec": {
            "domain": {
                "devices": {
                    "autoattachPodInterface": false,
                    "disks": [
                        { "name": "containerdisk", "disk": { "bus": "virtio" } },
                        { "name": "cloudinitdisk", "disk": { "bus": "virtio" } },
                        { "name": "emptydisk", "disk": { "bus": "virtio" } }
                    ]
                },
                "memory": { "guest": "128Mi" },
                "resources": {}
            },
            "terminationGracePeriodSeconds": 0,
            "volumes": [
                { "name": "containerdisk",
                  "containerDisk": { "image": "registry:5000/kubevirt/cirros-container-disk-demo:devel" } },
                { "name": "cloudinitdisk", "cloudInitNoCloud": { "userData": user_data } },
                { "name": "emptydisk", "emptyDisk": { "capacity": "2Gi" } }
            ]
        }
    })
}

pub fn require_qemu() {
    assert!(
        launcher::backend::qemu::find_in_path("qemu-system-x86_64").is_some(),
        "qemu-system-x86_64 is not in PATH: run `{BUILD_COMMAND}` as root (it installs the Debian \
         package qemu-system-x86)"
    );
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The launcher's directories, under a short path (unix socket paths are limited); removed on
/// drop.
pub struct TestDirs {
    pub root: PathBuf,
}

impl TestDirs {
    pub fn new(name: &str) -> TestDirs {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let root = PathBuf::from(format!("/tmp/fvl-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for sub in ["sockets", "run", "cd", "kb", "pvc", "disks"] {
            std::fs::create_dir_all(root.join(sub)).expect("create test directory");
        }
        TestDirs { root }
    }

    pub fn sockets(&self) -> PathBuf {
        self.root.join("sockets")
    }

    /// Mounts (symlinks) `image` as containerDisk volume `volume`, at `disk/disk.img`.
    pub fn container_disk(&self, volume: &str, image: &Path) {
        let dir = self.root.join("cd").join(volume).join("disk");
        std::fs::create_dir_all(&dir).expect("create containerDisk mount");
        std::os::unix::fs::symlink(image, dir.join("disk.img")).expect("link containerDisk");
    }
}

impl Drop for TestDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The launcher process, in its own process group so that its QEMU dies with it.
pub struct LauncherProcess {
    child: Child,
    pub log: PathBuf,
}

impl LauncherProcess {
    /// Starts `virt-launcher` with the test directories, the guest kernel and `extra` flags,
    /// and waits (with a deadline) for its gRPC socket.
    pub fn start(
        dirs: &TestDirs,
        kernel: &Path,
        initramfs: Option<&Path>,
        extra: &[&str],
    ) -> LauncherProcess {
        Self::start_with_env(dirs, kernel, initramfs, extra, &[])
    }

    /// [`Self::start`] with the project's guest kernel and initramfs, no extra flags.
    pub fn start_with_guest(dirs: &TestDirs, artifacts: &Artifacts) -> LauncherProcess {
        Self::start(
            dirs,
            &artifacts.vmlinux(),
            Some(&artifacts.initramfs()),
            &[],
        )
    }

    /// [`Self::start`] with extra environment variables.
    pub fn start_with_env(
        dirs: &TestDirs,
        kernel: &Path,
        initramfs: Option<&Path>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> LauncherProcess {
        Self::start_in(None, dirs, kernel, initramfs, extra, env)
    }

    /// [`Self::start_with_env`] inside network namespace `netns` (`ip netns exec`), when given.
    pub fn start_in(
        netns: Option<&str>,
        dirs: &TestDirs,
        kernel: &Path,
        initramfs: Option<&Path>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> LauncherProcess {
        Self::start_wrapped(netns, &[], dirs, kernel, initramfs, extra, env)
    }

    /// [`Self::start_in`] with `wrapper` (a program and its arguments that execute the rest in
    /// place, as `setpriv`) before the launcher.
    pub fn start_wrapped(
        netns: Option<&str>,
        wrapper: &[&str],
        dirs: &TestDirs,
        kernel: &Path,
        initramfs: Option<&Path>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> LauncherProcess {
        let log = dirs.root.join("launcher.log");
        let log_file = std::fs::File::create(&log).expect("create launcher log");
        let mut line: Vec<&str> = Vec::new();
        if let Some(netns) = netns {
            line.extend(["ip", "netns", "exec", netns]);
        }
        line.extend(wrapper);
        line.push(LAUNCHER);
        let mut command = Command::new(line[0]);
        command.args(&line[1..]);
        command
            .arg("--socket-dir")
            .arg(dirs.sockets())
            .arg("--run-dir")
            .arg(dirs.root.join("run"))
            .arg("--container-disk-dir")
            .arg(dirs.root.join("cd"))
            .arg("--kernel-boot-dir")
            .arg(dirs.root.join("kb"))
            .arg("--pvc-dir")
            .arg(dirs.root.join("pvc"))
            .arg("--disk-dir")
            .arg(dirs.root.join("disks"))
            .arg("--kernel")
            .arg(kernel)
            .args(extra)
            .env("RUST_LOG", "debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .process_group(0);
        if let Some(initramfs) = initramfs {
            command.arg("--initramfs").arg(initramfs);
        }
        let child = command.spawn().expect("spawn virt-launcher");
        let mut process = LauncherProcess { child, log };
        let socket = dirs.sockets().join(contract::sockets::LAUNCHER_SOCKET);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!("virt-launcher exited ({status}): {}", process.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "no launcher-sock after 30 s: {}",
                process.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        process
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Asserts that every thread of the launcher holds no capability outside `keep` and can
    /// gain none ([`vmm::capabilities::ThreadCapabilities::holds_at_most`]), as it should once
    /// its VM runs, and runs under a seccomp filter (the process-wide one,
    /// [`vmm::seccomp::deny_in_process`], at least); returns how many threads it read.
    /// Asserts that the launcher process holds capability `cap` in none of its sets, the
    /// bounding set included (as in a Pod that does not add it).
    pub fn assert_capabilities_without(&self, cap: u32) {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("the launcher's status: {e}\n{}", self.log_text()));
        let caps = vmm::capabilities::ThreadCapabilities::parse(&status)
            .unwrap_or_else(|| panic!("no capability lines in /proc/{pid}/status"));
        let bit = vmm::capabilities::mask(cap);
        let held =
            caps.effective | caps.permitted | caps.inheritable | caps.ambient | caps.bounding;
        assert_eq!(
            held & bit,
            0,
            "the launcher holds capability {cap}: {caps:?}"
        );
    }

    pub fn assert_confined(&self, keep: u64) -> usize {
        let pid = self.child.id();
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the launcher's threads");
        let mut threads = 0;
        for task in tasks {
            let path = task.expect("a thread").path();
            let Ok(status) = std::fs::read_to_string(path.join("status")) else {
                continue; // the thread ended
            };
            let caps = vmm::capabilities::ThreadCapabilities::parse(&status)
                .unwrap_or_else(|| panic!("no capability lines in {}", path.display()));
            let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            assert!(
                caps.holds_at_most(keep),
                "launcher thread {} ({}) holds more than {keep:#x}: {caps:?}\n{}",
                path.display(),
                name.trim(),
                self.log_text()
            );
            let filtered = status
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Seccomp:", "2"]);
            assert!(
                filtered,
                "launcher thread {} ({}) runs without a seccomp filter:\n{status}",
                path.display(),
                name.trim()
            );
            threads += 1;
        }
        println!(
            "the launcher's {threads} threads hold at most {keep:#x}, gain none, and are filtered"
        );
        threads
    }

    /// Whether the launcher process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for LauncherProcess {
    fn drop(&mut self) {
        // `kill -KILL -- -PGID` (procps); busybox's kill (the nested tier's L1) takes the
        // group as `-KILL -PGID` without the `--`.
        let group = format!("-{}", self.child.id());
        let killed = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        if !killed.is_ok_and(|s| s.success()) {
            let _ = Command::new("kill").args(["-KILL", &group]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn client(dirs: &TestDirs) -> v1::launcher_client::LauncherClient<Channel> {
    contract::client::launcher_client(&dirs.sockets().join(contract::sockets::LAUNCHER_SOCKET))
        .expect("launcher client")
}

/// Records the domain events the launcher pushes.
struct NotifyRecorder {
    events: mpsc::UnboundedSender<v1::Domain>,
}

#[tonic::async_trait]
impl v1::notify_server::Notify for NotifyRecorder {
    async fn domain_event(
        &self,
        request: tonic::Request<v1::DomainEventRequest>,
    ) -> Result<tonic::Response<v1::DomainEventResponse>, tonic::Status> {
        if let Some(domain) = request.into_inner().domain {
            let _ = self.events.send(domain);
        }
        Ok(tonic::Response::new(v1::DomainEventResponse {}))
    }
}

/// Serves `Notify` on `socket` (as virt-handler would); returns the events as they come.
pub fn notify_server(
    socket: &Path,
) -> (
    mpsc::UnboundedReceiver<v1::Domain>,
    tokio::task::JoinHandle<()>,
) {
    let (events, received) = mpsc::unbounded_channel();
    let _ = std::fs::remove_file(socket);
    let listener = tokio::net::UnixListener::bind(socket).expect("bind notify socket");
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(v1::notify_server::NotifyServer::new(NotifyRecorder {
                events,
            }))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
            .await;
    });
    (received, task)
}

/// A reader of `console-sock`: a thread appends everything to a buffer; waits have deadlines.
pub struct ConsoleReader {
    text: Arc<Mutex<String>>,
    input: Mutex<UnixStream>,
}

impl ConsoleReader {
    pub fn connect(dirs: &TestDirs) -> ConsoleReader {
        let mut stream =
            UnixStream::connect(dirs.sockets().join(contract::sockets::CONSOLE_SOCKET))
                .expect("connect console-sock");
        let input = Mutex::new(stream.try_clone().expect("clone console-sock"));
        let text = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&text);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut text) = sink.lock() {
                    text.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
        ConsoleReader { text, input }
    }

    /// Types `text` on the console (bytes a client writes go to the guest's serial port).
    pub fn send(&self, text: &str) {
        let mut input = self.input.lock().expect("console input");
        input
            .write_all(text.as_bytes())
            .expect("write to console-sock");
    }

    pub fn text(&self) -> String {
        self.text.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Waits until the console shows `needle`; the error quotes the console's tail.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            let text = self.text();
            if text.contains(needle) {
                return Ok(start.elapsed());
            }
            if start.elapsed() > timeout {
                let tail: String = text
                    .chars()
                    .rev()
                    .take(3000)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                return Err(format!(
                    "{needle:?} not on the console within {timeout:?}; console tail:\n{tail}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The highest `ferrovirt-tick N` counter printed so far.
    pub fn last_tick(&self) -> Option<u64> {
        self.text()
            .lines()
            .filter_map(|l| l.trim().strip_prefix("ferrovirt-tick "))
            .filter_map(|n| n.trim().parse().ok())
            .max()
    }
}

/// SyncVMI of `vmi_json` with useEmulation (QEMU TCG); `notify_socket` is the handler's
/// socket for domain events ("" for none).
pub async fn sync_emulated(
    client: &mut v1::launcher_client::LauncherClient<Channel>,
    vmi_json: Vec<u8>,
    notify_socket: &str,
) -> Result<v1::DomainResponse, tonic::Status> {
    sync(client, vmi_json, true, notify_socket).await
}

/// SyncVMI of `vmi` without useEmulation (the launcher picks its backend itself); the
/// domain, or a failure with the launcher's log.
pub async fn sync_native(
    client: &mut v1::launcher_client::LauncherClient<Channel>,
    vmi: &serde_json::Value,
    process: &LauncherProcess,
) -> v1::Domain {
    sync_domain(client, vmi, false, process).await
}

/// [`sync_native`] with useEmulation (QEMU TCG), without a notify socket.
pub async fn sync_emulated_domain(
    client: &mut v1::launcher_client::LauncherClient<Channel>,
    vmi: &serde_json::Value,
    process: &LauncherProcess,
) -> v1::Domain {
    sync_domain(client, vmi, true, process).await
}

async fn sync_domain(
    client: &mut v1::launcher_client::LauncherClient<Channel>,
    vmi: &serde_json::Value,
    use_emulation: bool,
    process: &LauncherProcess,
) -> v1::Domain {
    let vmi_json = serde_json::to_vec(vmi).expect("json");
    match sync(client, vmi_json, use_emulation, "").await {
        Ok(response) => response.domain.expect("domain"),
        Err(status) => panic!("SyncVMI: {status}\nlauncher log:\n{}", process.log_text()),
    }
}

async fn sync(
    client: &mut v1::launcher_client::LauncherClient<Channel>,
    vmi_json: Vec<u8>,
    use_emulation: bool,
    notify_socket: &str,
) -> Result<v1::DomainResponse, tonic::Status> {
    client
        .sync_vmi(v1::SyncVmiRequest {
            vmi_json,
            options: Some(v1::SyncOptions {
                use_emulation,
                notify_socket: notify_socket.into(),
                smbios: None,
            }),
        })
        .await
        .map(|r| r.into_inner())
}

/// The domain the launcher reports (it must have one).
pub async fn domain(client: &mut v1::launcher_client::LauncherClient<Channel>) -> v1::Domain {
    client
        .get_domain(v1::GetDomainRequest {})
        .await
        .expect("GetDomain")
        .into_inner()
        .domain
        .expect("a domain")
}

/// The domain's migration record (empty when it has none).
pub fn migration_of(domain: &v1::Domain) -> v1::MigrationInfo {
    domain.migration.clone().unwrap_or_default()
}

/// Asks the launcher behind `client` to migrate its VM to `socket`, at most
/// `bandwidth_bytes_per_second` (0: no limit); `process`'s log is shown when it refuses.
/// Returns the domain it answered with.
pub async fn migrate(
    client: &mut v1::launcher_client::LauncherClient<Channel>,
    process: &LauncherProcess,
    socket: &Path,
    bandwidth_bytes_per_second: u64,
) -> Option<v1::Domain> {
    client
        .migrate(v1::MigrateRequest {
            vmi: String::new(),
            socket: socket.display().to_string(),
            bandwidth_bytes_per_second,
            max_downtime_ms: 0,
        })
        .await
        .unwrap_or_else(|s| {
            panic!(
                "Migrate to {}: {s}\n{}",
                socket.display(),
                process.log_text()
            )
        })
        .into_inner()
        .domain
}

/// Waits until the migration seen by `client` is no longer active.
pub async fn wait_migration_end(
    client: &mut v1::launcher_client::LauncherClient<Channel>,
    timeout: Duration,
) -> v1::Domain {
    let start = Instant::now();
    loop {
        let d = domain(client).await;
        if migration_of(&d).status != v1::MigrationStatus::Active as i32 {
            return d;
        }
        assert!(
            start.elapsed() < timeout,
            "the migration did not end within {timeout:?}: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `GetDomain` until `state`, with a deadline.
pub async fn wait_state(
    client: &mut v1::launcher_client::LauncherClient<Channel>,
    state: v1::DomainState,
    timeout: Duration,
) -> v1::Domain {
    let start = Instant::now();
    loop {
        let domain = client
            .get_domain(v1::GetDomainRequest {})
            .await
            .expect("GetDomain")
            .into_inner()
            .domain;
        if let Some(domain) = &domain {
            if domain.state == state as i32 {
                return domain.clone();
            }
        }
        assert!(
            start.elapsed() < timeout,
            "domain not {state:?} within {timeout:?}: {domain:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls GetDomain until the guest agent report satisfies `ready`, with a deadline; returns the
/// report.
pub async fn wait_agent(
    client: &mut v1::launcher_client::LauncherClient<Channel>,
    what: &str,
    timeout: Duration,
    process: &LauncherProcess,
    ready: impl Fn(&v1::GuestAgent) -> bool,
) -> v1::GuestAgent {
    let start = Instant::now();
    loop {
        let agent = domain(client).await.guest_agent.unwrap_or_default();
        if ready(&agent) {
            return agent;
        }
        assert!(
            start.elapsed() < timeout,
            "the guest agent report: {what} not within {timeout:?}; last report {agent:?}
             launcher log:
{}",
            process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
