//! Failures on the local cluster: a VMI that no node can hold reports the scheduler's reason, a
//! containerDisk that cannot be pulled is reported on its VMI, a killed launcher fails its VMI
//! with a reason, a restarted virt-handler leaves running VMs untouched, and a VM whose firmware
//! UUID is not one starts no VMI and says why.

use std::time::Duration;

use api::vm::VirtualMachine;
use api::{VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::{
    client, kill_launcher, launcher_pids, restart_handler, tiny_vmi_spec, wait_for, wait_running,
    TestNamespace,
};
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::Api;

fn vmi(name: &str, memory: &str) -> VirtualMachineInstance {
    let mut spec = tiny_vmi_spec("#!/bin/sh\necho hi\n");
    spec["domain"]["memory"]["guest"] = serde_json::json!(memory);
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("a VMI")
}

async fn running(vmis: &Api<VirtualMachineInstance>, name: &str) -> VirtualMachineInstance {
    wait_running(vmis, name, Duration::from_secs(240)).await
}

#[tokio::test]
async fn an_unschedulable_vmi_reports_the_schedulers_reason() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-unsched").await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    vmis.create(&PostParams::default(), &vmi("huge", "4Ti"))
        .await
        .expect("VMI created");
    let condition = wait_for(
        "a PodScheduled=False condition",
        Duration::from_secs(120),
        || async {
            let vmi = vmis.get("huge").await.ok()?;
            vmi.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        },
    )
    .await;
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
    assert!(
        condition
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("Insufficient memory"),
        "{condition:?}"
    );
}

/// A containerDisk image the registry does not have: its container in the launcher Pod cannot
/// start, the VMI stays Scheduling and says why (the kubelet's reason, as KubeVirt's VMI does).
#[tokio::test]
async fn a_container_disk_that_cannot_be_pulled_is_reported_on_the_vmi() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-pull").await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    let mut vmi = vmi("unpullable", "128Mi");
    let disk = vmi
        .spec
        .volumes
        .iter_mut()
        .find_map(|v| v.container_disk.as_mut())
        .expect("a containerDisk volume");
    disk.image = "registry:5000/ferrovirt/no-such-container-disk:devel".into();
    vmis.create(&PostParams::default(), &vmi)
        .await
        .expect("VMI created");
    let condition = wait_for(
        "a Synchronized=False condition naming the pull error",
        Duration::from_secs(180),
        || async {
            vmis.get("unpullable")
                .await
                .ok()?
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Synchronized" && c.status == "False")
        },
    )
    .await;
    assert!(
        matches!(
            condition.reason.as_deref(),
            Some("ErrImagePull" | "ImagePullBackOff")
        ),
        "{condition:?}"
    );
    assert!(
        condition
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("no-such-container-disk"),
        "{condition:?}"
    );
    let phase = vmis.get("unpullable").await.expect("the VMI").status;
    assert_eq!(
        phase.and_then(|s| s.phase),
        Some(VmiPhase::Scheduling),
        "the VMI moved on without its disk"
    );
}

#[tokio::test]
async fn a_killed_launcher_fails_its_vmi() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-kill").await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    vmis.create(&PostParams::default(), &vmi("victim", "128Mi"))
        .await
        .expect("VMI created");
    let vmi = running(&vmis, "victim").await;
    kill_launcher(vmi.metadata.uid.as_deref().expect("uid"));
    let status = wait_for("the VMI to fail", Duration::from_secs(120), || async {
        let status = vmis.get("victim").await.ok()?.status?;
        (status.phase? == VmiPhase::Failed).then_some(status)
    })
    .await;
    assert!(status.reason.is_some(), "{status:?}");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    assert!(!ready.is_true());
}

#[tokio::test]
async fn a_restarted_handler_leaves_running_vms_alone() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-handler").await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    vmis.create(&PostParams::default(), &vmi("steady", "128Mi"))
        .await
        .expect("VMI created");
    let vmi = running(&vmis, "steady").await;
    let uid = vmi.metadata.uid.clone().expect("uid");
    let node = vmi
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("node");
    let before = launcher_pids(&uid);
    assert!(!before.is_empty());

    restart_handler(&client, &node, None).await;
    assert_eq!(launcher_pids(&uid), before, "the launcher kept running");
    let after = running(&vmis, "steady").await;
    assert_eq!(after.metadata.uid.as_deref(), Some(uid.as_str()));
}

/// KubeVirt admits any string as a VM's `firmware.uuid` (its own clone tests use `fake-uuid`);
/// the VMI made of it would carry it into the guest's SMBIOS tables, which hold 16 bytes, so
/// virt-api refuses that VMI with the field's path and virt-controller reports it on the VM.
#[tokio::test]
async fn a_vm_whose_firmware_uuid_is_not_one_starts_no_vmi_and_says_why() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-fwuuid").await;
    let mut spec = tiny_vmi_spec("#!/bin/sh\necho hi\n");
    spec["domain"]["firmware"] = serde_json::json!({"uuid": "fake-uuid"});
    let message = vm_refused_at_start(&client, &namespace.name, spec).await;
    assert!(
        message.contains("spec.domain.firmware.uuid") && message.contains("fake-uuid"),
        "the event does not name the field and its value: {message}"
    );
}

/// KubeVirt admits a VM whose template gives no memory (an instance type or a later edit may);
/// the VMI made of it could not boot, so virt-api refuses it with the field's path.
#[tokio::test]
async fn a_vm_without_memory_is_admitted_and_starts_no_vmi_and_says_why() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-nomem").await;
    let mut spec = tiny_vmi_spec("#!/bin/sh\necho hi\n");
    let domain = spec["domain"].as_object_mut().expect("a domain");
    domain.remove("memory");
    domain.remove("resources");
    let message = vm_refused_at_start(&client, &namespace.name, spec).await;
    assert!(
        message.contains("spec.domain.memory.guest")
            && message.contains("guest memory is required"),
        "the event does not name the field and the reason: {message}"
    );
}

/// Creates a running VM `refused` of the VMI `spec` in `ns` (it must be admitted) and waits for
/// virt-controller's FailedCreate event on it: its message, once no VMI is seen.
async fn vm_refused_at_start(client: &kube::Client, ns: &str, spec: serde_json::Value) -> String {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vm: VirtualMachine = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "refused"},
        "spec": {"runStrategy": "Always", "template": {"spec": spec}}
    }))
    .expect("a VM");
    let uid = vms
        .create(&PostParams::default(), &vm)
        .await
        .expect("the VM is admitted, as KubeVirt admits it")
        .metadata
        .uid
        .expect("a uid");
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let message = wait_for(
        "a FailedCreate event on the VM",
        Duration::from_secs(120),
        || async {
            let params = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
            events
                .list(&params)
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedCreate"))?
                .message
        },
    )
    .await;
    assert!(
        vmis.get_opt("refused")
            .await
            .expect("VMI looked up")
            .is_none(),
        "a VMI was created"
    );
    message
}
