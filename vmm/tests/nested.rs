//! The nested-KVM tier, devices: real Linux guests on the VMM, with Linux's own virtio drivers
//! against our devices (virtio-blk, virtio-rng, virtio-net, vsock, the virtio-console of the
//! guest agent channel).
//!
//! This host's `/dev/kvm` is PVM, on which a stock Linux kernel cannot run. Each test here is
//! run twice over: on this host it boots an L1 VM (QEMU TCG `-cpu max`, Debian's cloud kernel
//! with `kvm_amd`; `hack/kvm-host.sh`) carrying this test binary and the guest images, and runs
//! itself inside it (`guest_images::l1::nested_test`); inside the L1 its body boots our guest
//! kernel and the tiny busybox guest on the VMM with the L1's real `/dev/kvm`. What the guest
//! does is driven by a NoCloud user-data script (the tiny guest runs one at every boot from its
//! initramfs) that prints `NESTED-...` lines on the serial console. The outer run prepares the
//! disks the body needs (mkfs and genisoimage are not in the L1) in
//! [`nested_support::work_dir`], which is copied into the L1 at the same path.
//! `nested_lifecycle.rs` has the VM's lifecycle and Debian's stock kernel.
//!
//! Everything nested is slow (TCG below): the tests prove behaviour; `bench/` compares speed
//! with QEMU-KVM on the same L1.

mod common;
mod nested_support;

use std::io::Read;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use common::wait_for_serial;
use guest_images::l1::{in_l1, nested_test};
use guest_images::READY_MARKER;
use nested_support::*;
use vmm::config::{NetConfig, RngConfig};
use vmm::lifecycle::VmExit;

#[test]
fn virtio_blk_data_survives_a_reset_and_a_readonly_disk_refuses_writes() {
    let name = "virtio_blk_data_survives_a_reset_and_a_readonly_disk_refuses_writes";
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        ext4(&dir, "nested-data", 32);
        ext4(&dir, "nested-ro", 8);
        seed(
            &dir,
            r#"data=$(findfs LABEL=nested-data); ro=$(findfs LABEL=nested-ro)
mkdir -p /mnt/data
mount "$data" /mnt/data || echo "NESTED-ERROR mount $data"
if [ -f /mnt/data/blob ]; then
    echo "NESTED-FOUND $(crc32 </mnt/data/blob)"
else
    dd if=/dev/urandom of=/mnt/data/blob bs=1M count=8 2>/dev/null
    sync /mnt/data/blob
    echo "NESTED-WROTE $(crc32 </mnt/data/blob)"
fi
umount /mnt/data
if dd if=/dev/zero of="$ro" bs=4096 count=1 conv=fsync 2>/dev/null; then
    echo "NESTED-RO writable"
else
    echo "NESTED-RO refused"
fi
"#,
        );
    }
    files.push(dir.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        let serial = dir.join("serial.log");
        let mut config = linux(&serial);
        config.disks = vec![
            disk(&dir.join("cidata.iso"), true),
            disk(&dir.join("nested-data.img"), false),
            disk(&dir.join("nested-ro.img"), true),
        ];
        let mut vm = boot(&config);
        let wrote = wait_line(&serial, "NESTED-WROTE ", Duration::from_secs(120));
        assert_crc("the data written", &wrote);
        assert_eq!(
            wait_line(&serial, "NESTED-RO ", Duration::from_secs(30)),
            "refused",
            "the guest could write to the read-only disk"
        );
        wait_for_serial(&serial, READY_MARKER, |log| log.contains(READY_MARKER));
        vm.reset().expect("reset the VM in place");
        let found = wait_line(&serial, "NESTED-FOUND ", Duration::from_secs(120));
        assert_eq!(
            found, wrote,
            "the data written before the reset read back otherwise after it"
        );
        assert_eq!(vm.resets(), 1);
        let exit = vm.stop();
        assert!(matches!(exit, VmExit::Stopped), "stop ended with {exit}");
    });
}

#[test]
fn virtio_rng_feeds_the_guest() {
    let name = "virtio_rng_feeds_the_guest";
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        seed(
            &dir,
            r#"echo "NESTED-RNG-CURRENT $(cat /sys/class/misc/hw_random/rng_current)"
if dd if=/dev/hwrng of=/tmp/r bs=1024 count=64 2>/dev/null; then
    echo "NESTED-RNG-BYTES $(wc -c </tmp/r) $(od -An -tx1 -N16 /tmp/r | tr -d ' \n')"
else
    echo "NESTED-RNG-BYTES 0 unreadable"
fi
"#,
        );
    }
    files.push(dir.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        let serial = dir.join("serial.log");
        let mut config = linux(&serial);
        config.disks = vec![disk(&dir.join("cidata.iso"), true)];
        config.rng = Some(RngConfig::default());
        let mut vm = boot(&config);
        let current = wait_line(&serial, "NESTED-RNG-CURRENT ", Duration::from_secs(120));
        assert!(
            current.starts_with("virtio_rng"),
            "the guest's hwrng is {current:?}, not virtio_rng"
        );
        let bytes = wait_line(&serial, "NESTED-RNG-BYTES ", Duration::from_secs(60));
        let mut parts = bytes.split_whitespace();
        assert_eq!(parts.next(), Some("65536"), "read from /dev/hwrng: {bytes}");
        let head = parts.next().unwrap_or_default();
        assert_ne!(
            head, "00000000000000000000000000000000",
            "virtio-rng gave zeros"
        );
        vm.stop();
    });
}

#[test]
fn virtio_net_pings_both_ways_and_carries_100_mib_intact() {
    let name = "virtio_net_pings_both_ways_and_carries_100_mib_intact";
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        seed_with_network(
            &dir,
            r#"if ping -c 3 -W 5 10.77.0.1 >/tmp/ping 2>&1; then echo "NESTED-PING ok"; else echo "NESTED-PING failed: $(tail -n 2 /tmp/ping | tr '\n' ' ')"; fi
dd if=/dev/urandom of=/tmp/blob bs=1M count=4 2>/dev/null
echo "NESTED-BLOB $(crc32 </tmp/blob)"
if (i=0; while [ $i -lt 25 ]; do cat /tmp/blob; i=$((i+1)); done) | nc 10.77.0.1 5000; then echo "NESTED-SENT ok"; else echo "NESTED-SENT failed"; fi
rm -f /tmp/blob
"#,
            "10.77.0.2/24",
            "10.77.0.1",
        );
    }
    files.push(dir.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        let serial = dir.join("serial.log");
        l1_tap("fvtap0", "10.77.0.1/24");
        let listener = TcpListener::bind("10.77.0.1:5000").expect("listen on the tap's address");
        let mut config = linux(&serial);
        config.disks = vec![disk(&dir.join("cidata.iso"), true)];
        config.net = vec![NetConfig {
            id: "net0".into(),
            tap: "fvtap0".into(),
            mac: "52:54:00:12:34:56".into(),
        }];
        let mut vm = boot(&config);
        assert_eq!(
            wait_line(&serial, "NESTED-PING ", Duration::from_secs(120)),
            "ok",
            "the guest could not ping the L1"
        );
        let out = Command::new("ping")
            .args(["-c", "3", "-W", "5", "10.77.0.2"])
            .output()
            .expect("run ping (busybox in the L1)");
        assert!(
            out.status.success(),
            "the L1 could not ping the guest: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let blob = wait_line(&serial, "NESTED-BLOB ", Duration::from_secs(180));
        assert_crc("the guest's blob", &blob);
        let (mut conn, _) = listener.accept().expect("accept the guest's connection");
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        let started = Instant::now();
        let mut received = Vec::with_capacity(100 << 20);
        conn.read_to_end(&mut received)
            .expect("receive the guest's 100 MiB");
        let took = started.elapsed();
        // busybox nc ends once this side closes too.
        drop(conn);
        println!(
            "nested: received {} MiB from the guest in {:.2} s",
            received.len() >> 20,
            took.as_secs_f64()
        );
        // 25 times the guest's 4 MiB random blob (whose checksum it printed): computing 100
        // MiB of random bytes and their checksum in the guest would take minutes under TCG.
        assert_eq!(received.len(), 100 << 20, "bytes received");
        for (i, chunk) in received.chunks(4 << 20).enumerate() {
            assert_eq!(
                crc32(chunk),
                blob,
                "MiB {} to {} received differ from what the guest sent",
                i * 4,
                i * 4 + 4
            );
        }
        assert_eq!(
            wait_line(&serial, "NESTED-SENT ", Duration::from_secs(30)),
            "ok"
        );
        vm.stop();
    });
}

#[test]
fn crc32_matches_busybox() {
    // The checksum the net test compares with the guest's `crc32` (busybox's output).
    assert_eq!(crc32(b""), "00000000");
    assert_eq!(crc32(b"123456789"), "cbf43926");
}

#[test]
fn vsock_carries_checksummed_data_both_ways() {
    let name = "vsock_carries_checksummed_data_both_ways";
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        seed(
            &dir,
            r#"(fv-vsock listen 5002 >/tmp/from-host; echo "NESTED-VSOCK-GOT $(crc32 </tmp/from-host) $(wc -c </tmp/from-host)") &
dd if=/dev/urandom of=/tmp/to-host bs=1M count=4 2>/dev/null
echo "NESTED-VSOCK-SENDING $(crc32 </tmp/to-host)"
if fv-vsock connect 2 5001 </tmp/to-host >/tmp/reply; then echo "NESTED-VSOCK-REPLY $(cat /tmp/reply)"; else echo "NESTED-VSOCK-REPLY failed"; fi
"#,
        );
    }
    files.push(dir.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        use std::io::{BufRead, BufReader, Write};
        use std::os::unix::net::{UnixListener, UnixStream};
        let serial = dir.join("serial.log");
        let socket = dir.join("vsock.sock");
        // Guest-initiated connections to port 5001 arrive on `<socket>_5001`.
        let guest_listener = UnixListener::bind(dir.join("vsock.sock_5001"))
            .expect("listen for the guest's connection");
        let mut config = linux(&serial);
        config.disks = vec![disk(&dir.join("cidata.iso"), true)];
        config.vsock = Some(vmm::config::VsockConfig {
            cid: 3,
            socket: socket.clone(),
        });
        let mut vm = boot(&config);

        // Guest -> host: 4 MiB, checked, and a reply on the same connection.
        let sending = wait_line(&serial, "NESTED-VSOCK-SENDING ", Duration::from_secs(120));
        assert_crc("what the guest sends", &sending);
        let (mut conn, _) = guest_listener
            .accept()
            .expect("accept the guest's connection");
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        let mut got = Vec::new();
        conn.read_to_end(&mut got).expect("read the guest's bytes");
        assert_eq!(got.len(), 4 << 20, "bytes from the guest");
        assert_eq!(crc32(&got), sending, "the guest's bytes arrived otherwise");
        conn.write_all(b"thanks\n").expect("reply to the guest");
        drop(conn);
        assert_eq!(
            wait_line(&serial, "NESTED-VSOCK-REPLY ", Duration::from_secs(60)),
            "thanks"
        );

        // Host -> guest: connect to the guest's port 5002 through the VMM's socket.
        let mut host = UnixStream::connect(&socket).expect("connect to the VMM's vsock socket");
        host.write_all(b"CONNECT 5002\n")
            .expect("ask for port 5002");
        let mut ok = String::new();
        BufReader::new(host.try_clone().expect("clone the stream"))
            .read_line(&mut ok)
            .expect("the VMM's answer");
        assert!(ok.starts_with("OK "), "the VMM answered {ok:?}");
        let payload: Vec<u8> = (0..(4u32 << 20))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        host.write_all(&payload).expect("send to the guest");
        host.shutdown(std::net::Shutdown::Both).expect("close");
        let got = wait_line(&serial, "NESTED-VSOCK-GOT ", Duration::from_secs(120));
        assert_eq!(
            got,
            format!("{} {}", crc32(&payload), payload.len()),
            "the guest received otherwise"
        );
        vm.stop();
    });
}

/// What the guest runs on the agent port, in the background: finds the port by its name
/// (udev would link it as /dev/virtio-ports/org.qemu.guest_agent.0; the tiny guest has no
/// udev, the kernel's node is /dev/vportNp1), opens it, sends 256 KiB (its write waits for the
/// host to connect), takes 256 KiB back, then answers each line it reads with `echo:` and the
/// line, as an agent answers requests, retrying while no host is connected (reads return EOF
/// then), as qemu-guest-agent does.
const AGENT_PORT_SCRIPT: &str = r#"port=
for i in $(seq 1 100); do
    for f in /sys/class/virtio-ports/*/name; do
        [ -f "$f" ] && [ "$(cat "$f")" = org.qemu.guest_agent.0 ] && port=/dev/$(basename "$(dirname "$f")")
    done
    [ -n "$port" ] && break
    sleep 0.1
done
echo "NESTED-AGENT-PORTS $(ls /sys/class/virtio-ports | tr '\n' ' ')"
echo "NESTED-AGENT-PORT ${port:-none}"
(
exec 3<>"$port"
dd if=/dev/urandom of=/tmp/to-host bs=1k count=256 2>/dev/null
echo "NESTED-AGENT-SENDING $(crc32 </tmp/to-host)"
cat /tmp/to-host >&3
head -c 262144 <&3 >/tmp/from-host
echo "NESTED-AGENT-GOT $(crc32 </tmp/from-host) $(wc -c </tmp/from-host)"
while :; do
    if read -r line <&3; then echo "echo:$line" >&3; else sleep 0.1; fi
done
) &
"#;

/// Sends `line` to the guest's echo loop on the agent port and returns its answer.
fn agent_echo(client: &mut std::os::unix::net::UnixStream, line: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    client
        .write_all(format!("{line}\n").as_bytes())
        .expect("write to the agent port");
    let mut answer = String::new();
    BufReader::new(client.try_clone().expect("clone the stream"))
        .read_line(&mut answer)
        .expect("the guest's answer");
    answer.trim_end().to_string()
}

#[test]
fn guest_agent_port_carries_bytes_and_survives_migration() {
    let name = "guest_agent_port_carries_bytes_and_survives_migration";
    let dir = work_dir(name);
    let mut files = guest_files();
    if !in_l1() {
        seed(&dir, AGENT_PORT_SCRIPT);
    }
    files.push(dir.clone());
    nested_test(name, &files, L1_DEADLINE, || {
        use std::io::Write;
        use std::os::unix::net::UnixStream;
        let (source_serial, target_serial) = (dir.join("source.log"), dir.join("target.log"));
        let (source_socket, target_socket) = (dir.join("source.sock"), dir.join("target.sock"));
        let config = |serial: &std::path::Path, socket: &std::path::Path| {
            let mut config = linux(serial);
            config.disks = vec![disk(&dir.join("cidata.iso"), true)];
            config.agent = Some(vmm::config::AgentChannelConfig {
                socket: socket.to_path_buf(),
            });
            config
        };
        let source = boot(&config(&source_serial, &source_socket));

        // Linux's virtio_console found the named port beside port 0.
        let port = wait_line(
            &source_serial,
            "NESTED-AGENT-PORT ",
            Duration::from_secs(120),
        );
        let ports = wait_line(
            &source_serial,
            "NESTED-AGENT-PORTS ",
            Duration::from_secs(5),
        );
        println!("nested: the guest's virtio ports: {ports}; the agent's: {port}");
        assert!(
            port.starts_with("/dev/vport") && port.ends_with("p1"),
            "no port named org.qemu.guest_agent.0 in the guest: {port:?} (ports: {ports})"
        );

        // Guest -> host: the guest's write waited for this connection.
        let sending = wait_line(
            &source_serial,
            "NESTED-AGENT-SENDING ",
            Duration::from_secs(60),
        );
        assert_crc("what the guest sends", &sending);
        let mut client = UnixStream::connect(&source_socket).expect("connect to the agent socket");
        client
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        let mut got = vec![0u8; 256 << 10];
        client
            .read_exact(&mut got)
            .expect("read the guest's 256 KiB");
        assert_eq!(crc32(&got), sending, "the guest's bytes arrived otherwise");

        // Host -> guest.
        let payload: Vec<u8> = (0..(256u32 << 10))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        client.write_all(&payload).expect("send to the guest");
        assert_eq!(
            wait_line(&source_serial, "NESTED-AGENT-GOT ", Duration::from_secs(60)),
            format!("{} {}", crc32(&payload), payload.len()),
            "the guest received otherwise"
        );
        assert_eq!(
            agent_echo(&mut client, "before the migration"),
            "echo:before the migration"
        );

        // The port stays open in the guest across a live migration; the target listens on its
        // own socket, where the launcher reconnects.
        let (stats, mut target) = migrate(&source, config(&target_serial, &target_socket));
        println!(
            "nested: migrated with the agent port open: downtime {:?}, total {:?}",
            stats.downtime, stats.total
        );
        drop(client);
        let mut client =
            UnixStream::connect(&target_socket).expect("connect to the target's socket");
        client
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        assert_eq!(
            agent_echo(&mut client, "after the migration"),
            "echo:after the migration"
        );
        // A new client replaces the old one.
        let mut again = UnixStream::connect(&target_socket).expect("connect again");
        again
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        assert_eq!(agent_echo(&mut again, "a new client"), "echo:a new client");
        target.stop();
    });
}
