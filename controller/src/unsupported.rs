//! The kinds Ferrovirt serves but does not implement ([`api::siblings`]: exports, backups,
//! plugins, ...). One watch per kind gives every object the kind's
//! `NotSupported` condition (a status merge patch, only when the condition is not there yet,
//! so the patch's own watch event writes nothing) and records one Warning event on it.
//!
//! A kind whose CRD is missing (during an install or an uninstall) is retried with the
//! watcher's backoff, and logged; it never stops the other controllers.

use std::sync::Arc;
use std::time::Duration;

use api::siblings::{Sibling, NOT_SUPPORTED_REASON};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::{json, Value};

use crate::context::Context;

/// The status merge patch that gives an object with `status` the condition saying `sibling`
/// is not supported, or `None` when it has it already. The other conditions are kept (a merge
/// patch replaces the whole list); a condition of the same type is replaced, keeping its
/// `lastTransitionTime` when its status does not change.
pub fn condition_patch(sibling: &Sibling, status: Option<&Value>, now: &Time) -> Option<Value> {
    let want = sibling.condition;
    let message = sibling.not_supported_message();
    let conditions: Vec<Value> = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let current = conditions.iter().find(|c| c["type"] == want.type_);
    if current.is_some_and(|c| {
        c["status"] == want.status
            && c["reason"] == NOT_SUPPORTED_REASON
            && c["message"] == *message
    }) {
        return None;
    }
    let since = current
        .filter(|c| c["status"] == want.status)
        .and_then(|c| c.get("lastTransitionTime"))
        .filter(|t| t.is_string())
        .cloned()
        .unwrap_or_else(|| json!(now));
    let mut conditions: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c["type"] != want.type_)
        .collect();
    conditions.push(json!({
        "type": want.type_,
        "status": want.status,
        "reason": NOT_SUPPORTED_REASON,
        "message": message,
        "lastTransitionTime": since,
    }));
    Some(json!({"status": {"conditions": conditions}}))
}

/// What one kind's reconciler needs.
struct Kind {
    sibling: &'static Sibling,
    resource: ApiResource,
    ctx: Arc<Context>,
}

/// The `ApiResource` of a sibling at its storage version.
pub fn api_resource(sibling: &Sibling) -> ApiResource {
    let gvk = GroupVersionKind::gvk(sibling.group, sibling.storage_version(), sibling.kind);
    ApiResource::from_gvk_with_plural(&gvk, sibling.plural)
}

/// Runs one controller per sibling kind until a shutdown signal.
pub async fn run(ctx: Arc<Context>) {
    let controllers = api::siblings::ALL.iter().map(|sibling| {
        let resource = api_resource(sibling);
        let kind = Arc::new(Kind {
            sibling,
            resource: resource.clone(),
            ctx: ctx.clone(),
        });
        let objects: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        Controller::new_with(objects, watcher::Config::default(), resource)
            .shutdown_on_signal()
            .run(reconcile, error_policy, kind)
            .for_each(move |result| {
                match result {
                    Ok(_) => {}
                    // The watch failed (its CRD may not be installed yet, or any more); the
                    // controller retries it with the watcher's backoff.
                    Err(controller::Error::QueueError(e)) => {
                        log::warn!("watching {}: {e}", sibling.crd_name());
                    }
                    Err(e) => log::debug!("{}: {e}", sibling.kind),
                }
                futures::future::ready(())
            })
    });
    futures::future::join_all(controllers).await;
}

async fn reconcile(object: Arc<DynamicObject>, kind: Arc<Kind>) -> Result<Action, kube::Error> {
    if object.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Time(Timestamp::now());
    let Some(status_patch) = condition_patch(kind.sibling, object.data.get("status"), &now) else {
        return Ok(Action::await_change());
    };
    let mut patch = status_patch;
    // The condition list is replaced as a whole: only over the version it was computed from.
    if let Some(version) = object.resource_version() {
        patch["metadata"] = json!({"resourceVersion": version});
    }
    let client = kind.ctx.client.clone();
    let objects: Api<DynamicObject> = match object.namespace() {
        Some(namespace) => Api::namespaced_with(client, &namespace, &kind.resource),
        None => Api::all_with(client, &kind.resource),
    };
    let name = object.name_any();
    objects
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    log::info!(
        "{} {}: {}",
        kind.sibling.kind,
        describe(&object),
        kind.sibling.not_supported_message()
    );
    kind.ctx
        .event_on(
            &object.object_ref(&kind.resource),
            true,
            NOT_SUPPORTED_REASON,
            kind.sibling.not_supported_message(),
        )
        .await;
    Ok(Action::await_change())
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn describe(object: &DynamicObject) -> String {
    match object.namespace() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    }
}

/// Soon after a conflict (the object changed since it was read), later after anything else;
/// an object deleted meanwhile needs nothing.
fn error_policy(object: Arc<DynamicObject>, error: &kube::Error, kind: Arc<Kind>) -> Action {
    match error {
        kube::Error::Api(e) if e.code == 409 => Action::requeue(Duration::from_millis(200)),
        kube::Error::Api(e) if e.code == 404 => Action::await_change(),
        _ => {
            log::warn!(
                "{} {}: marking it not supported: {error}",
                kind.sibling.kind,
                describe(&object)
            );
            Action::requeue(Duration::from_secs(10))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sibling(group: &str, kind: &str) -> &'static Sibling {
        api::siblings::find(group, kind).unwrap()
    }

    fn now() -> Time {
        Time("2026-05-01T10:00:00Z".parse().unwrap())
    }

    fn export() -> &'static Sibling {
        sibling("export.kubevirt.io", "VirtualMachineExport")
    }

    #[test]
    fn an_object_without_status_gets_the_condition() {
        let patch = condition_patch(export(), None, &now()).unwrap();
        assert_eq!(
            patch,
            json!({"status": {"conditions": [{
                "type": "Ready",
                "status": "False",
                "reason": "NotSupported",
                "message": "VirtualMachineExport (export.kubevirt.io/v1) is not supported by Ferrovirt",
                "lastTransitionTime": "2026-05-01T10:00:00Z",
            }]}})
        );
        // An empty status, or one without conditions, is the same.
        assert_eq!(
            condition_patch(export(), Some(&json!({})), &now()),
            Some(patch.clone())
        );
        assert_eq!(
            condition_patch(export(), Some(&json!({"conditions": "junk"})), &now()),
            Some(patch)
        );
    }

    #[test]
    fn once_there_nothing_is_written_again() {
        let first = condition_patch(export(), None, &now()).unwrap();
        let later = Time("2026-05-02T10:00:00Z".parse().unwrap());
        assert_eq!(
            condition_patch(export(), Some(&first["status"]), &later),
            None
        );
        for sibling in api::siblings::ALL {
            let patch = condition_patch(sibling, Some(&json!({"phase": "x"})), &now()).unwrap();
            assert_eq!(
                condition_patch(sibling, Some(&patch["status"]), &later),
                None,
                "{}",
                sibling.kind
            );
            assert_eq!(
                patch["status"].as_object().unwrap().len(),
                1,
                "only the conditions are patched"
            );
        }
    }

    #[test]
    fn other_conditions_are_kept_and_one_of_the_same_type_replaced() {
        let status = json!({"conditions": [
            {"type": "Progressing", "status": "True", "reason": "InProgress"},
            {"type": "Ready", "status": "True", "reason": "Done",
             "lastTransitionTime": "2020-01-01T00:00:00Z"},
        ]});
        let patch = condition_patch(export(), Some(&status), &now()).unwrap();
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[0], status["conditions"][0]);
        assert_eq!(conditions[1]["type"], "Ready");
        assert_eq!(conditions[1]["status"], "False");
        // The status changed: the transition is now.
        assert_eq!(conditions[1]["lastTransitionTime"], "2026-05-01T10:00:00Z");
    }

    #[test]
    fn the_same_status_with_another_reason_keeps_its_transition_time() {
        let status = json!({"conditions": [
            {"type": "Ready", "status": "False", "reason": "Pending",
             "lastTransitionTime": "2020-01-01T00:00:00Z"},
        ]});
        let patch = condition_patch(export(), Some(&status), &now()).unwrap();
        let condition = &patch["status"]["conditions"][0];
        assert_eq!(condition["reason"], "NotSupported");
        assert_eq!(condition["lastTransitionTime"], "2020-01-01T00:00:00Z");
    }

    #[test]
    fn kinds_without_ready_get_kubevirts_closest_condition() {
        // The pool is implemented (crate::pool), so it gets no NotSupported condition.
        assert!(api::siblings::find("pool.kubevirt.io", "VirtualMachinePool").is_none());
        let backup = condition_patch(
            sibling("backup.kubevirt.io", "VirtualMachineBackup"),
            None,
            &now(),
        )
        .unwrap();
        assert_eq!(backup["status"]["conditions"][0]["type"], "Failed");
        assert_eq!(backup["status"]["conditions"][0]["status"], "True");
    }

    #[test]
    fn each_kind_is_watched_at_its_stored_version() {
        let export = api_resource(sibling("export.kubevirt.io", "VirtualMachineExport"));
        assert_eq!(export.api_version, "export.kubevirt.io/v1");
        assert_eq!(export.plural, "virtualmachineexports");
        let preset = api_resource(sibling("kubevirt.io", "VirtualMachineInstancePreset"));
        assert_eq!(preset.api_version, "kubevirt.io/v1");
        assert_eq!(preset.plural, "virtualmachineinstancepresets");
    }
}
