//! Instance types and preferences (`instancetype.kubevirt.io/v1beta1`) on the local cluster, as
//! KubeVirt's instancetype tests use them: a VM naming an instance type that does not exist yet
//! is admitted and says why it does not start; once the instance type and a cluster preference
//! exist it starts with their size and shape, stored in ControllerRevisions of the VM and named
//! in its status; a changed instance type does not change the VM that stored the old one, while
//! a new VM gets the new one; conflicts, unmet requirements and fields Ferrovirt cannot run are
//! refused with their paths; `expand-spec` answers the VM as it runs; deleting the VM deletes
//! its revisions. The KubeVirt CR's `expandAll` reference policy writes them into the VM.

use std::time::Duration;

use api::instancetype::{LABEL_OBJECT_KIND, LABEL_OBJECT_NAME};
use api::{VirtualMachine, VirtualMachineInstance};
use ferrovirt_tests::{
    client, kubectl, patch_kubevirt_cr, set_run_strategy, virtctl, wait_for, wait_running,
    ClusterChange, ClusterLock, TestNamespace,
};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(180);
const INSTANCETYPE: &str = "it-small";
/// Cluster-wide: named after the test's namespace so that runs do not share it.
fn preference_name(namespace: &str) -> String {
    format!("pref-cores-{namespace}")
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("instancetype.kubevirt.io", "v1beta1", kind),
        plural,
    )
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("an object")
}

/// A guestless VM that names the namespace's instance type and the cluster preference.
fn vm(name: &str, preference: &str, domain: Value) -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Always",
            "instancetype": {"name": INSTANCETYPE, "kind": "virtualmachineinstancetype"},
            "preference": {"name": preference},
            "template": {"spec": {"domain": domain, "terminationGracePeriodSeconds": 0}},
        },
    }))
    .expect("a VM")
}

fn failure(vm: &VirtualMachine) -> Option<(String, String)> {
    let c = vm
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Failure" && c.status == "True")?;
    Some((
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// (sockets, cores, threads) and guest memory of a VMI.
fn size(vmi: &VirtualMachineInstance) -> (Option<u32>, Option<u32>, Option<u32>, String) {
    let cpu = vmi.spec.domain.cpu.clone().unwrap_or_default();
    let memory = vmi.spec.domain.memory.clone().unwrap_or_default();
    (
        cpu.sockets,
        cpu.cores,
        cpu.threads,
        memory.guest.map(|q| q.0).unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_vm_runs_with_its_instancetype_and_preference_stored_in_revisions() {
    // The CR's reference policy (`reference`, the manifest's) must stay while this runs: the
    // other test of this file changes it.
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "instancetype").await;
    let namespace = ns.name.as_str();
    let preference = preference_name(namespace);
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let instancetypes: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &resource("VirtualMachineInstancetype", "virtualmachineinstancetypes"),
    );
    let preferences: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "VirtualMachineClusterPreference",
            "virtualmachineclusterpreferences",
        ),
    );
    let post = PostParams::default();

    // Admitted while the instance type does not exist; it does not start and says why.
    vms.create(&post, &vm("first", &preference, json!({"devices": {}})))
        .await
        .expect("a VM naming a missing instance type is admitted");
    let (reason, message) = wait_for("the VM's Failure condition", TIMEOUT, || async {
        failure(&vms.get("first").await.ok()?)
    })
    .await;
    assert_eq!(reason, "FailedFindInstancetype");
    assert!(
        message.contains(&format!("\"{INSTANCETYPE}\" not found")),
        "{message}"
    );
    let stopped = vms.get("first").await.expect("the VM");
    assert_eq!(
        stopped
            .status
            .as_ref()
            .and_then(|s| s.printable_status.as_deref()),
        Some("Stopped")
    );
    assert!(vmis.get_opt("first").await.expect("VMIs read").is_none());

    // Fields Ferrovirt cannot run are refused with their paths; KubeVirt's rules too.
    let refused = instancetypes
        .create(
            &post,
            &object(json!({
                "apiVersion": "instancetype.kubevirt.io/v1beta1",
                "kind": "VirtualMachineInstancetype",
                "metadata": {"name": "refused"},
                "spec": {"cpu": {"guest": 1, "dedicatedCPUPlacement": true}, "memory": {"guest": "16Mi", "overcommitPercent": 120}},
            })),
        )
        .await
        .expect_err("an instance type with dedicatedCPUPlacement is refused")
        .to_string();
    for part in [
        "spec.cpu.dedicatedCPUPlacement",
        "spec.memory.overcommitPercent '120': must be in range between 0 and 100.",
    ] {
        assert!(refused.contains(part), "{part} not in {refused}");
    }

    instancetypes
        .create(
            &post,
            &object(json!({
                "apiVersion": "instancetype.kubevirt.io/v1beta1",
                "kind": "VirtualMachineInstancetype",
                "metadata": {"name": INSTANCETYPE},
                "spec": {"cpu": {"guest": 2}, "memory": {"guest": "16Mi"}, "annotations": {"sized-by": "it"}},
            })),
        )
        .await
        .expect("the instance type");
    let _ = preferences
        .delete(&preference, &DeleteParams::default())
        .await;
    preferences
        .create(
            &post,
            &object(json!({
                "apiVersion": "instancetype.kubevirt.io/v1beta1",
                "kind": "VirtualMachineClusterPreference",
                "metadata": {"name": preference},
                "spec": {"cpu": {"preferredCPUTopology": "cores"}, "preferredTerminationGracePeriodSeconds": 5},
            })),
        )
        .await
        .expect("the cluster preference");
    let cleanup = PreferenceCleanup(preference.clone());

    // It starts with both applied, and records the revisions that store them.
    let vmi = wait_running(&vmis, "first", TIMEOUT).await;
    assert_eq!(size(&vmi), (Some(1), Some(2), Some(1), "16Mi".to_string()));
    // The template's grace period wins over the preference's.
    assert_eq!(vmi.spec.termination_grace_period_seconds, Some(0));
    let annotations = vmi.annotations();
    assert_eq!(annotations["kubevirt.io/instancetype-name"], INSTANCETYPE);
    assert_eq!(
        annotations["kubevirt.io/cluster-preference-name"],
        preference
    );
    assert_eq!(annotations["sized-by"], "it");
    let first = wait_for("the VM's status references", TIMEOUT, || async {
        let vm = vms.get("first").await.ok()?;
        let status = vm.status.clone()?;
        (status.instancetype_ref.as_ref()?.revision().is_some()
            && status.preference_ref.as_ref()?.revision().is_some()
            && failure(&vm).is_none())
        .then_some(vm)
    })
    .await;
    let status = first.status.clone().expect("a status");
    let it_ref = status.instancetype_ref.expect("instancetypeRef");
    assert_eq!(it_ref.kind.as_deref(), Some("virtualmachineinstancetype"));
    let it_revision = it_ref.revision().expect("a revision").to_string();
    let stored = revisions.get(&it_revision).await.expect("the revision");
    let labels = stored.labels();
    assert_eq!(labels[LABEL_OBJECT_NAME], INSTANCETYPE);
    assert_eq!(labels[LABEL_OBJECT_KIND], "VirtualMachineInstancetype");
    let owner = &stored.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("VirtualMachine", "first")
    );
    let data = stored.data.expect("data").0;
    assert_eq!(data["spec"]["cpu"]["guest"], 2);
    assert_eq!(data["kind"], "VirtualMachineInstancetype");
    let pref_ref = status.preference_ref.expect("preferenceRef");
    assert_eq!(pref_ref.kind, None, "an empty kind is not written");

    // A changed instance type: the VM keeps its revision across a restart; a new VM gets it.
    instancetypes
        .patch(
            INSTANCETYPE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cpu": {"guest": 3}}})),
        )
        .await
        .expect("the instance type patched");
    let old_uid = vmi.uid();
    set_run_strategy(&vms, "first", "Halted").await;
    wait_for("the VMI gone", TIMEOUT, || async {
        vmis.get_opt("first").await.ok()?.is_none().then_some(())
    })
    .await;
    set_run_strategy(&vms, "first", "Always").await;
    let restarted = wait_for("a new VMI", TIMEOUT, || async {
        let vmi = vmis.get_opt("first").await.ok()??;
        (vmi.uid() != old_uid).then_some(vmi)
    })
    .await;
    assert_eq!(
        size(&restarted).1,
        Some(2),
        "the stored instance type is used"
    );
    vms.create(&post, &vm("second", &preference, json!({"devices": {}})))
        .await
        .expect("the second VM");
    let second = wait_running(&vmis, "second", TIMEOUT).await;
    assert_eq!(
        size(&second).1,
        Some(3),
        "a new VM stores the new generation"
    );

    // Conflicts and requirements are refused when the VM is admitted.
    let conflict = vms
        .create(
            &post,
            &vm(
                "conflict",
                &preference,
                json!({"devices": {}, "cpu": {"sockets": 2}}),
            ),
        )
        .await
        .expect_err("a template that sets what the instance type sets is refused")
        .to_string();
    assert!(
        conflict.contains(
            "VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected instance type"
        ),
        "{conflict}"
    );
    preferences
        .patch(
            &preference,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"requirements": {"cpu": {"guest": 8}}}})),
        )
        .await
        .expect("the preference patched");
    let unmet = vms
        .create(&post, &vm("unmet", &preference, json!({"devices": {}})))
        .await
        .expect_err("a VM that does not meet the preference's requirements is refused")
        .to_string();
    assert!(
        unmet.contains("failure checking preference requirements: insufficient CPU resources of 3 vCPU provided by instance type, preference requires 8 vCPU"),
        "{unmet}"
    );

    // expand-spec answers the VM as it runs, without its references.
    let expanded = kubectl(
        namespace,
        &[
            "get",
            "--raw",
            &format!("/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachines/first/expand-spec"),
        ],
    );
    assert_eq!(expanded.code, Some(0), "{}", expanded.stderr);
    let expanded: Value = serde_json::from_str(&expanded.stdout).expect("a VM");
    assert!(expanded["spec"].get("instancetype").is_none(), "{expanded}");
    assert_eq!(
        expanded["spec"]["template"]["spec"]["domain"]["cpu"]["cores"],
        2
    );
    assert_eq!(
        expanded["spec"]["template"]["spec"]["domain"]["memory"]["guest"],
        "16Mi"
    );
    let by_virtctl = virtctl(namespace, &["expand", "--vm", "first", "-o", "json"]);
    assert_eq!(by_virtctl.code, Some(0), "{}", by_virtctl.stderr);
    let by_virtctl: Value = serde_json::from_str(&by_virtctl.stdout).expect("a VM");
    assert_eq!(
        by_virtctl["spec"]["template"]["spec"]["domain"]["cpu"]["cores"],
        2
    );

    // The VM's revisions go with it.
    vms.delete("first", &DeleteParams::foreground())
        .await
        .expect("the VM deleted");
    wait_for("the VM's revision collected", TIMEOUT, || async {
        revisions
            .get_opt(&it_revision)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    drop(cleanup);
}

/// Deletes the cluster-wide preference, whatever the test's outcome.
struct PreferenceCleanup(String);

impl Drop for PreferenceCleanup {
    fn drop(&mut self) {
        let _ = kubectl(
            "default",
            &[
                "delete",
                "virtualmachineclusterpreference",
                &self.0,
                "--ignore-not-found",
            ],
        );
    }
}

/// The KubeVirt CR's `referencePolicy: expandAll`: a VM gets its instance type written into its
/// spec, its references and stored revisions dropped, and runs as a VM that names nothing.
#[tokio::test]
async fn the_expand_all_reference_policy_writes_the_instancetype_into_the_vm() {
    let _alone = ClusterChange::begin().await;
    let out = patch_kubevirt_cr(
        &json!({"spec": {"configuration": {"instancetype": {"referencePolicy": "expandAll"}}}}),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let client = client().await;
    let ns = TestNamespace::create(&client, "instancetype-expand").await;
    let namespace = ns.name.as_str();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let instancetypes: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &resource("VirtualMachineInstancetype", "virtualmachineinstancetypes"),
    );
    let post = PostParams::default();
    instancetypes
        .create(
            &post,
            &object(json!({
                "apiVersion": "instancetype.kubevirt.io/v1beta1",
                "kind": "VirtualMachineInstancetype",
                "metadata": {"name": INSTANCETYPE},
                "spec": {"cpu": {"guest": 2}, "memory": {"guest": "16Mi"}},
            })),
        )
        .await
        .expect("the instance type");
    let mut expanded_vm: Value =
        serde_json::to_value(vm("expanded", "unused", json!({"devices": {}}))).expect("a VM");
    expanded_vm["spec"]
        .as_object_mut()
        .expect("a spec")
        .remove("preference");
    let expanded_vm: VirtualMachine = serde_json::from_value(expanded_vm).expect("a VM");
    vms.create(&post, &expanded_vm).await.expect("the VM");
    let vm = wait_for("the VM expanded", TIMEOUT, || async {
        let vm = vms.get("expanded").await.ok()?;
        vm.spec.instancetype.is_none().then_some(vm)
    })
    .await;
    let template = vm.spec.template.spec.expect("a template spec");
    let cpu = template.domain.cpu.expect("a CPU");
    assert_eq!(
        (cpu.sockets, cpu.cores, cpu.threads),
        (Some(2), Some(1), Some(1))
    );
    assert_eq!(
        template.domain.memory.and_then(|m| m.guest).map(|q| q.0),
        Some("16Mi".to_string())
    );
    let status = vm.status.unwrap_or_default();
    assert!(status.instancetype_ref.is_none(), "{status:?}");
    let vmi = wait_running(&vmis, "expanded", TIMEOUT).await;
    assert_eq!(size(&vmi).0, Some(2));
    let stored = revisions
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("{LABEL_OBJECT_NAME}={INSTANCETYPE}")),
        )
        .await
        .expect("revisions listed");
    assert!(
        stored.items.is_empty(),
        "no revision is kept: {:?}",
        stored.items
    );
}

/// Runs virtctl `args` (a `create` command) and `kubectl apply`s the manifest it printed.
fn create_and_apply(namespace: &str, args: &[&str]) -> String {
    let out = virtctl(namespace, args);
    assert_eq!(out.code, Some(0), "virtctl {args:?}: {}", out.stderr);
    let file = std::env::temp_dir().join(format!(
        "ferrovirt-{namespace}-{}.yaml",
        args.get(1).copied().unwrap_or("manifest")
    ));
    std::fs::write(&file, &out.stdout).expect("the manifest written");
    let applied = kubectl(namespace, &["apply", "-f", &file.to_string_lossy()]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        applied.code,
        Some(0),
        "kubectl apply of {:?}'s manifest:\n{}\n{}",
        args,
        out.stdout,
        applied.stderr
    );
    out.stdout
}

/// KubeVirt's flow with virtctl alone: `create instancetype`, `create preference` and
/// `create vm --instancetype --preference --volume-containerdisk`, each applied with kubectl;
/// the VM runs with the instance type's size and the preference's topology, both stored in
/// revisions.
#[tokio::test]
async fn a_vm_made_by_virtctl_create_vm_runs_with_its_instancetype_and_preference() {
    let _shared = ClusterLock::shared().await;
    let client = client().await;
    let ns = TestNamespace::create(&client, "virtctl-create-vm").await;
    let namespace = ns.name.as_str();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);

    create_and_apply(
        namespace,
        &[
            "create",
            "instancetype",
            "--namespaced",
            "--name",
            "small",
            "--cpu",
            "2",
            "--memory",
            "160Mi",
        ],
    );
    create_and_apply(
        namespace,
        &[
            "create",
            "preference",
            "--namespaced",
            "--name",
            "cores",
            "--cpu-topology",
            "preferCores",
        ],
    );
    let manifest = create_and_apply(
        namespace,
        &[
            "create",
            "vm",
            "--name",
            "from-virtctl",
            "--instancetype",
            "virtualmachineinstancetype/small",
            "--preference",
            "virtualmachinepreference/cores",
            "--volume-containerdisk",
            "src:registry:5000/ferrovirt/tiny-container-disk:devel",
            "--termination-grace-period",
            "0",
        ],
    );
    assert!(
        manifest.contains("runStrategy: Always"),
        "virtctl's default run strategy:\n{manifest}"
    );

    let vmi = wait_running(&vmis, "from-virtctl", TIMEOUT).await;
    // Two vCPUs as cores of one socket (the preference), the instance type's memory.
    assert_eq!(
        size(&vmi),
        (Some(1), Some(2), Some(1), "160Mi".to_string()),
        "the VMI's CPU and memory"
    );
    let volume = &vmi.spec.volumes[0];
    assert_eq!(volume.name, "from-virtctl-containerdisk-0");
    // Both stored in ControllerRevisions named in the VM's status.
    wait_for("the VM's status naming both revisions", TIMEOUT, || async {
        let status = vms.get("from-virtctl").await.ok()?.status?;
        (status.instancetype_ref.as_ref()?.revision().is_some()
            && status.preference_ref.as_ref()?.revision().is_some())
        .then_some(())
    })
    .await;
}
