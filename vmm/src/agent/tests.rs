//! The session against a fake agent: a thread on the other end of a socket pair that reads
//! each request and writes the scripted bytes back, stale garbage and malformed lines among
//! them.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::thread::{self, JoinHandle};

use super::*;

/// The first sync id of the sessions under test.
const ID: u64 = 100;
const TIMEOUT: Duration = Duration::from_secs(5);

/// The script step on which the fake agent shuts its writing side (the host reads the end).
const HANG_UP: &str = "";

/// What the fake agent did: the requests it read, and its end of the channel (kept open until
/// the test joins it).
type AgentRun = (Vec<Value>, UnixStream);

/// Starts a fake agent that, for each `(command, reply)` of `script`, reads one request,
/// checks that it runs `command` and writes `reply` ([`HANG_UP`]: reads nothing, hangs up).
/// Returns the session's end.
fn fake_agent(script: Vec<(&'static str, Vec<u8>)>) -> (UnixStream, JoinHandle<AgentRun>) {
    let (host, guest) = UnixStream::pair().expect("socket pair");
    host.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("read timeout");
    let agent = thread::spawn(move || {
        let mut writer = guest.try_clone().expect("clone");
        let mut reader = BufReader::new(guest.try_clone().expect("clone"));
        let mut requests = Vec::new();
        for (command, reply) in script {
            if command == HANG_UP {
                guest.shutdown(std::net::Shutdown::Write).expect("hang up");
                continue;
            }
            let mut line = Vec::new();
            reader.read_until(b'\n', &mut line).expect("read a request");
            let json: Vec<u8> = line.into_iter().filter(|&b| b != DELIMITER).collect();
            let request: Value = serde_json::from_slice(&json).expect("a JSON request");
            assert_eq!(request["execute"], command, "{request}");
            requests.push(request);
            writer.write_all(&reply).expect("write the reply");
        }
        (requests, guest)
    });
    (host, agent)
}

fn sync_reply(id: u64) -> Vec<u8> {
    let mut reply = vec![DELIMITER];
    reply.extend_from_slice(format!("{{\"return\": {id}}}\n").as_bytes());
    reply
}

fn line(text: &str) -> Vec<u8> {
    format!("{text}\n").into_bytes()
}

#[test]
fn sync_skips_stale_bytes_and_old_ids() {
    let mut stale = b"{\"return\": {\"half\": ".to_vec();
    stale.extend(line("{\"return\": 100}")); // our id, but before any delimiter
    stale.extend(sync_reply(42)); // an old sync
    stale.extend(line("{\"return\": {\"stale\": true}}"));
    stale.extend(b"\xff{\"retu"); // a delimited reply cut short by the next delimiter
    stale.extend(sync_reply(ID));
    let (host, agent) = fake_agent(vec![
        ("guest-sync-delimited", stale),
        (
            "guest-info",
            line(
                r#"{"return": {"version": "7.2.15", "supported_commands": [{"name": "guest-get-osinfo", "enabled": true, "success-response": true}, {"name": "guest-exec", "enabled": false}]}}"#,
            ),
        ),
    ]);
    let mut session = AgentSession::with_first_sync_id(host, ID);
    session.sync(TIMEOUT).expect("sync");
    let info = session.info(TIMEOUT).expect("guest-info");
    assert_eq!(info.version, "7.2.15");
    assert!(info.supports("guest-get-osinfo"));
    assert!(!info.supports("guest-exec"), "disabled");
    assert!(!info.supports("guest-get-users"), "absent");
    let (requests, _) = agent.join().expect("fake agent");
    assert_eq!(
        requests[0],
        json!({"execute": "guest-sync-delimited", "arguments": {"id": ID}})
    );
    assert_eq!(requests[1], json!({"execute": "guest-info"}));
}

#[test]
fn the_sync_request_starts_with_the_delimiter_and_ids_are_fresh() {
    let (host, guest) = UnixStream::pair().expect("socket pair");
    host.set_read_timeout(Some(Duration::from_millis(20)))
        .expect("read timeout");
    let mut session = AgentSession::new(host);
    for _ in 0..2 {
        assert!(matches!(
            session.sync(Duration::from_millis(50)),
            Err(AgentError::Timeout(_))
        ));
    }
    let mut written = vec![0u8; 4096];
    let n = (&guest).read(&mut written).expect("the requests");
    let requests: Vec<&[u8]> = written[..n]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(requests.len(), 2);
    let ids: Vec<u64> = requests
        .iter()
        .map(|r| {
            assert_eq!(r[0], DELIMITER);
            let request: Value = serde_json::from_slice(&r[1..]).expect("JSON");
            request["arguments"]["id"].as_u64().expect("an id")
        })
        .collect();
    assert_ne!(ids[0], ids[1]);
    assert!(ids.iter().all(|&id| id <= SYNC_ID_MASK));
}

#[test]
fn every_reply_is_typed() {
    let (host, agent) = fake_agent(vec![
        ("guest-sync-delimited", sync_reply(ID)),
        (
            "guest-get-osinfo",
            line(
                r##"{"return": {"name": "Debian GNU/Linux", "kernel-release": "6.1.0-28-cloud-amd64", "version": "12 (bookworm)", "pretty-name": "Debian GNU/Linux 12 (bookworm)", "version-id": "12", "kernel-version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)", "machine": "x86_64", "id": "debian"}}"##,
            ),
        ),
        (
            "guest-get-host-name",
            line(r#"{"return": {"host-name": "vmi-debian"}}"#),
        ),
        (
            "guest-get-timezone",
            line(r#"{"return": {"offset": 3600}}"#),
        ),
        (
            "guest-get-users",
            line(r#"{"return": [{"user": "fvuser", "login-time": 1700000000.25}]}"#),
        ),
        (
            "guest-get-fsinfo",
            line(
                r#"{"return": [{"name": "vda1", "total-bytes": 2040373248, "mountpoint": "/", "disk": [{"serial": "rootdisk", "bus-type": "unknown", "bus": 0, "unit": 0, "pci-controller": {"bus": -1, "slot": -1, "domain": -1, "function": -1}, "dev": "/dev/vda1", "target": 0}], "used-bytes": 912343040, "type": "ext4"}, {"name": "vdb", "mountpoint": "/mnt", "type": "vfat", "disk": []}]}"#,
            ),
        ),
        (
            "guest-network-get-interfaces",
            line(
                r#"{"return": [{"name": "lo", "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}], "statistics": {"tx-packets": 1}, "hardware-address": "00:00:00:00:00:00"}, {"name": "eth0"}]}"#,
            ),
        ),
        ("guest-fsfreeze-status", line(r#"{"return": "thawed"}"#)),
    ]);
    let mut session = AgentSession::with_first_sync_id(host, ID);
    session.sync(TIMEOUT).expect("sync");
    let os = session.os_info(TIMEOUT).expect("osinfo");
    assert_eq!(
        (os.id.as_str(), os.version_id.as_str(), os.machine.as_str()),
        ("debian", "12", "x86_64")
    );
    assert_eq!(os.kernel_release, "6.1.0-28-cloud-amd64");
    assert_eq!(os.pretty_name, "Debian GNU/Linux 12 (bookworm)");
    assert_eq!(session.host_name(TIMEOUT).expect("host name"), "vmi-debian");
    assert_eq!(
        session.timezone(TIMEOUT).expect("timezone"),
        Timezone {
            zone: None,
            offset: 3600
        }
    );
    let users = session.users(TIMEOUT).expect("users");
    assert_eq!(users.len(), 1);
    assert_eq!(
        (
            users[0].user.as_str(),
            users[0].domain.clone(),
            users[0].login_time
        ),
        ("fvuser", None, 1_700_000_000.25)
    );
    let filesystems = session.filesystems(TIMEOUT).expect("fsinfo");
    assert_eq!(filesystems.len(), 2);
    let root = &filesystems[0];
    assert_eq!(
        (
            root.name.as_str(),
            root.mountpoint.as_str(),
            root.fs_type.as_str()
        ),
        ("vda1", "/", "ext4")
    );
    assert_eq!(
        (root.used_bytes, root.total_bytes),
        (Some(912_343_040), Some(2_040_373_248))
    );
    assert_eq!(root.disk[0].serial.as_deref(), Some("rootdisk"));
    assert_eq!(root.disk[0].bus_type, "unknown");
    assert_eq!(filesystems[1].used_bytes, None);
    let interfaces = session.interfaces(TIMEOUT).expect("interfaces");
    assert_eq!(interfaces[0].ip_addresses[0].ip_address, "127.0.0.1");
    assert_eq!(interfaces[0].ip_addresses[0].prefix, 8);
    assert_eq!(interfaces[1].hardware_address, None);
    assert_eq!(
        session.fsfreeze_status(TIMEOUT).expect("fsfreeze"),
        "thawed"
    );
    agent.join().expect("fake agent");
}

#[test]
fn an_error_reply_carries_class_and_desc_and_the_stream_stays_in_step() {
    let (host, agent) = fake_agent(vec![
        ("guest-sync-delimited", sync_reply(ID)),
        (
            "guest-get-users",
            line(
                r#"{"error": {"class": "CommandNotFound", "desc": "The command guest-get-users has not been found"}}"#,
            ),
        ),
        (
            "guest-get-host-name",
            line(r#"{"return": {"host-name": 7}}"#),
        ),
        // Blank lines before a reply are skipped.
        (
            "guest-fsfreeze-status",
            line("\r\n  \n{\"return\": \"frozen\"}"),
        ),
    ]);
    let mut session = AgentSession::with_first_sync_id(host, ID);
    session.sync(TIMEOUT).expect("sync");
    let err = session.users(TIMEOUT).expect_err("an error reply");
    assert!(
        matches!(&err, AgentError::Command { command: "guest-get-users", class, desc }
            if class == "CommandNotFound" && desc.contains("has not been found")),
        "{err:?}"
    );
    assert!(err.in_step());
    let err = session.host_name(TIMEOUT).expect_err("a number for a name");
    assert!(
        matches!(err, AgentError::Shape { .. }) && err.in_step(),
        "{err:?}"
    );
    assert_eq!(
        session.fsfreeze_status(TIMEOUT).expect("fsfreeze"),
        "frozen"
    );
    agent.join().expect("fake agent");
}

#[test]
fn an_oversized_line_is_refused_and_a_new_sync_recovers() {
    let mut huge = b"{\"return\": \"".to_vec();
    huge.resize(MAX_LINE + 100, b'x');
    huge.extend_from_slice(b"\"}\n");
    let (host, agent) = fake_agent(vec![
        ("guest-sync-delimited", sync_reply(ID)),
        ("guest-get-host-name", huge),
        ("guest-sync-delimited", sync_reply(ID + 1)),
        (
            "guest-get-host-name",
            line(r#"{"return": {"host-name": "h"}}"#),
        ),
    ]);
    let mut session = AgentSession::with_first_sync_id(host, ID);
    session.sync(TIMEOUT).expect("sync");
    let err = session.host_name(TIMEOUT).expect_err("too long");
    assert!(
        matches!(err, AgentError::LineTooLong) && !err.in_step(),
        "{err:?}"
    );
    session.sync(TIMEOUT).expect("sync again");
    assert_eq!(session.host_name(TIMEOUT).expect("host name"), "h");
    agent.join().expect("fake agent");
}

#[test]
fn truncated_json_and_invalid_utf8_are_errors_out_of_step() {
    let (host, agent) = fake_agent(vec![
        ("guest-sync-delimited", sync_reply(ID)),
        (
            "guest-get-host-name",
            line(r#"{"return": {"host-name": "ab"#),
        ),
        (
            "guest-get-host-name",
            b"{\"return\": {\"host-name\": \"\xc3\x28\"}}\n".to_vec(),
        ),
        ("guest-get-host-name", line(r#"[1, 2]"#)),
        ("guest-get-host-name", line(r#"{"event": "x"}"#)),
        // The last reply is cut short by the channel closing.
        (
            "guest-get-host-name",
            br#"{"return": {"host-name""#.to_vec(),
        ),
        (HANG_UP, Vec::new()),
    ]);
    let mut session = AgentSession::with_first_sync_id(host, ID);
    session.sync(TIMEOUT).expect("sync");
    for _ in 0..2 {
        let err = session.host_name(TIMEOUT).expect_err("not JSON");
        assert!(
            matches!(err, AgentError::NotJson(_)) && !err.in_step(),
            "{err:?}"
        );
    }
    for _ in 0..2 {
        let err = session.host_name(TIMEOUT).expect_err("not a reply");
        assert!(matches!(err, AgentError::NotAReply), "{err:?}");
    }
    let err = session.host_name(TIMEOUT).expect_err("closed");
    assert!(matches!(err, AgentError::Closed), "{err:?}");
    agent.join().expect("fake agent");
}

#[test]
fn silence_and_trickling_time_out_at_the_deadline() {
    let (host, agent) = fake_agent(vec![("guest-sync-delimited", Vec::new())]);
    let mut session = AgentSession::with_first_sync_id(host, ID);
    let started = Instant::now();
    let err = session
        .sync(Duration::from_millis(300))
        .expect_err("no answer");
    assert!(matches!(err, AgentError::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let (_, guest) = agent.join().expect("fake agent");

    // A guest that sends a blank line every 20 ms never completes a reply.
    let trickle = thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline && (&guest).write_all(b"\n").is_ok() {
            thread::sleep(Duration::from_millis(20));
        }
    });
    let started = Instant::now();
    let err = session
        .host_name(Duration::from_millis(300))
        .expect_err("no reply");
    assert!(matches!(err, AgentError::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    trickle.join().expect("trickle");
}

#[test]
fn strings_and_lists_are_bounded() {
    let long_name = "é".repeat(300);
    let users: Vec<Value> = (0..100)
        .map(|i| json!({"user": format!("u{i}"), "login-time": i}))
        .collect();
    let (host, agent) = fake_agent(vec![
        ("guest-sync-delimited", sync_reply(ID)),
        (
            "guest-get-host-name",
            line(&json!({"return": {"host-name": long_name}}).to_string()),
        ),
        (
            "guest-get-users",
            line(&json!({ "return": users }).to_string()),
        ),
    ]);
    let mut session = AgentSession::with_first_sync_id(host, ID);
    session.sync(TIMEOUT).expect("sync");
    let name = session.host_name(TIMEOUT).expect("host name");
    assert!(name.len() <= replies::MAX_STRING && name.len() >= replies::MAX_STRING - 1);
    assert!(name.chars().all(|c| c == 'é'));
    let users = session.users(TIMEOUT).expect("users");
    assert_eq!(users.len(), replies::MAX_LIST);
    assert_eq!(users[63].user, "u63");
    agent.join().expect("fake agent");
}

#[test]
fn shutdown_waits_only_for_an_error() {
    let (host, agent) = fake_agent(vec![
        ("guest-sync-delimited", sync_reply(ID)),
        ("guest-shutdown", Vec::new()),
        ("guest-sync-delimited", sync_reply(ID + 1)),
        (
            "guest-shutdown",
            line(
                r#"{"error": {"class": "GenericError", "desc": "child process has failed to shutdown"}}"#,
            ),
        ),
    ]);
    let mut session = AgentSession::with_first_sync_id(host, ID);
    session.sync(TIMEOUT).expect("sync");
    let window = Duration::from_millis(200);
    session
        .shutdown(ShutdownMode::Reboot, window)
        .expect("no reply is success");
    session.sync(TIMEOUT).expect("sync");
    let err = session
        .shutdown(ShutdownMode::Halt, window)
        .expect_err("an error reply");
    assert!(matches!(err, AgentError::Command { .. }), "{err:?}");
    let (requests, _) = agent.join().expect("fake agent");
    assert_eq!(
        requests[1],
        json!({"execute": "guest-shutdown", "arguments": {"mode": "reboot"}})
    );
    assert_eq!(requests[3]["arguments"]["mode"], "halt");
}

#[test]
fn bounded_string_cuts_at_a_character_boundary() {
    assert_eq!(replies::bounded_string("abc".into(), 2), "ab");
    assert_eq!(replies::bounded_string("aé".into(), 2), "a");
    assert_eq!(replies::bounded_string("short".into(), 256), "short");
}

#[test]
fn parse_reply_on_odd_lines() {
    assert_eq!(
        parse_reply("c", b"{\"return\": {}}").expect("ok"),
        json!({})
    );
    assert!(matches!(parse_reply("c", b""), Err(AgentError::NotJson(_))));
    assert!(matches!(
        parse_reply("c", b"{\"error\": 5}"),
        Err(AgentError::Command { ref class, .. }) if class.is_empty()
    ));
    let deep = "[".repeat(10_000);
    assert!(parse_reply("c", deep.as_bytes()).is_err());
}
