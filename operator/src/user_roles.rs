//! The ClusterRoles KubeVirt gives its users, by the names and with the rights KubeVirt's API
//! documents, so that a RoleBinding written for KubeVirt grants the same on Ferrovirt:
//! `kubevirt.io:admin`, `:edit` and `:view` (aggregated into Kubernetes' own admin, edit and
//! view roles), `kubevirt.io:migrate`, `instancetype.kubevirt.io:view`, and
//! `kubevirt.io:default`, bound to every authenticated user (the version and the KubeVirt CR).
//!
//! The rights cover every KubeVirt API group, including those Ferrovirt serves only to say
//! that it does not support them: a user's role must not change when Ferrovirt adds one.

use serde_json::{json, Value};

const CORE: &str = "kubevirt.io";
const SUBRESOURCES: &str = "subresources.kubevirt.io";

const ALL: &[&str] = &[
    "get",
    "delete",
    "create",
    "update",
    "patch",
    "list",
    "watch",
    "deletecollection",
];
const EDIT: &[&str] = &[
    "get", "delete", "create", "update", "patch", "list", "watch",
];
const READ: &[&str] = &["get", "list", "watch"];
const GET: &[&str] = &["get"];
const UPDATE: &[&str] = &["update"];

/// Subresources anyone who may use a VMI may read (with `get`).
const VMI_READ: &[&str] = &[
    "virtualmachineinstances/guestosinfo",
    "virtualmachineinstances/filesystemlist",
    "virtualmachineinstances/userlist",
    "virtualmachineinstances/sev/fetchcertchain",
    "virtualmachineinstances/sev/querylaunchmeasurement",
    "virtualmachines/objectgraph",
    "virtualmachineinstances/objectgraph",
];
/// Subresources that open a stream into the guest (with `get`), for admin and edit.
const VMI_ACCESS: &[&str] = &[
    "virtualmachineinstances/console",
    "virtualmachineinstances/vnc",
    "virtualmachineinstances/portforward",
    "virtualmachineinstances/usbredir",
    "virtualmachines/expand-spec",
    "virtualmachines/portforward",
];
/// Subresources that act on a VM or VMI (with `update`), for admin and edit.
const ACTIONS: &[&str] = &[
    "virtualmachineinstances/pause",
    "virtualmachineinstances/unpause",
    "virtualmachineinstances/addvolume",
    "virtualmachineinstances/removevolume",
    "virtualmachineinstances/freeze",
    "virtualmachineinstances/unfreeze",
    "virtualmachineinstances/softreboot",
    "virtualmachineinstances/reset",
    "virtualmachineinstances/sev/setupsession",
    "virtualmachineinstances/sev/injectlaunchsecret",
    "virtualmachineinstances/evacuate/cancel",
    "virtualmachines/start",
    "virtualmachines/stop",
    "virtualmachines/restart",
    "virtualmachines/addvolume",
    "virtualmachines/removevolume",
    "virtualmachines/memorydump",
    "virtualmachines/removememorydump",
    "virtualmachines/evacuate/cancel",
];
const WORKLOADS: &[&str] = &[
    "virtualmachines",
    "virtualmachineinstances",
    "virtualmachineinstancepresets",
    "virtualmachineinstancereplicasets",
];
const INSTANCETYPES: &[&str] = &[
    "virtualmachineinstancetypes",
    "virtualmachineclusterinstancetypes",
    "virtualmachinepreferences",
    "virtualmachineclusterpreferences",
];
/// The sibling groups whose objects belong to a namespace's users, with their resources.
const SIBLINGS: &[(&str, &[&str])] = &[
    (
        "snapshot.kubevirt.io",
        &[
            "virtualmachinesnapshots",
            "virtualmachinesnapshotcontents",
            "virtualmachinerestores",
        ],
    ),
    (
        "backup.kubevirt.io",
        &["virtualmachinebackups", "virtualmachinebackuptrackers"],
    ),
    ("export.kubevirt.io", &["virtualmachineexports"]),
    ("clone.kubevirt.io", &["virtualmachineclones"]),
    ("instancetype.kubevirt.io", INSTANCETYPES),
    ("pool.kubevirt.io", &["virtualmachinepools"]),
];

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
}

fn role(name: &str, extra_labels: Value, rules: Vec<Value>) -> Value {
    let mut labels = json!({
        "app.kubernetes.io/managed-by": "virt-operator",
        "app.kubernetes.io/part-of": "ferrovirt",
        "kubevirt.io": "",
    });
    for (k, v) in extra_labels.as_object().into_iter().flatten() {
        labels[k] = v.clone();
    }
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels},
        "rules": rules,
    })
}

fn bound_to_authenticated(name: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/managed-by": "virt-operator",
            "app.kubernetes.io/part-of": "ferrovirt",
            "kubevirt.io": "",
        }},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"}],
    })
}

/// admin and edit differ only in `deletecollection` and the VNC screenshot.
fn writer(admin: bool) -> Vec<Value> {
    let verbs = if admin { ALL } else { EDIT };
    let mut get: Vec<&str> = VMI_ACCESS.iter().chain(VMI_READ).copied().collect();
    if admin {
        get.push("virtualmachineinstances/vnc/screenshot");
    }
    let mut rules = vec![
        rule(SUBRESOURCES, &get, GET),
        rule(SUBRESOURCES, ACTIONS, UPDATE),
        rule(SUBRESOURCES, &["expand-vm-spec"], UPDATE),
        rule(CORE, WORKLOADS, verbs),
        rule(CORE, &["virtualmachineinstancemigrations"], READ),
    ];
    for (group, resources) in SIBLINGS {
        rules.push(rule(group, resources, verbs));
    }
    rules.push(rule("plugin.kubevirt.io", &["plugins"], verbs));
    if !admin {
        rules.push(rule(CORE, &["kubevirts"], &["get", "list"]));
    }
    rules.push(rule("migrations.kubevirt.io", &["migrationpolicies"], READ));
    rules
}

fn viewer() -> Vec<Value> {
    let mut get = VMI_READ.to_vec();
    get.push("virtualmachines/expand-spec");
    let mut workloads = WORKLOADS.to_vec();
    workloads.push("virtualmachineinstancemigrations");
    let mut rules = vec![
        rule(CORE, &["kubevirts"], &["get", "list"]),
        rule(SUBRESOURCES, &get, GET),
        rule(SUBRESOURCES, &["expand-vm-spec"], UPDATE),
        rule(CORE, &workloads, READ),
    ];
    for (group, resources) in SIBLINGS {
        rules.push(rule(group, resources, READ));
    }
    rules.push(rule("migrations.kubevirt.io", &["migrationpolicies"], READ));
    rules.push(rule("plugin.kubevirt.io", &["plugins"], READ));
    rules
}

/// Every user-facing ClusterRole and the bindings for all authenticated users.
pub fn objects() -> Vec<Value> {
    vec![
        role(
            "kubevirt.io:default",
            json!({"kubernetes.io/bootstrapping": "rbac-defaults"}),
            vec![
                rule(CORE, &["kubevirts"], &["get", "list"]),
                rule(SUBRESOURCES, &["version", "guestfs"], &["get", "list"]),
            ],
        ),
        bound_to_authenticated("kubevirt.io:default"),
        role(
            "kubevirt.io:admin",
            json!({"rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
            writer(true),
        ),
        role(
            "kubevirt.io:edit",
            json!({"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
            writer(false),
        ),
        role(
            "kubevirt.io:view",
            json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
            viewer(),
        ),
        role(
            "kubevirt.io:migrate",
            json!({}),
            vec![
                rule(SUBRESOURCES, &["virtualmachines/migrate"], UPDATE),
                rule(CORE, &["virtualmachineinstancemigrations"], ALL),
            ],
        ),
        role(
            "instancetype.kubevirt.io:view",
            json!({}),
            vec![rule(
                "instancetype.kubevirt.io",
                &[
                    "virtualmachineclusterinstancetypes",
                    "virtualmachineclusterpreferences",
                ],
                READ,
            )],
        ),
        bound_to_authenticated("instancetype.kubevirt.io:view"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the ClusterRole `name` allows `verb` on `group`/`resource`.
    fn allows(name: &str, group: &str, resource: &str, verb: &str) -> bool {
        objects()
            .iter()
            .filter(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == name)
            .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
            .any(|r| {
                let has =
                    |key: &str, want: &str| r[key].as_array().unwrap().iter().any(|v| v == want);
                has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
            })
    }

    #[test]
    fn edit_may_do_all_but_deletecollection_and_view_only_reads() {
        for verb in [
            "get", "list", "watch", "create", "update", "patch", "delete",
        ] {
            assert!(
                allows("kubevirt.io:edit", CORE, "virtualmachines", verb),
                "{verb}"
            );
            assert_eq!(
                allows("kubevirt.io:view", CORE, "virtualmachines", verb),
                READ.contains(&verb),
                "{verb}"
            );
        }
        assert!(!allows(
            "kubevirt.io:edit",
            CORE,
            "virtualmachines",
            "deletecollection"
        ));
        assert!(allows(
            "kubevirt.io:admin",
            CORE,
            "virtualmachines",
            "deletecollection"
        ));
    }

    #[test]
    fn only_migrate_creates_migrations() {
        let migrations = "virtualmachineinstancemigrations";
        assert!(allows("kubevirt.io:migrate", CORE, migrations, "create"));
        assert!(allows(
            "kubevirt.io:migrate",
            SUBRESOURCES,
            "virtualmachines/migrate",
            "update"
        ));
        for role in ["kubevirt.io:admin", "kubevirt.io:edit", "kubevirt.io:view"] {
            assert!(allows(role, CORE, migrations, "get"), "{role}");
            assert!(!allows(role, CORE, migrations, "create"), "{role}");
            assert!(
                !allows(role, SUBRESOURCES, "virtualmachines/migrate", "update"),
                "{role}"
            );
        }
    }

    #[test]
    fn console_is_for_admin_and_edit_and_the_screenshot_for_admin() {
        let console = "virtualmachineinstances/console";
        assert!(allows("kubevirt.io:admin", SUBRESOURCES, console, "get"));
        assert!(allows("kubevirt.io:edit", SUBRESOURCES, console, "get"));
        assert!(!allows("kubevirt.io:view", SUBRESOURCES, console, "get"));
        let shot = "virtualmachineinstances/vnc/screenshot";
        assert!(allows("kubevirt.io:admin", SUBRESOURCES, shot, "get"));
        assert!(!allows("kubevirt.io:edit", SUBRESOURCES, shot, "get"));
        assert!(!allows(
            "kubevirt.io:admin",
            SUBRESOURCES,
            "virtualmachineinstances/vsock",
            "get"
        ));
    }

    #[test]
    fn instancetypes_are_a_namespace_users_and_the_cluster_ones_everyones_to_read() {
        let group = api::instancetype::GROUP;
        let plurals: Vec<&str> = api::instancetype::Kind::ALL
            .iter()
            .map(|k| k.plural())
            .collect();
        assert_eq!(INSTANCETYPES, plurals.as_slice());
        for plural in plurals {
            for verb in EDIT {
                assert!(allows("kubevirt.io:admin", group, plural, verb), "{verb}");
                assert!(allows("kubevirt.io:edit", group, plural, verb), "{verb}");
                assert_eq!(
                    allows("kubevirt.io:view", group, plural, verb),
                    READ.contains(verb),
                    "{verb}"
                );
            }
            assert!(allows(
                "kubevirt.io:admin",
                group,
                plural,
                "deletecollection"
            ));
            assert!(!allows(
                "kubevirt.io:edit",
                group,
                plural,
                "deletecollection"
            ));
        }
        for plural in [
            "virtualmachineclusterinstancetypes",
            "virtualmachineclusterpreferences",
        ] {
            assert!(allows(
                "instancetype.kubevirt.io:view",
                group,
                plural,
                "list"
            ));
        }
    }
}
