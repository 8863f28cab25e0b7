//! Kubernetes label selectors (`metav1.LabelSelector`): matching a set of labels, and the
//! string form the scale subresource and `kubectl` show (`labels.Selector.String()`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Whether `labels` satisfy one requirement; `None` for an operator that is not one of
/// `In`, `NotIn`, `Exists`, `DoesNotExist`.
pub fn requirement_matches(
    requirement: &LabelSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = requirement.values.as_deref().unwrap_or_default();
    let label = labels.get(&requirement.key);
    Some(match requirement.operator.as_str() {
        "In" => label.is_some_and(|l| values.contains(l)),
        "NotIn" => label.is_none_or(|l| !values.contains(l)),
        "Exists" => label.is_some(),
        "DoesNotExist" => label.is_none(),
        _ => return None,
    })
}

/// Whether `labels` satisfy one node selector requirement (`In`, `NotIn`, `Exists`,
/// `DoesNotExist`, and `Gt`, `Lt` comparing integers); `None` for another operator.
pub fn node_requirement_matches(
    requirement: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = requirement.values.as_deref().unwrap_or_default();
    let label = labels.get(&requirement.key);
    let compare = |greater: bool| {
        let bound = values.first().and_then(|v| v.parse::<i64>().ok());
        let value = label.and_then(|l| l.parse::<i64>().ok());
        matches!((value, bound), (Some(v), Some(b)) if if greater { v > b } else { v < b })
    };
    Some(match requirement.operator.as_str() {
        "Gt" => compare(true),
        "Lt" => compare(false),
        operator => {
            let as_label = LabelSelectorRequirement {
                key: requirement.key.clone(),
                operator: operator.to_string(),
                values: requirement.values.clone(),
            };
            return requirement_matches(&as_label, labels);
        }
    })
}

/// Whether `labels` satisfy every term of `selector`; an empty selector matches everything, as
/// in Kubernetes. An unknown operator is an error that names it.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let by_label = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let mut by_expression = true;
    for requirement in selector.match_expressions.iter().flatten() {
        by_expression &= requirement_matches(requirement, labels).ok_or_else(|| {
            format!(
                "operator {:?} of the selector on {:?} must be In, NotIn, Exists or DoesNotExist",
                requirement.operator, requirement.key
            )
        })?;
    }
    Ok(by_label && by_expression)
}

/// The selector as Kubernetes prints it: requirements sorted by key, `k=v`, `k in (a,b)`,
/// `k notin (a,b)`, `k`, `!k`, joined by commas.
pub fn to_string(selector: &LabelSelector) -> String {
    let mut terms: Vec<(String, String)> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), format!("{k}={v}")))
        .collect();
    for r in selector.match_expressions.iter().flatten() {
        let mut values = r.values.clone().unwrap_or_default();
        values.sort();
        let key = &r.key;
        let term = match r.operator.as_str() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        };
        terms.push((key.clone(), term));
    }
    terms.sort();
    terms
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn labels_and_every_operator_match_as_in_kubernetes() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                requirement("tier", "In", &["a", "b"]),
                requirement("zone", "NotIn", &["x"]),
                requirement("team", "Exists", &[]),
                requirement("legacy", "DoesNotExist", &[]),
            ]),
        };
        let good = labels(&[("app", "web"), ("tier", "b"), ("team", "t")]);
        assert_eq!(matches(&selector, &good), Ok(true));
        for (key, value) in [("app", "db"), ("tier", "c"), ("zone", "x"), ("legacy", "1")] {
            let mut bad = good.clone();
            bad.insert(key.into(), value.into());
            assert_eq!(matches(&selector, &bad), Ok(false), "{key}={value}");
        }
        let mut no_team = good.clone();
        no_team.remove("team");
        assert_eq!(matches(&selector, &no_team), Ok(false));
        assert_eq!(matches(&LabelSelector::default(), &good), Ok(true));
        assert_eq!(
            to_string(&selector),
            "app=web,!legacy,team,tier in (a,b),zone notin (x)"
        );
    }

    #[test]
    fn an_unknown_operator_is_an_error_that_names_it() {
        let selector = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![requirement("tier", "Near", &["a"])]),
        };
        let err = matches(&selector, &labels(&[("tier", "a")])).unwrap_err();
        assert!(
            err.contains("\"Near\"") && err.contains("\"tier\""),
            "{err}"
        );
    }
}
