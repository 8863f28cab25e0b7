//! The test guests on this host's /dev/kvm through the VMM: serial, virtio-blk (read/write
//! verified in the host file, read-only refusal), virtio-rng, virtio-net through a tap the test
//! creates, with the frame checked on the host side.

mod common;

use std::process::Command;

use common::*;
use vmm::config::{DiskConfig, NetConfig, RngConfig};
use vmm::lifecycle::VmExit;

#[test]
fn serial_guest_prints_and_powers_off() {
    let scratch = Scratch::new("serial");
    let serial = scratch.path("serial.log");
    let (exit, log) = run_to_exit(&config("serial", &serial), &serial);
    assert_lines(
        &log,
        &[
            "hello from the ferrovirt serial test guest",
            "TEST serial ok",
        ],
    );
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
}

fn disk_image(path: &std::path::Path) {
    let mut disk = vec![0u8; 1 << 20];
    disk[..18].copy_from_slice(b"FERROVIRT-SECTOR-0");
    std::fs::write(path, disk).expect("write the disk image");
}

#[test]
fn blk_guest_reads_and_writes_the_host_file() {
    let scratch = Scratch::new("blk");
    let serial = scratch.path("serial.log");
    let disk = scratch.path("disk.img");
    disk_image(&disk);
    let mut cfg = config("blk", &serial);
    cfg.disks.push(DiskConfig {
        id: "scratch-disk".into(),
        path: disk.clone(),
        readonly: false,
    });
    let (exit, log) = run_to_exit(&cfg, &serial);
    assert_lines(
        &log,
        &[
            "TEST blk capacity 0000000000000800",
            "TEST blk id scratch-disk",
            "TEST blk read ok",
            "TEST blk write status 00",
            "TEST blk write ok",
            "TEST blk flush ok",
            "TEST blk ok",
        ],
    );
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
    let bytes = std::fs::read(&disk).unwrap();
    let text = b"FERROVIRT-GUEST-WROTE-SECTOR-1\n";
    assert_eq!(&bytes[512..512 + text.len()], text);
    for (i, b) in bytes[512 + text.len()..1024].iter().enumerate() {
        assert_eq!(
            usize::from(*b),
            (i + text.len()) % 256,
            "sector 1 byte {}",
            i + text.len()
        );
    }
    assert_eq!(&bytes[..18], b"FERROVIRT-SECTOR-0");
    assert!(bytes[1024..].iter().all(|b| *b == 0));
}

#[test]
fn blk_guest_cannot_write_a_readonly_disk() {
    let scratch = Scratch::new("blk-ro");
    let serial = scratch.path("serial.log");
    let disk = scratch.path("disk.img");
    disk_image(&disk);
    let before = std::fs::read(&disk).unwrap();
    let mut cfg = config("blk", &serial);
    cfg.disks.push(DiskConfig {
        id: "ro".into(),
        path: disk.clone(),
        readonly: true,
    });
    let (exit, log) = run_to_exit(&cfg, &serial);
    assert_lines(
        &log,
        &[
            "TEST blk readonly",
            "TEST blk read ok",
            "TEST blk write status 01",
        ],
    );
    assert!(!log.contains("TEST blk ok"), "{log}");
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
    assert_eq!(std::fs::read(&disk).unwrap(), before);
}

#[test]
fn rng_guest_reads_entropy() {
    let scratch = Scratch::new("rng");
    let serial = scratch.path("serial.log");
    let mut cfg = config("rng", &serial);
    cfg.rng = Some(RngConfig::default());
    let (exit, log) = run_to_exit(&cfg, &serial);
    assert_lines(&log, &["TEST rng ok"]);
    let bytes = log
        .lines()
        .find_map(|l| l.strip_prefix("TEST rng bytes "))
        .unwrap_or_else(|| panic!("no rng bytes line; log:\n{log}"));
    assert_eq!(bytes.len(), 32, "{bytes}");
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
}

/// A tap interface created for one test, deleted on drop.
struct TestTap(String);

impl TestTap {
    fn create(name: &str) -> TestTap {
        let _ = Command::new("ip")
            .args(["link", "del", name])
            .stderr(std::process::Stdio::null())
            .status();
        let ok = |args: &[&str]| {
            let status = Command::new("ip").args(args).status();
            assert!(
                matches!(status, Ok(s) if s.success()),
                "`ip {}` failed: the net test needs root (CAP_NET_ADMIN) and iproute2",
                args.join(" ")
            );
        };
        ok(&["tuntap", "add", "dev", name, "mode", "tap"]);
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
        ok(&["link", "set", name, "up"]);
        TestTap(name.into())
    }
}

impl Drop for TestTap {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

mod packet {
    //! A raw AF_PACKET socket on one interface: the host side of the net test.
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    pub struct PacketSocket(OwnedFd);

    const ETH_P_ALL: u16 = 0x0003;

    impl PacketSocket {
        pub fn bind(ifname: &str) -> io::Result<PacketSocket> {
            let name = std::ffi::CString::new(ifname).map_err(io::Error::other)?;
            // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
            let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
            if index == 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: plain socket(2) call; the result is checked before use.
            let fd = unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW,
                    i32::from(ETH_P_ALL.to_be()),
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` is a fresh socket we own.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: sockaddr_ll is plain old data; all-zero is a valid starting value.
            let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            addr.sll_family = libc::AF_PACKET as u16;
            addr.sll_protocol = ETH_P_ALL.to_be();
            addr.sll_ifindex = index as i32;
            // SAFETY: `addr` is a valid sockaddr_ll and its size is passed with it.
            let ret = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            if ret < 0 {
                return Err(io::Error::last_os_error());
            }
            let timeout = libc::timeval {
                tv_sec: 0,
                tv_usec: 200_000,
            };
            // SAFETY: SO_RCVTIMEO reads a timeval of the given size.
            let ret = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    &timeout as *const libc::timeval as *const libc::c_void,
                    std::mem::size_of::<libc::timeval>() as u32,
                )
            };
            if ret < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(PacketSocket(fd))
        }

        /// One frame, or None when nothing arrived within the receive timeout.
        pub fn recv(&self) -> io::Result<Option<Vec<u8>>> {
            let mut buf = vec![0u8; 2048];
            // SAFETY: `buf` is valid for writes of its length.
            let n = unsafe {
                libc::recv(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Ok(None),
                    _ => Err(e),
                };
            }
            buf.truncate(n as usize);
            Ok(Some(buf))
        }

        pub fn send(&self, frame: &[u8]) -> io::Result<()> {
            // SAFETY: `frame` is valid for reads of its length.
            let n = unsafe {
                libc::send(
                    self.0.as_raw_fd(),
                    frame.as_ptr() as *const libc::c_void,
                    frame.len(),
                    0,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
    }

    pub const POLL: Duration = Duration::from_millis(200);
}

#[test]
fn net_guest_exchanges_frames_with_a_tap() {
    let scratch = Scratch::new("net");
    let serial = scratch.path("serial.log");
    let tap = TestTap::create(&format!("fvt{}", std::process::id() % 100_000));
    let host = packet::PacketSocket::bind(&tap.0).expect("bind a packet socket to the tap");
    let mac = [0x02, 0x00, 0x00, 0x00, 0x00, 0x07];
    let mut cfg = config("net", &serial);
    cfg.net.push(NetConfig {
        id: "net0".into(),
        tap: tap.0.clone(),
        mac: "02:00:00:00:00:07".into(),
    });
    let mut vm = vmm::builder::build_and_boot(&cfg).expect("build and boot the VM");

    // The guest's frame, seen on the host side of the tap.
    let deadline = std::time::Instant::now() + GUEST_DEADLINE;
    let frame = loop {
        if let Some(frame) = host.recv().expect("receive on the tap") {
            if frame.len() >= 30 && frame[12..14] == [0x88, 0xb5] {
                break frame;
            }
        }
        if std::time::Instant::now() > deadline {
            let exit = vm.stop();
            panic!(
                "no 0x88b5 frame from the guest on the tap ({exit}); serial:\n{}",
                serial_log(&serial)
            );
        }
    };
    assert_eq!(&frame[..6], &[0xff; 6], "broadcast destination");
    assert_eq!(&frame[6..12], &mac, "guest MAC as source");
    assert_eq!(&frame[14..30], b"FERROVIRT-NET-TX");
    let _ = packet::POLL;

    // Answer to the guest's MAC.
    let mut reply = Vec::new();
    reply.extend_from_slice(&mac);
    reply.extend_from_slice(&[0x02, 0, 0, 0, 0, 0xfe, 0x88, 0xb5]);
    reply.extend_from_slice(b"FERROVIRT-NET-RX");
    reply.resize(60, 0);
    host.send(&reply).expect("send the reply frame");

    let exit = wait_for_exit(&mut vm, &serial);
    let log = serial_log(&serial);
    assert_lines(
        &log,
        &[
            "TEST net mac 02:00:00:00:00:07",
            "TEST net tx ok",
            "TEST net rx ok",
            "TEST net ok",
        ],
    );
    assert_eq!(exit, VmExit::PowerOff { code: 0 });
}
