//! A stand-in for virt-handler's subresource server, run on the host by the cluster test.

use std::io::Write;

use super::Run;

/// What the fake virt-handler saw on one connection.
pub struct HandlerSession {
    /// The request head virt-api sent.
    pub request: String,
    /// The console bytes that reached it (console connections only).
    pub typed: Vec<u8>,
}

impl Run {
    /// A stand-in for virt-handler's subresource server on the host, serving `connections`
    /// connections one after the other. It checks nothing itself and records each request
    /// head. A console upgrade is answered with 101, a login prompt, and `echo:<chunk>` for
    /// each chunk received until the connection closes; any other request with 200.
    pub fn fake_handler(&self, connections: usize) -> std::thread::JoinHandle<Vec<HandlerSession>> {
        let listener = std::net::TcpListener::bind(("0.0.0.0", self.handler_port))
            .expect("binding the fake handler's port");
        std::thread::spawn(move || {
            (0..connections)
                .map(|_| {
                    let (stream, _) = listener.accept().expect("virt-api connects");
                    serve_connection(stream)
                })
                .collect()
        })
    }
}

fn serve_connection(mut stream: std::net::TcpStream) -> HandlerSession {
    use std::io::Read;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let request = String::from_utf8_lossy(&head).into_owned();
    let mut typed = Vec::new();
    if !request
        .to_ascii_lowercase()
        .contains("upgrade: ferrovirt-console")
    {
        let _ =
            stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return HandlerSession { request, typed };
    }
    stream
        .write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
              Upgrade: ferrovirt-console\r\n\r\n\r\nfake-guest login: ",
        )
        .expect("answering virt-api");
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        typed.extend_from_slice(&buf[..n]);
        let mut echo = b"echo:".to_vec();
        echo.extend_from_slice(&buf[..n]);
        if stream.write_all(&echo).is_err() {
            break;
        }
    }
    HandlerSession { request, typed }
}
