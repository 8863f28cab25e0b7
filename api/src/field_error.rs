//! What is wrong with a field: its path ([`Path`], `spec.domain.devices.disks[1].name`), the
//! kind of problem ([`FieldErrorKind`]) and why ([`FieldError`]), and all of an object's
//! problems as one message ([`FieldErrors`]).
//!
//! They are the vocabulary of the `validation` module, which re-exports them, kept in a module
//! of their own at the bottom of the crate: the kinds' modules report the fields they do not
//! model with them (`other::reject_other`), and must not depend on the validation that depends
//! on them.

use std::fmt;

/// A field path such as `spec.domain.devices.disks[1].name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    pub fn root(name: &str) -> Path {
        Path(name.to_string())
    }

    pub fn child(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    pub fn index(&self, index: usize) -> Path {
        Path(format!("{}[{index}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What kind of problem a field has; maps onto the `StatusCause` types of the Kubernetes API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    Required,
    Invalid,
    Duplicate,
    /// A field or value KubeVirt has and Ferrovirt does not.
    NotSupported,
    /// A field neither KubeVirt nor Ferrovirt has.
    Unknown,
    /// A change the API does not allow after creation.
    Forbidden,
}

impl FieldErrorKind {
    /// The `StatusCause.reason` Kubernetes uses for this kind.
    pub fn cause_type(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid | FieldErrorKind::Unknown => "FieldValueInvalid",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
        }
    }
}

/// One thing wrong with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub kind: FieldErrorKind,
    pub message: String,
}

impl FieldError {
    pub fn new(path: Path, kind: FieldErrorKind, message: impl Into<String>) -> Self {
        FieldError {
            field: path.0,
            kind,
            message: message.into(),
        }
    }

    pub fn required(path: Path, message: impl Into<String>) -> Self {
        Self::new(path, FieldErrorKind::Required, message)
    }

    pub fn invalid(path: Path, message: impl Into<String>) -> Self {
        Self::new(path, FieldErrorKind::Invalid, message)
    }

    pub fn duplicate(path: Path, value: &str) -> Self {
        Self::new(
            path,
            FieldErrorKind::Duplicate,
            format!("{value:?} is used more than once"),
        )
    }

    /// A KubeVirt field that Ferrovirt does not support.
    pub fn not_supported(path: Path) -> Self {
        Self::new(
            path,
            FieldErrorKind::NotSupported,
            "not supported by ferrovirt",
        )
    }

    /// A value KubeVirt accepts and Ferrovirt does not, with what Ferrovirt accepts.
    pub fn value_not_supported(path: Path, value: &str, supported: &str) -> Self {
        Self::new(
            path,
            FieldErrorKind::NotSupported,
            format!("{value:?} is not supported by ferrovirt: {supported}"),
        )
    }

    pub fn unknown(path: Path) -> Self {
        Self::new(path, FieldErrorKind::Unknown, "unknown field")
    }

    pub fn forbidden(path: Path, message: impl Into<String>) -> Self {
        Self::new(path, FieldErrorKind::Forbidden, message)
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All errors of one object, printable as one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FieldErrors {}
