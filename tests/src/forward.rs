//! `virtctl` commands that run until stopped (`port-forward`, `vnc --proxy-only`), and what a
//! user does through them: read a TCP server's banner, exchange UDP datagrams with the guest.

use std::io::{BufRead, Read};
use std::time::{Duration, Instant};

use crate::{virtctl_args, virtctl_binary};

/// Runs virtctl with `args` in the background, gives the first line it prints to `client`, and
/// stops it once `client` returns; an error gets virtctl's stderr.
pub fn with_virtctl<T>(
    namespace: &str,
    args: &[&str],
    client: impl FnOnce(String) -> Result<T, String>,
) -> Result<T, String> {
    let mut child = std::process::Command::new(virtctl_binary())
        .args(virtctl_args(namespace, args))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning virtctl: {e}"))?;
    let result = child
        .stdout
        .take()
        .ok_or_else(|| "no stdout".to_string())
        .and_then(|stdout| {
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            client(line)
        });
    let _ = child.kill();
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    result.map_err(|e| {
        format!(
            "{e}; virtctl's stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// A free local port for `protocol` (`tcp` or `udp`).
pub fn free_port(protocol: &str) -> u16 {
    let port = if protocol == "udp" {
        std::net::UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr())
    } else {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr())
    };
    port.expect("a free local port").port()
}

/// Checks the line `virtctl port-forward` prints once it listens.
fn forwarding(line: &str) -> Result<(), String> {
    if line.starts_with("Forwarding from 127.0.0.1:") {
        Ok(())
    } else {
        Err(format!("virtctl printed {line:?}"))
    }
}

/// Runs `virtctl port-forward vmi/VM PORT:REMOTE` until it listens, connects to the local port
/// and reads the first line the guest sends (a server's banner); stops virtctl.
pub fn tcp_banner(namespace: &str, vm: &str, port: u16, remote: u16) -> Result<String, String> {
    let target = format!("vmi/{vm}");
    let ports = format!("{port}:{remote}");
    with_virtctl(namespace, &["port-forward", &target, &ports], |line| {
        forwarding(&line)?;
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let mut banner = Vec::new();
        let mut byte = [0u8; 1];
        while !banner.ends_with(b"\n") && banner.len() < 256 {
            match stream.read(&mut byte) {
                Ok(1) => banner.push(byte[0]),
                Ok(_) => break,
                Err(e) => return Err(format!("reading the banner: {e}")),
            }
        }
        Ok(String::from_utf8_lossy(&banner).into_owned())
    })
}

/// Runs `virtctl port-forward vmi/VM udp/PORT:REMOTE` until it listens, then, from one local
/// socket, sends each datagram of `exchanges` until its expected answer comes back. UDP may
/// lose either, so a datagram is sent again once a second, and a late answer to an earlier one
/// is skipped; the error after `within` lists what came back. Stops virtctl.
pub fn udp_exchange(
    namespace: &str,
    vm: &str,
    (port, remote): (u16, u16),
    exchanges: &[(&str, &str)],
    within: Duration,
) -> Result<(), String> {
    let target = format!("vmi/{vm}");
    let ports = format!("udp/{port}:{remote}");
    with_virtctl(namespace, &["port-forward", &target, &ports], |line| {
        forwarding(&line)?;
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        socket
            .connect(("127.0.0.1", port))
            .map_err(|e| e.to_string())?;
        socket
            .set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + within;
        let mut received = Vec::new();
        for (datagram, answer) in exchanges {
            while !received.iter().any(|got| got == answer) {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "no {answer:?} in answer to {datagram:?} within {within:?}; the \
                         answers: {received:?}"
                    ));
                }
                socket
                    .send(datagram.as_bytes())
                    .map_err(|e| format!("sending to the local port: {e}"))?;
                let mut buf = [0u8; 2048];
                match socket.recv(&mut buf) {
                    Ok(n) => received.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(e) => return Err(format!("receiving from the local port: {e}")),
                }
            }
        }
        Ok(())
    })
}
