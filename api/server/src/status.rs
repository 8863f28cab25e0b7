//! Errors answered as Kubernetes `Status` objects, the way kube-apiserver and KubeVirt do, so
//! kubectl and virtctl print their message.

use http::StatusCode;

/// An HTTP error with the message a client shows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
    /// 422 `Invalid`: the object asks for something that cannot be done, with the field path
    /// in the message (`spec.instancetype: not supported by ferrovirt`).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }

    /// Maps an error from kube-apiserver: its code and message pass through.
    pub fn from_kube(context: &str, error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => {
                let code =
                    StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                Self::new(code, status.message)
            }
            other => Self::internal(format!("{context}: {other}")),
        }
    }

    /// The `reason` Kubernetes gives this code.
    fn reason(&self) -> &'static str {
        match self.code {
            StatusCode::BAD_REQUEST => "BadRequest",
            StatusCode::UNAUTHORIZED => "Unauthorized",
            StatusCode::FORBIDDEN => "Forbidden",
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
            StatusCode::CONFLICT => "Conflict",
            StatusCode::UNPROCESSABLE_ENTITY => "Invalid",
            _ => "InternalError",
        }
    }

    /// The body: a `v1.Status` with `status: Failure`.
    pub fn to_status_json(&self) -> Vec<u8> {
        let status = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason(),
            "code": self.code.as_u16(),
        });
        status.to_string().into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_body_has_code_reason_and_message() {
        let e = ApiError::conflict("VM is not running");
        let v: serde_json::Value = serde_json::from_slice(&e.to_status_json()).unwrap();
        assert_eq!(v["code"], 409);
        assert_eq!(v["reason"], "Conflict");
        assert_eq!(v["message"], "VM is not running");
        assert_eq!(v["status"], "Failure");
        let e = ApiError::invalid("spec.instancetype: not supported by ferrovirt");
        let v: serde_json::Value = serde_json::from_slice(&e.to_status_json()).unwrap();
        assert_eq!(v["code"], 422);
        assert_eq!(v["reason"], "Invalid");
    }
}
