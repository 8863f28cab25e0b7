//! A VMI in the style of KubeVirt's vmi-nocloud.yaml on the local cluster: it runs, its launcher
//! Pod sits on the node the VMI reports, the guest's console shows the ready marker and the
//! cloud-init user-data output, and deleting the VMI shuts the guest down, removes the Pod and
//! the finalizer.

use std::time::Duration;

use api::{VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::{client, read_console, wait_for, TestNamespace, GUEST_READY_MARKER};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;

const USER_DATA_OUTPUT: &str = "printed from cloud-init userdata";

fn nocloud_vmi() -> VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vmi-nocloud", "labels": {"special": "vmi-nocloud"}},
        "spec": {
            "domain": {
                "devices": {"disks": [
                    {"name": "containerdisk", "disk": {"bus": "virtio"}},
                    {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                    {"name": "emptydisk", "disk": {"bus": "virtio"}}
                ]},
                "memory": {"guest": "128Mi"},
                "resources": {}
            },
            "terminationGracePeriodSeconds": 0,
            "volumes": [
                {"name": "containerdisk",
                 "containerDisk": {"image": "registry:5000/ferrovirt/tiny-container-disk:devel"}},
                {"name": "cloudinitdisk",
                 "cloudInitNoCloud": {"userData": format!("#!/bin/sh\n\necho '{USER_DATA_OUTPUT}'\n")}},
                {"name": "emptydisk", "emptyDisk": {"capacity": "2Gi"}}
            ]
        }
    }))
    .expect("a VMI")
}

#[tokio::test]
async fn vmi_runs_shows_its_console_and_is_deleted_cleanly() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-vmi").await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);

    let created = vmis
        .create(&PostParams::default(), &nocloud_vmi())
        .await
        .expect("VMI created");
    let uid = created.metadata.uid.clone().expect("VMI has a UID");

    let running = wait_for(
        "the VMI to be Running",
        Duration::from_secs(240),
        || async {
            let vmi = vmis.get("vmi-nocloud").await.ok()?;
            let phase = vmi.status.as_ref()?.phase?;
            assert_ne!(phase, VmiPhase::Failed, "VMI failed: {:?}", vmi.status);
            (phase == VmiPhase::Running).then_some(vmi)
        },
    )
    .await;
    let node = running
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("nodeName is set");

    let launcher_pods = pods
        .list(&ListParams::default().labels(&format!("{}={uid}", contract::labels::CREATED_BY)))
        .await
        .expect("pods listed")
        .items;
    assert_eq!(launcher_pods.len(), 1, "one launcher Pod");
    let pod = &launcher_pods[0];
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(node.as_str())
    );
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );

    let console = wait_for(
        "the ready marker and cloud-init output on the console",
        Duration::from_secs(180),
        || {
            let node = node.clone();
            let uid = uid.clone();
            async move {
                let text = tokio::task::spawn_blocking(move || {
                    read_console(&node, &uid, Duration::from_secs(3))
                })
                .await
                .ok()?;
                (text.contains(GUEST_READY_MARKER) && text.contains(USER_DATA_OUTPUT))
                    .then_some(text)
            }
        },
    )
    .await;
    assert!(console.contains(USER_DATA_OUTPUT), "{console}");

    vmis.delete("vmi-nocloud", &DeleteParams::default())
        .await
        .expect("VMI deleted");
    wait_for(
        "the VMI and its finalizer to be gone",
        Duration::from_secs(120),
        || async {
            vmis.get_opt("vmi-nocloud")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    wait_for(
        "the launcher Pod to be gone",
        Duration::from_secs(120),
        || async {
            let left = pods
                .list(
                    &ListParams::default()
                        .labels(&format!("{}={uid}", contract::labels::CREATED_BY)),
                )
                .await
                .ok()?;
            left.items.is_empty().then_some(())
        },
    )
    .await;
}
