//! The paths of the subresource server and the launcher calls behind them.

use std::path::Path;
use std::time::Duration;

use contract::proto::v1::VmiRequest;
use http::{Method, StatusCode};

/// A launcher call the server makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmiAction {
    Pause,
    Unpause,
    Reset,
}

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandlerRoute {
    Action(String, VmiAction),
    Console(String),
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
        (&Method::PUT, ["v1", "vmis", uid, action]) if valid_uid(uid) => {
            let action = match *action {
                "pause" => VmiAction::Pause,
                "unpause" => VmiAction::Unpause,
                "reset" => VmiAction::Reset,
                _ => return HandlerRoute::NotFound,
            };
            HandlerRoute::Action(uid.to_string(), action)
        }
        (&Method::GET, ["v1", "vmis", uid, "console"]) if valid_uid(uid) => {
            HandlerRoute::Console(uid.to_string())
        }
        _ => HandlerRoute::NotFound,
    }
}

/// Longest a launcher call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Calls the launcher; errors as (HTTP status, message).
pub async fn call_launcher(
    socket: &Path,
    uid: &str,
    action: VmiAction,
) -> Result<(), (StatusCode, String)> {
    if !socket.exists() {
        return Err((
            StatusCode::NOT_FOUND,
            format!("no launcher for VMI {uid} on this node"),
        ));
    }
    let mut client = contract::client::launcher_client(socket).map_err(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("launcher socket: {e}"),
        )
    })?;
    let request = VmiRequest {
        vmi: uid.to_string(),
    };
    let call = async {
        match action {
            VmiAction::Pause => client.pause(request).await,
            VmiAction::Unpause => client.unpause(request).await,
            VmiAction::Reset => client.reset(request).await,
        }
    };
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err((status_code(status.code()), status.message().to_string())),
        Err(_) => Err((
            StatusCode::GATEWAY_TIMEOUT,
            format!("the launcher did not answer within {CALL_TIMEOUT:?}"),
        )),
    }
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
