use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::*;
use crate::instancetype::requirements::check_requirements;

fn applied(
    it: Option<Value>,
    pref: Option<Value>,
    mut spec: Value,
) -> Result<(Value, BTreeMap<String, String>), Vec<String>> {
    let mut annotations = BTreeMap::from([("kept".to_string(), "vm".to_string())]);
    apply(
        "spec",
        it.as_ref(),
        pref.as_ref(),
        &mut spec,
        &mut annotations,
    )?;
    Ok((spec, annotations))
}

#[test]
fn an_instancetype_sizes_the_vmi_with_sockets_by_default() {
    let it = json!({"cpu": {"guest": 4}, "memory": {"guest": "1Gi"}, "nodeSelector": {"n": "1"}, "schedulerName": "s", "annotations": {"a": "1"}});
    let (spec, annotations) = applied(Some(it), None, json!({"domain": {}})).unwrap();
    assert_eq!(
        spec["domain"]["cpu"],
        json!({"sockets": 4, "cores": 1, "threads": 1})
    );
    assert_eq!(spec["domain"]["memory"], json!({"guest": "1Gi"}));
    assert_eq!(spec["nodeSelector"], json!({"n": "1"}));
    assert_eq!(spec["schedulerName"], "s");
    assert_eq!(annotations["a"], "1");
    assert_eq!(annotations["kept"], "vm");
}

#[test]
fn the_preferences_topology_shapes_the_vcpus() {
    let cases = [
        (
            json!({"cpu": {"preferredCPUTopology": "cores"}}),
            4,
            (1, 4, 1),
        ),
        (
            json!({"cpu": {"preferredCPUTopology": "threads"}}),
            4,
            (1, 1, 4),
        ),
        (
            json!({"cpu": {"preferredCPUTopology": "any"}}),
            4,
            (4, 1, 1),
        ),
        (
            json!({"cpu": {"preferredCPUTopology": "spread"}}),
            4,
            (2, 2, 1),
        ),
        (
            json!({"cpu": {"preferredCPUTopology": "spread", "spreadOptions": {"across": "CoresThreads"}}}),
            4,
            (1, 2, 2),
        ),
        (
            json!({"cpu": {"preferredCPUTopology": "spread", "spreadOptions": {"across": "SocketsCoresThreads"}}}),
            8,
            (2, 2, 2),
        ),
        (
            json!({"cpu": {"preferredCPUTopology": "cores"}}),
            1,
            (1, 1, 1),
        ),
    ];
    for (pref, vcpus, want) in cases {
        assert_eq!(topology(vcpus, Some(&pref)), want, "{pref}");
    }
    assert_eq!(topology(0, None), (0, 1, 1));
}

#[test]
fn fields_the_instancetype_owns_conflict_and_nothing_is_applied() {
    let it = json!({"cpu": {"guest": 2, "model": "host-passthrough"}, "memory": {"guest": "1Gi"}, "annotations": {"kept": "it"}});
    let spec = json!({"domain": {
        "cpu": {"sockets": 2, "model": "host-model"},
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }});
    let conflicts = applied(Some(it), Some(json!({"preferredSubdomain": "x"})), spec).unwrap_err();
    assert_eq!(
        conflicts,
        vec![
            "spec.domain.resources.requests.cpu",
            "spec.domain.cpu.sockets",
            "spec.domain.cpu.model",
            "spec.domain.resources.requests.memory",
            "annotations.kept",
        ]
    );
    assert_eq!(
        conflict_message(&conflicts[1..2]),
        "VM field(s) spec.domain.cpu.sockets conflicts with selected instance type"
    );
}

#[test]
fn overcommit_lowers_the_request_as_kubevirt_computes_it() {
    let it = json!({"cpu": {"guest": 1}, "memory": {"guest": "128Mi", "overcommitPercent": 15}});
    let (spec, _) = applied(Some(it), None, json!({})).unwrap();
    assert_eq!(spec["domain"]["memory"]["guest"], "128Mi");
    assert_eq!(
        spec["domain"]["resources"]["requests"]["memory"],
        "114085072"
    );
}

#[test]
fn a_preference_fills_in_only_what_is_unset() {
    let pref = json!({
        "devices": {"preferredDiskBus": "virtio", "preferredInterfaceModel": "virtio", "preferredRng": {}},
        "firmware": {"preferredUseBios": true},
        "preferredTerminationGracePeriodSeconds": 15,
        "preferredSubdomain": "sub",
        "annotations": {"kept": "pref", "new": "pref"},
        "features": {"preferredHyperv": {"vapic": {"enabled": true}}},
    });
    let spec = json!({
        "terminationGracePeriodSeconds": 0,
        "domain": {"devices": {
            "disks": [{"name": "a"}, {"name": "b", "disk": {"bus": "sata"}}, {"name": "c", "cdrom": {}}],
            "interfaces": [{"name": "default", "masquerade": {}}, {"name": "x", "model": "e1000"}],
        }},
    });
    let (spec, annotations) = applied(None, Some(pref), spec).unwrap();
    let devices = &spec["domain"]["devices"];
    assert_eq!(devices["disks"][0]["disk"], json!({"bus": "virtio"}));
    assert_eq!(devices["disks"][1]["disk"], json!({"bus": "sata"}));
    assert_eq!(devices["disks"][2], json!({"name": "c", "cdrom": {}}));
    assert_eq!(devices["interfaces"][0]["model"], "virtio");
    assert_eq!(devices["interfaces"][1]["model"], "e1000");
    assert_eq!(devices["rng"], json!({}));
    assert_eq!(
        spec["domain"]["firmware"],
        json!({"bootloader": {"bios": {}}})
    );
    assert_eq!(
        spec["domain"]["features"],
        json!({"hyperv": {"vapic": {"enabled": true}}})
    );
    assert_eq!(spec["terminationGracePeriodSeconds"], 0);
    assert_eq!(spec["subdomain"], "sub");
    assert_eq!(annotations["kept"], "vm");
    assert_eq!(annotations["new"], "pref");
}

#[test]
fn a_preference_without_firmware_adds_no_empty_firmware() {
    let (spec, _) = applied(
        None,
        Some(json!({"firmware": {"preferredUseSecureBoot": true}})),
        json!({}),
    )
    .unwrap();
    assert!(spec["domain"].get("firmware").is_none(), "{spec}");
}

#[test]
fn requirements_are_checked_as_kubevirt_words_them() {
    let req = |r: Value, extra: Value| {
        let mut p = json!({"requirements": r});
        if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
            p.extend(extra.clone());
        }
        p
    };
    let check = |it: Option<Value>, pref: Value, spec: Value| {
        check_requirements(it.as_ref(), Some(&pref), &spec).map_err(|u| (u.field, u.message))
    };
    let cpu = |s: u64, c: u64, t: u64| json!({"domain": {"cpu": {"sockets": s, "cores": c, "threads": t}}});
    assert_eq!(
        check(Some(json!({"cpu": {"guest": 1}})), req(json!({"cpu": {"guest": 2}}), json!({})), json!({})),
        Err(("spec.instancetype".into(), "insufficient CPU resources of 1 vCPU provided by instance type, preference requires 2 vCPU".into()))
    );
    assert_eq!(
        check(
            Some(json!({"cpu": {"guest": 2}})),
            req(json!({"cpu": {"guest": 2}}), json!({})),
            json!({})
        ),
        Ok(())
    );
    assert_eq!(
        check(None, req(json!({"cpu": {"guest": 2}}), json!({})), cpu(1, 1, 1)),
        Err(("spec.template.spec.domain.cpu.sockets".into(), "insufficient CPU resources of 1 vCPU provided by VirtualMachine, preference requires 2 vCPU provided as sockets".into()))
    );
    assert_eq!(
        check(
            None,
            req(json!({"cpu": {"guest": 2}}), json!({})),
            cpu(2, 1, 1)
        ),
        Ok(())
    );
    assert_eq!(
        check(None, req(json!({"cpu": {"guest": 2}}), json!({"cpu": {"preferredCPUTopology": "cores"}})), cpu(1, 1, 1)),
        Err(("spec.template.spec.domain.cpu.cores".into(), "insufficient CPU resources of 1 vCPU provided by VirtualMachine, preference requires 2 vCPU provided as cores".into()))
    );
    assert_eq!(
        check(None, req(json!({"cpu": {"guest": 4}}), json!({"cpu": {"preferredCPUTopology": "any"}})), cpu(1, 2, 1)),
        Err(("spec.template.spec.domain.cpu".into(), "insufficient CPU resources of 2 vCPU provided by VirtualMachine, preference requires 4 vCPU provided as cores, sockets and threads".into()))
    );
    assert_eq!(
        check(
            None,
            req(
                json!({"cpu": {"guest": 4}}),
                json!({"cpu": {"preferredCPUTopology": "any"}})
            ),
            cpu(2, 2, 1)
        ),
        Ok(())
    );
    assert_eq!(
        check(Some(json!({"cpu": {"guest": 1}, "memory": {"guest": "1Gi"}})), req(json!({"memory": {"guest": "2Gi"}}), json!({})), json!({})),
        Err(("spec.instancetype".into(), "insufficient Memory resources of 1Gi provided by instance type, preference requires 2Gi".into()))
    );
    assert_eq!(
        check(None, req(json!({"memory": {"guest": "2Gi"}}), json!({})), json!({"domain": {}})),
        Err(("spec.template.spec.domain.memory".into(), "insufficient Memory resources of 0 provided by VirtualMachine, preference requires 2Gi".into()))
    );
    assert_eq!(
        check(
            None,
            req(json!({"memory": {"guest": "2Gi"}}), json!({})),
            json!({"domain": {"memory": {"guest": "2Gi"}}})
        ),
        Ok(())
    );
}
