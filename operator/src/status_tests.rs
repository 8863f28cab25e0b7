use api::condition::Condition;
use api::KubeVirtStatus;

use super::*;
use crate::manifests::InstallConfig;

fn cfg(tag: &str) -> InstallConfig {
    InstallConfig {
        image_tag: tag.into(),
        ..InstallConfig::default()
    }
}

fn condition<'a>(s: &'a KubeVirtStatus, t: &str) -> &'a Condition {
    api::condition::find(&s.conditions, t).unwrap()
}

#[test]
fn a_new_install_is_deploying_then_deployed() {
    let s = next_status(
        &KubeVirtStatus::default(),
        Some(1),
        &cfg("v1"),
        "v1",
        Readiness::default(),
    );
    assert_eq!(s.phase, Some(KubeVirtPhase::Deploying));
    assert!(!condition(&s, "Available").is_true());
    assert!(condition(&s, "Progressing").is_true());
    assert!(!condition(&s, "Degraded").is_true());
    assert_eq!(s.target_kube_virt_version.as_deref(), Some("v1"));
    assert_eq!(s.observed_kube_virt_version, None);

    let done = Readiness {
        available: true,
        updated: true,
    };
    let s2 = next_status(&s, Some(1), &cfg("v1"), "v1", done);
    assert_eq!(s2.phase, Some(KubeVirtPhase::Deployed));
    assert!(condition(&s2, "Available").is_true());
    assert!(!condition(&s2, "Progressing").is_true());
    assert_eq!(s2.observed_kube_virt_version.as_deref(), Some("v1"));
    assert_eq!(
        s2.observed_kube_virt_registry.as_deref(),
        Some("registry:5000/ferrovirt")
    );
    assert_eq!(s2.observed_generation, Some(1));
    assert_eq!(s2.default_architecture.as_deref(), Some("amd64"));
    // KubeVirt's test suite waits for Created before it runs.
    assert!(condition(&s2, "Created").is_true());
    // Nothing changes on the next look: no status write, no reconcile loop.
    assert_eq!(next_status(&s2, Some(1), &cfg("v1"), "v1", done), s2);
}

#[test]
fn an_upgrade_stays_available_while_it_progresses() {
    let done = Readiness {
        available: true,
        updated: true,
    };
    let v1 = next_status(&KubeVirtStatus::default(), Some(1), &cfg("v1"), "v1", done);
    let rolling = Readiness {
        available: true,
        updated: false,
    };
    let s = next_status(&v1, Some(1), &cfg("v2"), "v2", rolling);
    assert_eq!(s.phase, Some(KubeVirtPhase::Deploying));
    assert!(condition(&s, "Available").is_true());
    assert_eq!(
        condition(&s, "Available").last_transition_time,
        condition(&v1, "Available").last_transition_time
    );
    assert!(condition(&s, "Progressing").is_true());
    assert_eq!(
        condition(&s, "Progressing").reason.as_deref(),
        Some("UpdateInProgress")
    );
    assert_eq!(s.observed_kube_virt_version.as_deref(), Some("v1"));
    assert_eq!(s.target_kube_virt_version.as_deref(), Some("v2"));
    assert_eq!(s.operator_version.as_deref(), Some("v2"));
}
