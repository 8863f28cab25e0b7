//! The paths of the subresource server and the launcher calls behind them.

use std::path::Path;
use std::time::Duration;

use contract::proto::v1::{FreezeRequest, GetDomainRequest, GuestAgent, VmiRequest};
use http::{Method, StatusCode};
use tonic::transport::Channel;

use super::guest_info::GuestInfoKind;
use super::portforward::Protocol;

type LauncherClient = contract::proto::v1::launcher_client::LauncherClient<Channel>;

/// A launcher call the server makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmiAction {
    Pause,
    Unpause,
    Reset,
    SoftReboot,
    /// Freeze, thawed by the launcher after this many seconds (0: never).
    Freeze(u64),
    Unfreeze,
}

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandlerRoute {
    Action(String, VmiAction),
    Console(String),
    /// The VM's VNC display, relayed.
    Vnc(String),
    /// A PNG of the VM's screen.
    VncScreenshot(String),
    GuestInfo(String, GuestInfoKind),
    /// A port of the guest, over TCP or UDP.
    PortForward(String, u16, Protocol),
    NotFound,
}

/// A UID names a directory: only letters, digits and dashes, so it cannot climb out.
fn valid_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= 64
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

pub fn route(method: &Method, path: &str) -> HandlerRoute {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    match (method, parts.as_slice()) {
        (&Method::PUT, ["v1", "vmis", uid, "freeze", seconds]) if valid_uid(uid) => {
            match seconds.parse::<u64>() {
                Ok(seconds) => HandlerRoute::Action(uid.to_string(), VmiAction::Freeze(seconds)),
                Err(_) => HandlerRoute::NotFound,
            }
        }
        (&Method::PUT, ["v1", "vmis", uid, action]) if valid_uid(uid) => {
            let action = match *action {
                "pause" => VmiAction::Pause,
                "unpause" => VmiAction::Unpause,
                "reset" => VmiAction::Reset,
                "softreboot" => VmiAction::SoftReboot,
                "unfreeze" => VmiAction::Unfreeze,
                _ => return HandlerRoute::NotFound,
            };
            HandlerRoute::Action(uid.to_string(), action)
        }
        (&Method::GET, ["v1", "vmis", uid, "console"]) if valid_uid(uid) => {
            HandlerRoute::Console(uid.to_string())
        }
        (&Method::GET, ["v1", "vmis", uid, "vnc"]) if valid_uid(uid) => {
            HandlerRoute::Vnc(uid.to_string())
        }
        (&Method::GET, ["v1", "vmis", uid, "vnc", "screenshot"]) if valid_uid(uid) => {
            HandlerRoute::VncScreenshot(uid.to_string())
        }
        (&Method::GET, ["v1", "vmis", uid, "portforward", port, protocol @ ..])
            if valid_uid(uid) && protocol.len() <= 1 =>
        {
            let protocol = match protocol.first() {
                None => Some(Protocol::Tcp),
                Some(name) => Protocol::parse(name),
            };
            match (port.parse::<u16>(), protocol) {
                (Ok(port), Some(protocol)) if port > 0 => {
                    HandlerRoute::PortForward(uid.to_string(), port, protocol)
                }
                _ => HandlerRoute::NotFound,
            }
        }
        (&Method::GET, ["v1", "vmis", uid, what]) if valid_uid(uid) => {
            match GuestInfoKind::parse(what) {
                Some(kind) => HandlerRoute::GuestInfo(uid.to_string(), kind),
                None => HandlerRoute::NotFound,
            }
        }
        _ => HandlerRoute::NotFound,
    }
}

/// Longest a launcher call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A client of the VMI's launcher; 404 when this node runs none.
fn launcher(socket: &Path, uid: &str) -> Result<LauncherClient, (StatusCode, String)> {
    if !socket.exists() {
        return Err((
            StatusCode::NOT_FOUND,
            format!("no launcher for VMI {uid} on this node"),
        ));
    }
    contract::client::launcher_client(socket).map_err(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("launcher socket: {e}"),
        )
    })
}

/// Runs one launcher call within [`CALL_TIMEOUT`]; errors as (HTTP status, message).
async fn within_timeout<T>(
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, (StatusCode, String)> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err((status_code(status.code()), status.message().to_string())),
        Err(_) => Err((
            StatusCode::GATEWAY_TIMEOUT,
            format!("the launcher did not answer within {CALL_TIMEOUT:?}"),
        )),
    }
}

/// Calls the launcher; errors as (HTTP status, message).
pub async fn call_launcher(
    socket: &Path,
    uid: &str,
    action: VmiAction,
) -> Result<(), (StatusCode, String)> {
    let mut client = launcher(socket, uid)?;
    let request = VmiRequest {
        vmi: uid.to_string(),
    };
    match action {
        VmiAction::Pause => within_timeout(client.pause(request)).await,
        VmiAction::Unpause => within_timeout(client.unpause(request)).await,
        VmiAction::Reset => within_timeout(client.reset(request)).await,
        VmiAction::SoftReboot => within_timeout(client.soft_reboot(request)).await,
        VmiAction::Unfreeze => within_timeout(client.unfreeze(request)).await,
        VmiAction::Freeze(seconds) => {
            let request = FreezeRequest {
                vmi: request.vmi,
                unfreeze_timeout_seconds: seconds,
            };
            within_timeout(client.freeze(request)).await
        }
    }
    .map(drop)
}

/// What the launcher last heard from the VMI's guest agent (`None`: it has no agent channel).
pub async fn guest_agent(
    socket: &Path,
    uid: &str,
) -> Result<Option<GuestAgent>, (StatusCode, String)> {
    let mut client = launcher(socket, uid)?;
    let response = within_timeout(client.get_domain(GetDomainRequest {})).await?;
    let domain = response.domain.ok_or_else(|| {
        (
            StatusCode::CONFLICT,
            format!("the launcher of VMI {uid} runs no VM"),
        )
    })?;
    Ok(domain.guest_agent)
}

/// A PNG of the VMI's screen, taken by the launcher (409 when its VM has no graphics device).
pub async fn screenshot(socket: &Path, uid: &str) -> Result<Vec<u8>, (StatusCode, String)> {
    let mut client = launcher(socket, uid)?;
    let request = VmiRequest {
        vmi: uid.to_string(),
    };
    let response = within_timeout(client.screenshot(request)).await?;
    Ok(response.png)
}

/// The HTTP status of a launcher's gRPC status (see launcher.proto's error conventions).
pub fn status_code(code: tonic::Code) -> StatusCode {
    match code {
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        tonic::Code::FailedPrecondition => StatusCode::CONFLICT,
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let uid = "6a3c9e4b-0000-4000-8000-000000000001";
        assert_eq!(
            route(&Method::PUT, &format!("/v1/vmis/{uid}/pause")),
            HandlerRoute::Action(uid.into(), VmiAction::Pause)
        );
        assert_eq!(
            route(&Method::GET, &format!("/v1/vmis/{uid}/console")),
            HandlerRoute::Console(uid.into())
        );
        assert_eq!(
            route(&Method::GET, &format!("/v1/vmis/{uid}/pause")),
            HandlerRoute::NotFound
        );
        assert_eq!(
            route(&Method::GET, "/v1/vmis/../console"),
            HandlerRoute::NotFound
        );
        assert_eq!(
            route(&Method::PUT, "/v1/vmis/a/shutdown"),
            HandlerRoute::NotFound
        );
        assert_eq!(
            route(&Method::PUT, &format!("/v1/vmis/{uid}/softreboot")),
            HandlerRoute::Action(uid.into(), VmiAction::SoftReboot)
        );
        assert_eq!(
            route(&Method::GET, &format!("/v1/vmis/{uid}/filesystemlist")),
            HandlerRoute::GuestInfo(uid.into(), GuestInfoKind::FilesystemList)
        );
        assert_eq!(
            route(&Method::GET, &format!("/v1/vmis/{uid}/shutdown")),
            HandlerRoute::NotFound
        );
        assert_eq!(
            route(&Method::PUT, &format!("/v1/vmis/{uid}/freeze/300")),
            HandlerRoute::Action(uid.into(), VmiAction::Freeze(300))
        );
        assert_eq!(
            route(&Method::PUT, &format!("/v1/vmis/{uid}/unfreeze")),
            HandlerRoute::Action(uid.into(), VmiAction::Unfreeze)
        );
        assert_eq!(
            route(&Method::PUT, &format!("/v1/vmis/{uid}/freeze/soon")),
            HandlerRoute::NotFound
        );
        assert_eq!(
            route(&Method::GET, &format!("/v1/vmis/{uid}/portforward/22")),
            HandlerRoute::PortForward(uid.into(), 22, Protocol::Tcp)
        );
        assert_eq!(
            route(&Method::GET, &format!("/v1/vmis/{uid}/portforward/22/tcp")),
            HandlerRoute::PortForward(uid.into(), 22, Protocol::Tcp)
        );
        assert_eq!(
            route(&Method::GET, &format!("/v1/vmis/{uid}/portforward/53/udp")),
            HandlerRoute::PortForward(uid.into(), 53, Protocol::Udp)
        );
        assert_eq!(
            route(&Method::GET, &format!("/v1/vmis/{uid}/vnc")),
            HandlerRoute::Vnc(uid.into())
        );
        assert_eq!(
            route(&Method::GET, &format!("/v1/vmis/{uid}/vnc/screenshot/")),
            HandlerRoute::VncScreenshot(uid.into())
        );
        for bad in [
            (Method::PUT, "vnc"),
            (Method::PUT, "vnc/screenshot"),
            (Method::GET, "vnc/other"),
            (Method::GET, "vnc/screenshot/x"),
        ] {
            assert_eq!(
                route(&bad.0, &format!("/v1/vmis/{uid}/{}", bad.1)),
                HandlerRoute::NotFound,
                "{bad:?}"
            );
        }
        assert_eq!(
            route(&Method::GET, "/v1/vmis/../vnc/screenshot"),
            HandlerRoute::NotFound
        );
        for bad in ["0", "65536", "ssh", "53/sctp", "53/udp/x"] {
            assert_eq!(
                route(&Method::GET, &format!("/v1/vmis/{uid}/portforward/{bad}")),
                HandlerRoute::NotFound
            );
        }
    }

    #[test]
    fn grpc_codes_map_to_http() {
        assert_eq!(
            status_code(tonic::Code::FailedPrecondition),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status_code(tonic::Code::Internal),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
