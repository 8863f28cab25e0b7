//! The error of a reconcile pass.

use crate::pod::RenderError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API")]
    Kube(#[from] kube::Error),
    #[error("the object has no namespace")]
    NotNamespaced,
    #[error("the object has no UID")]
    NoUid,
    #[error("rendering the launcher Pod")]
    Render(#[source] RenderError),
}
