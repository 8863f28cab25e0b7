//! Versions of the handler <-> launcher API and the rule that lets the two be upgraded apart.
//!
//! A launcher lives as long as its VM, so during an upgrade a new virt-handler drives the
//! launchers an older one started. The rule, KubeVirt's:
//! 1. the launcher lists the versions it speaks in `Info.supported_versions` (and its own
//!    build in `Info.launcher_version`);
//! 2. the handler calls `Info` first and uses the newest version both know ([`negotiate`]); a
//!    launcher that shares none is left alone and reported;
//! 3. within a version, messages only grow: fields are added with new numbers, never
//!    renumbered, retyped or removed, and an unset new field means what the old behaviour was.
//!    A change that cannot follow that rule is a new version (`launcher.v2`), served beside the
//!    old one for at least one release.

/// The version this build speaks natively.
pub const CURRENT: &str = "v1";

/// Every version this build speaks, oldest first.
pub const SUPPORTED_VERSIONS: &[&str] = &[CURRENT];

/// The launcher offered no version this handler speaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the launcher speaks {offered:?}, none of which this handler knows ({SUPPORTED_VERSIONS:?})"
)]
pub struct NoCommonVersion {
    pub offered: Vec<String>,
}

/// The newest of [`SUPPORTED_VERSIONS`] that the launcher also `offered`.
pub fn negotiate<S: AsRef<str>>(offered: &[S]) -> Result<&'static str, NoCommonVersion> {
    SUPPORTED_VERSIONS
        .iter()
        .rev()
        .find(|ours| offered.iter().any(|theirs| theirs.as_ref() == **ours))
        .copied()
        .ok_or_else(|| NoCommonVersion {
            offered: offered.iter().map(|v| v.as_ref().to_string()).collect(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_common_version_wins() {
        assert_eq!(negotiate(&["v1"]), Ok("v1"));
        // A newer launcher that also speaks a version this handler does not know.
        assert_eq!(negotiate(&["v2", "v1"]), Ok("v1"));
        assert_eq!(negotiate(&["v1", "v2"]), Ok("v1"));
    }

    #[test]
    fn no_common_version() {
        assert_eq!(
            negotiate(&["v2"]),
            Err(NoCommonVersion {
                offered: vec!["v2".into()]
            })
        );
        assert!(negotiate::<&str>(&[]).is_err());
    }

    #[test]
    fn current_is_the_newest_supported() {
        assert_eq!(SUPPORTED_VERSIONS.last(), Some(&CURRENT));
    }
}
