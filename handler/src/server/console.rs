//! The console relay on the handler side: the upgraded HTTP connection from virt-api and the
//! launcher's `console-sock` (a unix socket that streams the guest's serial port and takes its
//! input; several clients may be connected) are copied into each other until either closes.
//!
//! A VMI has one console at a time, as in KubeVirt: a new connection closes the one before
//! (its client reads EOF), so that two users never type into one shell unknowingly.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use contract::sockets::CONSOLE_SOCKET;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::Notify;

use super::{text, ServerConfig, CONSOLE_UPGRADE};

/// A console's number and the signal that ends its relay.
type OpenConsole = (u64, Arc<Notify>);

/// The open console of each VMI (by UID).
#[derive(Clone, Debug, Default)]
pub struct Consoles {
    open: Arc<Mutex<HashMap<String, OpenConsole>>>,
    next: Arc<AtomicU64>,
}

impl Consoles {
    /// Records a new console of `uid` and tells the one it replaces to close. Returns its
    /// number and the signal that will close it in turn.
    fn open(&self, uid: &str) -> (u64, Arc<Notify>) {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let stop = Arc::new(Notify::new());
        // A poisoned map only means a relay panicked while holding it; the map is still whole.
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, previous)) = open.insert(uid.to_string(), (number, stop.clone())) {
            // notify_one keeps the signal for a relay that is not waiting yet.
            previous.notify_one();
        }
        (number, stop)
    }

    /// Forgets `uid`'s console `number` once its relay ended, unless a newer one replaced it.
    fn ended(&self, uid: &str, number: u64) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.get(uid).is_some_and(|(n, _)| *n == number) {
            open.remove(uid);
        }
    }
}

/// Connects to the console socket, answers 101 and relays in the background.
pub async fn open(
    config: &ServerConfig,
    uid: &str,
    mut request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if !super::asks_for_upgrade(&request, CONSOLE_UPGRADE) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("the console needs Connection: Upgrade, Upgrade: {CONSOLE_UPGRADE}"),
        );
    }
    let path = config.socket_root.join(uid).join(CONSOLE_SOCKET);
    let mut socket = match UnixStream::connect(&path).await {
        Ok(socket) => socket,
        Err(e) => {
            return text(
                StatusCode::NOT_FOUND,
                format!("no console for VMI {uid} on this node: {e}"),
            )
        }
    };
    let upgrade = hyper::upgrade::on(&mut request);
    let uid = uid.to_string();
    let consoles = config.consoles.clone();
    let (number, stop) = consoles.open(&uid);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let mut upgraded = TokioIo::new(upgraded);
                tokio::select! {
                    copied = tokio::io::copy_bidirectional(&mut upgraded, &mut socket) => {
                        match copied {
                            Ok((to_guest, from_guest)) => log::info!(
                                "console of {uid} closed ({to_guest} bytes in, {from_guest} bytes out)"
                            ),
                            Err(e) => log::info!("console of {uid} closed: {e}"),
                        }
                    }
                    _ = stop.notified() => {
                        log::info!("console of {uid}: a new connection closes this one");
                        let _ = upgraded.shutdown().await;
                    }
                }
            }
            Err(e) => log::warn!("console of {uid}: upgrade failed: {e}"),
        }
        consoles.ended(&uid, number);
    });
    super::switching_protocols(CONSOLE_UPGRADE)
}
