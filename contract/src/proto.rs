//! The generated `launcher.v1` gRPC code (from `proto/launcher.proto`, compiled by `build.rs`):
//! messages, the `Launcher` service the launcher serves and the `Notify` service the handler
//! serves, each with its client.
//!
//! Wire compatibility: the package stays `launcher.v1`; fields are only ever added with new
//! numbers, never renumbered or removed (see [`crate::version`]).

/// `launcher.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("launcher.v1");
}

/// The `Info` answer of a launcher of version `launcher_version` that speaks
/// [`crate::version::SUPPORTED_VERSIONS`].
pub fn info_response(launcher_version: &str) -> v1::InfoResponse {
    v1::InfoResponse {
        supported_versions: crate::version::SUPPORTED_VERSIONS
            .iter()
            .map(|v| v.to_string())
            .collect(),
        launcher_version: launcher_version.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::negotiate;

    #[test]
    fn a_handler_of_this_version_agrees_with_a_launcher_of_this_version() {
        let info = info_response("0.1.0");
        assert_eq!(info.launcher_version, "0.1.0");
        assert_eq!(
            negotiate(&info.supported_versions),
            Ok(crate::version::CURRENT)
        );
    }
}
