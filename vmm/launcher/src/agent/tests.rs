//! The poller against a fake agent listening on a unix socket, as QEMU's chardev does: one
//! client at a time, replies from a table, and a switch that makes it fall silent.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::sync::atomic::AtomicUsize;

use serde_json::{json, Value};

use super::*;

/// A fake qemu-guest-agent behind a unix socket.
struct FakeAgent {
    requests: Arc<Mutex<Vec<Value>>>,
    answering: Arc<AtomicBool>,
    hangups: Arc<AtomicUsize>,
}

impl FakeAgent {
    /// Listens on `path`; answers the sync, `guest-shutdown` with silence, the commands of
    /// `replies` with their `return` value and the others with `CommandNotFound`.
    fn start(path: &Path, replies: HashMap<&'static str, Value>) -> FakeAgent {
        let listener = UnixListener::bind(path).expect("bind the fake agent");
        let agent = FakeAgent {
            requests: Arc::default(),
            answering: Arc::new(AtomicBool::new(true)),
            hangups: Arc::default(),
        };
        let (requests, answering, hangups) = (
            Arc::clone(&agent.requests),
            Arc::clone(&agent.answering),
            Arc::clone(&agent.hangups),
        );
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                serve(stream, &replies, &requests, &answering);
                hangups.fetch_add(1, Ordering::SeqCst);
            }
        });
        agent
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests").clone()
    }
}

fn serve(
    stream: UnixStream,
    replies: &HashMap<&'static str, Value>,
    requests: &Mutex<Vec<Value>>,
    answering: &AtomicBool,
) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        line.retain(|&b| b != vmm::agent::DELIMITER);
        let Ok(request) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        requests.lock().expect("requests").push(request.clone());
        if !answering.load(Ordering::SeqCst) {
            continue;
        }
        let command = request["execute"].as_str().unwrap_or_default();
        let mut reply = match command {
            "guest-sync-delimited" => {
                let mut reply = vec![vmm::agent::DELIMITER];
                reply.extend(
                    json!({ "return": request["arguments"]["id"] })
                        .to_string()
                        .bytes(),
                );
                reply
            }
            "guest-shutdown" => continue,
            _ => match replies.get(command) {
                Some(value) => json!({ "return": value }).to_string().into_bytes(),
                None => json!({ "error": { "class": "CommandNotFound",
                    "desc": format!("The command {command} has not been found") } })
                .to_string()
                .into_bytes(),
            },
        };
        reply.push(b'\n');
        if writer.write_all(&reply).is_err() {
            return;
        }
    }
}

/// What a Debian guest's agent says; it lacks guest-get-users, and lists no fsfreeze.
fn debian_replies() -> HashMap<&'static str, Value> {
    let commands = [
        "guest-get-osinfo",
        "guest-get-host-name",
        "guest-get-timezone",
        "guest-get-users",
        "guest-get-fsinfo",
        "guest-network-get-interfaces",
    ]
    .map(|name| json!({"name": name, "enabled": true, "success-response": true}));
    HashMap::from([
        (
            "guest-info",
            json!({"version": "7.2.15", "supported_commands": commands}),
        ),
        (
            "guest-get-osinfo",
            json!({"id": "debian", "version-id": "12", "name": "Debian GNU/Linux",
                   "kernel-release": "6.1.0-28-cloud-amd64"}),
        ),
        ("guest-get-host-name", json!({"host-name": "vmi-debian"})),
        ("guest-get-timezone", json!({"zone": "UTC", "offset": 0})),
        (
            "guest-get-fsinfo",
            json!([{"name": "vda1", "mountpoint": "/", "type": "ext4", "used-bytes": 1,
                    "total-bytes": 2, "disk": [{"serial": "rootdisk", "bus-type": "virtio"}]}]),
        ),
        (
            "guest-network-get-interfaces",
            json!([{"name": "lo", "hardware-address": "00:00:00:00:00:00",
                    "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}]}]),
        ),
        ("guest-fsfreeze-status", json!("thawed")),
    ])
}

const FAST: Timings = Timings {
    interval: Duration::from_millis(100),
    sync: Duration::from_millis(500),
    command: Duration::from_millis(500),
};

/// A fresh directory for one test's socket.
fn socket_in_temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fvl-agent-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test directory");
    dir.join("agent.sock")
}

/// Polls `condition` on the channel's report until it holds, with a deadline.
fn wait_report(
    channel: &AgentChannel,
    what: &str,
    condition: impl Fn(&v1::GuestAgent) -> bool,
) -> v1::GuestAgent {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let report = channel.report();
        if condition(&report) {
            return report;
        }
        assert!(Instant::now() < deadline, "{what}: last report {report:?}");
        thread::sleep(Duration::from_millis(10));
    }
}

fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "{what}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_poll_reports_what_the_agent_says() {
    let socket = socket_in_temp_dir("poll");
    let agent = FakeAgent::start(&socket, debian_replies());
    let channel = AgentChannel::start(socket.clone(), FAST).expect("start");
    assert!(!channel.report().connected);
    channel.set_running(true);
    let report = wait_report(&channel, "connected", |r| r.connected);
    assert!(report.error.is_empty());
    assert_eq!(report.version, "7.2.15");
    let os = report.os.clone().expect("os info");
    assert_eq!((os.id.as_str(), os.version_id.as_str()), ("debian", "12"));
    assert_eq!(report.hostname, "vmi-debian");
    assert_eq!(report.timezone, "UTC");
    // Listed but refused (CommandNotFound): empty. Not listed: not asked.
    assert!(report.users.is_empty());
    assert!(report.fs_freeze_status.is_empty());
    assert!(!agent
        .requests()
        .iter()
        .any(|r| r["execute"] == "guest-fsfreeze-status"));
    assert_eq!(report.filesystems[0].disks[0].serial, "rootdisk");
    assert_eq!(report.interfaces[0].ip_addresses, ["127.0.0.1"]);
    assert!(channel.take_changed(), "connecting is an event");
    // Rounds go on, each starting with a sync on the same connection.
    let syncs = |agent: &FakeAgent| {
        agent
            .requests()
            .iter()
            .filter(|r| r["execute"] == "guest-sync-delimited")
            .count()
    };
    let before = syncs(&agent);
    wait_until("another round", || syncs(&agent) > before + 1);
    assert_eq!(agent.hangups.load(Ordering::SeqCst), 0);
    assert!(!channel.take_changed(), "the same report is no event");
    let _ = std::fs::remove_dir_all(socket.parent().expect("dir"));
}

#[test]
fn the_agent_appears_then_falls_silent() {
    let socket = socket_in_temp_dir("appear");
    let channel = AgentChannel::start(socket.clone(), FAST).expect("start");
    channel.set_running(true);
    let report = wait_report(&channel, "no socket", |r| {
        r.error.contains("cannot connect")
    });
    assert!(!report.connected);
    assert!(!channel.take_changed(), "a different error is no event");

    let agent = FakeAgent::start(&socket, debian_replies());
    wait_report(&channel, "connected", |r| r.connected);
    assert!(channel.take_changed());

    agent.answering.store(false, Ordering::SeqCst);
    let report = wait_report(&channel, "disconnected", |r| !r.connected);
    assert!(report.error.contains("no answer"), "{}", report.error);
    assert_eq!(
        report,
        snapshot::disconnected(report.error.clone()),
        "nothing but the error is left"
    );
    assert!(channel.take_changed(), "disconnecting is an event");
    // A failed sync closes the connection: the next round connects anew.
    wait_until("a new connection", || {
        agent.hangups.load(Ordering::SeqCst) >= 1
    });
    agent.answering.store(true, Ordering::SeqCst);
    wait_report(&channel, "connected again", |r| r.connected);
    let _ = std::fs::remove_dir_all(socket.parent().expect("dir"));
}

#[test]
fn reboot_sends_guest_shutdown_and_the_poller_resyncs() {
    let socket = socket_in_temp_dir("reboot");
    let agent = FakeAgent::start(&socket, debian_replies());
    let channel = AgentChannel::start(socket.clone(), FAST).expect("start");
    channel.set_running(true);
    wait_report(&channel, "connected", |r| r.connected);
    channel.reboot().expect("reboot");
    let requests = agent.requests();
    let shutdown = requests
        .iter()
        .position(|r| r["execute"] == "guest-shutdown")
        .expect("a guest-shutdown request");
    assert_eq!(requests[shutdown]["arguments"], json!({"mode": "reboot"}));
    assert_eq!(
        requests[shutdown - 1]["execute"],
        "guest-sync-delimited",
        "synced right before"
    );
    // The poller goes on with a sync of its own.
    wait_until("a sync after the reboot", || {
        agent.requests()[shutdown + 1..]
            .iter()
            .any(|r| r["execute"] == "guest-sync-delimited")
    });

    agent.answering.store(false, Ordering::SeqCst);
    let err = channel.reboot().expect_err("no agent");
    assert!(err.unreachable(), "{err:?}");
    let _ = std::fs::remove_dir_all(socket.parent().expect("dir"));
}

#[test]
fn stopping_closes_the_connection() {
    let socket = socket_in_temp_dir("stop");
    let agent = FakeAgent::start(&socket, debian_replies());
    let channel = AgentChannel::start(socket.clone(), FAST).expect("start");
    channel.set_running(true);
    wait_report(&channel, "connected", |r| r.connected);
    drop(channel);
    wait_until("the poller hung up", || {
        agent.hangups.load(Ordering::SeqCst) == 1
    });
    let _ = std::fs::remove_dir_all(socket.parent().expect("dir"));
}
