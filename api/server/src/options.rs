//! The request bodies of the `subresources.kubevirt.io/v1` API (`v1.StartOptions`,
//! `v1.StopOptions`, ...), field for field as in KubeVirt's OpenAPI document. virtctl sends
//! them, virt-api reads them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The dry-run value KubeVirt accepts: `["All"]`.
pub const DRY_RUN_ALL: &str = "All";

/// Body of `PUT .../virtualmachines/{name}/start`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

/// Body of `PUT .../virtualmachines/{name}/stop`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<String>,
    /// Overrides the VMI's `terminationGracePeriodSeconds` for this stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<i64>,
}

/// Body of `PUT .../virtualmachines/{name}/restart`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
}

/// Body of `PUT .../virtualmachines/{name}/migrate`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrateOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_node_selector: Option<BTreeMap<String, String>>,
}

/// Body of `pause` and `unpause` (`v1.PauseOptions`, `v1.UnpauseOptions`: the same fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<String>,
}

/// Body of `freeze` (`v1.FreezeUnfreezeTimeout`): how long the guest stays frozen at most.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FreezeUnfreezeTimeout {
    /// A Go duration (`5m0s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfreeze_timeout: Option<String>,
}

impl FreezeUnfreezeTimeout {
    /// The timeout in whole seconds; it must be set.
    pub fn seconds(&self) -> Result<u64, String> {
        let text = self
            .unfreeze_timeout
            .as_deref()
            .ok_or("Unfreeze timeout must be set")?;
        let duration =
            api::duration::parse(text).map_err(|e| format!("unfreezeTimeout {text:?}: {e}"))?;
        Ok(duration.as_secs())
    }
}

/// Whether a `dryRun` list asks for a dry run.
pub fn is_dry_run(dry_run: &[String]) -> bool {
    dry_run.iter().any(|d| d == DRY_RUN_ALL)
}

/// Parses a request body; an empty body is the default options, as KubeVirt accepts.
pub fn parse_body<T: Default + serde::de::DeserializeOwned>(
    body: &[u8],
) -> Result<T, serde_json::Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freeze_needs_its_unfreeze_timeout() {
        let body: FreezeUnfreezeTimeout = parse_body(br#"{"unfreezeTimeout": "5m0s"}"#).unwrap();
        assert_eq!(body.seconds(), Ok(300));
        let empty: FreezeUnfreezeTimeout = parse_body(b"{}").unwrap();
        assert_eq!(empty.seconds().unwrap_err(), "Unfreeze timeout must be set");
        let bad = FreezeUnfreezeTimeout {
            unfreeze_timeout: Some("soon".into()),
        };
        assert!(bad
            .seconds()
            .unwrap_err()
            .starts_with("unfreezeTimeout \"soon\""));
    }

    #[test]
    fn empty_body_is_default() {
        let o: StopOptions = parse_body(b"").unwrap();
        assert_eq!(o, StopOptions::default());
    }

    #[test]
    fn stop_options_use_kubevirt_field_names() {
        let o: StopOptions = parse_body(br#"{"gracePeriod": 0, "dryRun": ["All"]}"#).unwrap();
        assert_eq!(o.grace_period, Some(0));
        assert!(is_dry_run(&o.dry_run));
        let r: RestartOptions = parse_body(br#"{"gracePeriodSeconds": 5}"#).unwrap();
        assert_eq!(r.grace_period_seconds, Some(5));
        let m = serde_json::to_value(MigrateOptions {
            added_node_selector: Some([("a".to_string(), "b".to_string())].into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(m, serde_json::json!({"addedNodeSelector": {"a": "b"}}));
    }
}
