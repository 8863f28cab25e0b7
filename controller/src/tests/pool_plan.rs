use std::collections::BTreeMap;

use api::pool::{VirtualMachinePoolSpec, FINALIZER, REVISION_LABEL};
use api::{VirtualMachine, VirtualMachineInstance, VirtualMachinePool, VmiPhase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use crate::pool::plan::*;

fn pool_with(replicas: i32, extra: Value) -> VirtualMachinePool {
    let mut value = json!({
        "apiVersion": "pool.kubevirt.io/v1beta1",
        "kind": "VirtualMachinePool",
        "metadata": {"name": "web", "namespace": "default", "uid": "pool-uid", "generation": 1,
                     "finalizers": [FINALIZER]},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "virtualMachineTemplate": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "runStrategy": "Always",
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"domain": {"devices": {}, "memory": {"guest": "16Mi"}}}
                    }
                }
            }
        }
    });
    if let (Some(spec), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(value).unwrap()
}

fn pool(replicas: i32) -> VirtualMachinePool {
    pool_with(replicas, json!({}))
}

/// A VM of `pool` written from revision `revision`, created at `created` s, Ready or not.
fn vm(
    pool: &VirtualMachinePool,
    name: &str,
    revision: &str,
    created: i64,
    ready: bool,
) -> VirtualMachine {
    let mut vm = vm_from_template(pool, name, revision, None).unwrap();
    vm.metadata.uid = Some(format!("uid-{name}"));
    vm.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
    vm.status = Some(api::VirtualMachineStatus {
        conditions: vec![api::Condition::new("Ready", ready, "", "")],
        ..Default::default()
    });
    vm
}

fn vmi(name: &str, revision: &str, ready: bool) -> VirtualMachineInstance {
    let mut vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"app": "web", REVISION_LABEL: revision}},
        "spec": {"domain": {"devices": {}}}
    }))
    .unwrap();
    let mut status = api::VirtualMachineInstanceStatus {
        phase: Some(VmiPhase::Running),
        ..Default::default()
    };
    status
        .conditions
        .push(api::Condition::new("Ready", ready, "", ""));
    vmi.status = Some(status);
    vmi
}

/// Adds a label to the pool's VMI template (a change that needs the VMIs restarted).
fn label_vmi_template(pool: &mut VirtualMachinePool, key: &str, value: &str) {
    let template = pool.spec.virtual_machine_template.as_mut().unwrap();
    let vmi = &mut template.spec.as_mut().unwrap().template;
    vmi.metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
}

fn revisions(entries: &[(&str, &VirtualMachinePool)]) -> BTreeMap<String, VirtualMachinePoolSpec> {
    entries
        .iter()
        .map(|(name, pool)| (name.to_string(), pool.spec.clone()))
        .collect()
}

#[test]
fn a_new_pool_gets_its_finalizer_its_revision_and_vms_at_the_lowest_free_indexes() {
    let mut p = pool(3);
    p.metadata.finalizers = None;
    // web-1 exists already and is not the pool's: its name is taken.
    let mut stranger = vm(&p, "web-1", "web-1", 1, true);
    stranger.metadata.owner_references = None;
    let world = World {
        vms: &[stranger],
        vmis: &[],
        revisions: &BTreeMap::new(),
    };
    let plan = plan(&p, &world, 7).unwrap();
    assert!(plan.add_pool_finalizer);
    assert_eq!(plan.create_revision, Some(("web-1".to_string(), 1)));
    let names: Vec<_> = plan.create.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["web-0", "web-2", "web-3"]);
}

#[test]
fn a_vm_from_the_template_carries_the_revision_the_finalizer_and_the_pool_as_controller() {
    let p = pool(1);
    let vm = vm_from_template(&p, "web-0", "web-1", None).unwrap();
    let labels = vm.metadata.labels.clone().unwrap();
    assert_eq!(labels["app"], "web");
    assert_eq!(labels[REVISION_LABEL], "web-1");
    let template_labels = vm.spec.template.metadata.clone().unwrap().labels.unwrap();
    assert_eq!(template_labels[REVISION_LABEL], "web-1");
    assert_eq!(vm.metadata.finalizers, Some(vec![FINALIZER.to_string()]));
    let owner = &vm.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("VirtualMachinePool", "pool-uid")
    );
    assert_eq!(owner.api_version, "pool.kubevirt.io/v1beta1");
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));
}

#[test]
fn scale_in_takes_the_policys_order_and_counts_vms_already_leaving() {
    let p = pool_with(
        1,
        json!({"scaleInStrategy": {"proactive": {"selectionPolicy": {"sortPolicy": "DescendingOrder"}}}}),
    );
    let mut leaving = vm(&p, "web-1", "web-1", 2, true);
    leaving.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(9).unwrap()));
    let vms = [
        vm(&p, "web-0", "web-1", 1, true),
        leaving,
        vm(&p, "web-2", "web-1", 3, true),
        vm(&p, "web-3", "web-1", 4, true),
    ];
    let revs = revisions(&[("web-1", &p)]);
    let world = World {
        vms: &vms,
        vmis: &[],
        revisions: &revs,
    };
    let plan = plan(&p, &world, 7).unwrap();
    // 4 VMs for 1 replica: web-1 is on its way out already, so two more go, highest first.
    assert_eq!(plan.delete, ["web-3", "web-2"]);
    assert_eq!(plan.release_vms, ["web-1"]);
    assert!(plan.create.is_empty());
}

#[test]
fn opportunistic_and_unmanaged_scale_in_delete_nothing() {
    for strategy in [json!({"opportunistic": {}}), json!({"unmanaged": {}})] {
        let p = pool_with(1, json!({ "scaleInStrategy": strategy }));
        let vms = [
            vm(&p, "web-0", "web-1", 1, true),
            vm(&p, "web-1", "web-1", 2, true),
        ];
        let revs = revisions(&[("web-1", &p)]);
        let world = World {
            vms: &vms,
            vmis: &[],
            revisions: &revs,
        };
        assert!(plan(&p, &world, 1).unwrap().delete.is_empty(), "{strategy}");
    }
}

#[test]
fn a_changed_template_rewrites_the_vms_then_restarts_their_vmis_within_max_unavailable() {
    let old = pool(3);
    let mut new = pool_with(3, json!({"maxUnavailable": 1}));
    new.metadata.generation = Some(2);
    label_vmi_template(&mut new, "newlabel", "newvalue");
    let names = ["web-0", "web-1", "web-2"];
    let old_vms: Vec<_> = names
        .iter()
        .map(|n| vm(&old, n, "web-1", 1, true))
        .collect();
    let vmis: Vec<_> = names.iter().map(|n| vmi(n, "web-1", true)).collect();
    let revs = revisions(&[("web-1", &old)]);
    let world = World {
        vms: &old_vms,
        vmis: &vmis,
        revisions: &revs,
    };
    let first = plan(&new, &world, 3).unwrap();
    assert_eq!(first.rewrite, names);
    assert_eq!(first.create_revision, Some(("web-2".to_string(), 2)));
    assert!(first.restart.is_empty());

    // The VMs now name web-2; their VMIs still web-1, whose VMI template differs.
    let new_vms: Vec<_> = names
        .iter()
        .map(|n| vm(&new, n, "web-2", 1, true))
        .collect();
    let revs = revisions(&[("web-1", &old), ("web-2", &new)]);
    let world = World {
        vms: &new_vms,
        vmis: &vmis,
        revisions: &revs,
    };
    let second = plan(&new, &world, 3).unwrap();
    assert!(second.rewrite.is_empty());
    assert_eq!(
        second.restart.len(),
        1,
        "maxUnavailable 1: {:?}",
        second.restart
    );
    assert!(second.waiting);
    assert!(second.prune.is_empty(), "web-1 is still named by VMIs");

    // One VMI restarting (not Ready): nothing more until it is back.
    let mut settling = vmis.clone();
    settling[0] = vmi("web-0", "web-2", false);
    let world = World {
        vms: &new_vms,
        vmis: &settling,
        revisions: &revs,
    };
    let third = plan(&new, &world, 3).unwrap();
    assert!(third.restart.is_empty());
    assert!(third.waiting);

    // All on web-2: web-1 is pruned.
    let done: Vec<_> = names.iter().map(|n| vmi(n, "web-2", true)).collect();
    let world = World {
        vms: &new_vms,
        vmis: &done,
        revisions: &revs,
    };
    let last = plan(&new, &world, 3).unwrap();
    assert!(last.restart.is_empty() && !last.waiting);
    assert_eq!(last.prune, ["web-1"]);
}

#[test]
fn a_vm_template_change_outside_the_vmi_template_only_relabels_the_vmis() {
    let old = pool(1);
    let mut new = pool(1);
    new.metadata.generation = Some(2);
    let template = new.spec.virtual_machine_template.as_mut().unwrap();
    template
        .metadata
        .as_mut()
        .unwrap()
        .labels
        .as_mut()
        .unwrap()
        .insert("tier".into(), "gold".into());
    let vms = [vm(&new, "web-0", "web-2", 1, true)];
    let vmis = [vmi("web-0", "web-1", true)];
    let revs = revisions(&[("web-1", &old), ("web-2", &new)]);
    let world = World {
        vms: &vms,
        vmis: &vmis,
        revisions: &revs,
    };
    let plan = plan(&new, &world, 1).unwrap();
    assert!(plan.restart.is_empty());
    assert_eq!(plan.relabel, [("web-0".to_string(), "web-2".to_string())]);
}

#[test]
fn opportunistic_update_rewrites_vms_and_never_restarts_vmis() {
    let old = pool(1);
    let mut new = pool_with(1, json!({"updateStrategy": {"opportunistic": {}}}));
    new.metadata.generation = Some(2);
    label_vmi_template(&mut new, "newlabel", "x");
    let vms = [vm(&new, "web-0", "web-2", 1, true)];
    let vmis = [vmi("web-0", "web-1", true)];
    let revs = revisions(&[("web-1", &old), ("web-2", &new)]);
    let world = World {
        vms: &vms,
        vmis: &vmis,
        revisions: &revs,
    };
    let plan = plan(&new, &world, 1).unwrap();
    assert!(plan.restart.is_empty() && plan.relabel.is_empty() && plan.rewrite.is_empty());
}

#[test]
fn paused_pools_and_deleted_pools() {
    let mut p = pool_with(3, json!({"paused": true}));
    let vms = [vm(&p, "web-0", "web-1", 1, true)];
    let revs = revisions(&[("web-1", &p)]);
    let world = World {
        vms: &vms,
        vmis: &[],
        revisions: &revs,
    };
    let paused = plan(&p, &world, 1).unwrap();
    assert!(paused.create.is_empty() && paused.delete.is_empty());
    let s = status(&p, &vms, None, Timestamp::from_second(5).unwrap());
    assert_eq!(s.replicas, Some(1));
    assert_eq!(s.ready_replicas, Some(1));
    assert_eq!(s.label_selector.as_deref(), Some("app=web"));
    assert_eq!(s.conditions[0].type_, "ReplicaPaused");

    p.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(9).unwrap()));
    let deleting = plan(&p, &world, 1).unwrap();
    assert_eq!(deleting.release_vms, ["web-0"]);
    assert!(deleting.remove_pool_finalizer);
    assert_eq!(deleting.prune, ["web-1"]);
}

#[test]
fn max_unavailable_is_a_count_or_a_share_of_the_replicas_and_at_least_one() {
    let at = |v: Value| max_unavailable(&pool_with(4, json!({ "maxUnavailable": v })).spec);
    assert_eq!(max_unavailable(&pool(4).spec), 4);
    assert_eq!(at(json!(2)), 2);
    assert_eq!(at(json!("50%")), 2);
    assert_eq!(at(json!("10%")), 1);
    assert_eq!(index_of("my-pool-12"), Some(12));
    assert_eq!(index_of("my-pool"), None);
}

#[test]
fn a_template_its_selector_does_not_match_is_left_alone() {
    let p = pool_with(1, json!({"selector": {"matchLabels": {"app": "other"}}}));
    let world = World {
        vms: &[],
        vmis: &[],
        revisions: &BTreeMap::new(),
    };
    assert_eq!(plan(&p, &world, 1), Err(Invalid::TemplateNotSelected));
}
