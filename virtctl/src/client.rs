//! Talking to kube-apiserver: kubeconfig handling and the subresource calls.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::ApiCall;

/// Why a call failed, in the words virtctl prints.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Config(String),
    /// The server answered with an error status; its message is what the user needs.
    #[error("{0}")]
    Server(String),
    #[error("{0}")]
    Transport(String),
}

/// Loads the kubeconfig (`--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`, else the
/// in-cluster account). `streaming` drops the read timeout, for the console.
pub async fn config(kubeconfig: Option<&Path>, streaming: bool) -> Result<Config, CallError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                CallError::Config(format!("reading kubeconfig {}: {e}", path.display()))
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| CallError::Config(format!("kubeconfig {}: {e}", path.display())))?
        }
        None => Config::infer().await.map_err(|e| {
            CallError::Config(format!(
                "no usable kubeconfig (set KUBECONFIG or --kubeconfig): {e}"
            ))
        })?,
    };
    if streaming {
        config.read_timeout = None;
    }
    Ok(config)
}

pub fn client(config: Config) -> Result<Client, CallError> {
    Client::try_from(config).map_err(|e| CallError::Config(format!("building the client: {e}")))
}

/// The message of a kube error as kubectl would print it.
pub fn error_text(error: kube::Error) -> CallError {
    match error {
        kube::Error::Api(status) => CallError::Server(status.message),
        other => CallError::Transport(other.to_string()),
    }
}

/// Makes the call; returns the response body.
pub async fn send(client: &Client, call: &ApiCall) -> Result<String, CallError> {
    let request = http::Request::builder()
        .method(call.method.clone())
        .uri(&call.path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(call.body.clone())
        .map_err(|e| CallError::Transport(e.to_string()))?;
    client.request_text(request).await.map_err(error_text)
}

/// Makes the call; returns the response body as it is (a screenshot's PNG). An error status
/// gives the Status's message, as [`send`] does.
pub async fn send_bytes(client: &Client, call: &ApiCall) -> Result<Vec<u8>, CallError> {
    use http_body_util::BodyExt;
    let request = http::Request::builder()
        .method(call.method.clone())
        .uri(&call.path)
        .body(kube::client::Body::from(call.body.clone()))
        .map_err(|e| CallError::Transport(e.to_string()))?;
    let response = client
        .send(request)
        .await
        .map_err(|e| CallError::Transport(e.to_string()))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| CallError::Transport(e.to_string()))?
        .to_bytes()
        .to_vec();
    if status.is_success() {
        Ok(body)
    } else {
        Err(CallError::Server(crate::websocket::status_message(
            status, &body,
        )))
    }
}
