//! VirtualMachine run strategies on the local cluster: Halted and Always start and stop the VMI
//! (each start recording the VM's spec in a ControllerRevision the VMI names),
//! RerunOnFailure replaces a VMI whose launcher crashed (a Warning `Stopped` event on the crashed
//! one, as KubeVirt records), and Once does not; `virtctl stop` and `start` on a RerunOnFailure
//! VM stop and start it by requests and keep its strategy.

use std::time::Duration;

use api::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::{
    client, kill_launcher, set_run_strategy, tiny_vm, virtctl, wait_for, TestNamespace,
};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::Api;

const START: Duration = Duration::from_secs(240);

async fn vmi_in_phase(
    vmis: &Api<VirtualMachineInstance>,
    name: &str,
    phase: VmiPhase,
) -> VirtualMachineInstance {
    wait_for(&format!("VMI {name} in phase {phase:?}"), START, || async {
        let vmi = vmis.get_opt(name).await.ok()??;
        (vmi.status.as_ref()?.phase? == phase).then_some(vmi)
    })
    .await
}

async fn printable_status(vms: &Api<VirtualMachine>, name: &str, want: &str) {
    wait_for(
        &format!("VM {name} printableStatus {want}"),
        START,
        || async {
            let vm = vms.get(name).await.ok()?;
            (vm.status?.printable_status.as_deref() == Some(want)).then_some(())
        },
    )
    .await
}

#[tokio::test]
async fn halted_and_always_start_and_stop() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-halted").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &namespace.name);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    vms.create(
        &PostParams::default(),
        &tiny_vm("vm1", "Halted", "#!/bin/sh\necho hi\n"),
    )
    .await
    .expect("VM created");
    printable_status(&vms, "vm1", "Stopped").await;
    assert!(
        vmis.get_opt("vm1").await.expect("get").is_none(),
        "a Halted VM has no VMI"
    );

    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace.name);
    let mut earlier: Option<String> = None;
    // Two starts: each records the VM's spec at its generation, and the second deletes the
    // first's record.
    for _ in 0..2 {
        set_run_strategy(&vms, "vm1", "Always").await;
        let vmi = vmi_in_phase(&vmis, "vm1", VmiPhase::Running).await;
        printable_status(&vms, "vm1", "Running").await;
        let vm = vms.get("vm1").await.expect("the VM");
        let generation = vm.metadata.generation.expect("a generation");
        let expected = format!(
            "revision-start-vm-{}-{generation}",
            vm.metadata.uid.as_deref().expect("a UID")
        );
        let named = vmi.status.and_then(|s| s.virtual_machine_revision_name);
        assert_eq!(
            named.as_deref(),
            Some(expected.as_str()),
            "the VMI's revision"
        );
        let revision = revisions.get(&expected).await.expect("the start revision");
        assert_eq!(revision.revision, generation);
        let data = revision.data.expect("revision data").0;
        assert_eq!(
            data["spec"],
            serde_json::to_value(&vm.spec).expect("the VM's spec"),
            "the revision holds the VM's spec"
        );
        if let Some(earlier) = earlier.replace(expected) {
            assert!(
                revisions.get_opt(&earlier).await.expect("get").is_none(),
                "the first start's revision {earlier} is still there"
            );
        }

        set_run_strategy(&vms, "vm1", "Halted").await;
        wait_for("the VMI to be gone", START, || async {
            vmis.get_opt("vm1").await.ok()?.is_none().then_some(())
        })
        .await;
        printable_status(&vms, "vm1", "Stopped").await;
    }
}

#[tokio::test]
async fn rerun_on_failure_replaces_a_crashed_vmi_and_once_does_not() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-rerun").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &namespace.name);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    for (name, strategy) in [("rerun", "RerunOnFailure"), ("once", "Once")] {
        vms.create(
            &PostParams::default(),
            &tiny_vm(name, strategy, "#!/bin/sh\necho hi\n"),
        )
        .await
        .expect("VM created");
    }
    let mut uids = Vec::new();
    for name in ["rerun", "once"] {
        let first = vmi_in_phase(&vmis, name, VmiPhase::Running).await;
        let uid = first.metadata.uid.clone().expect("uid");
        kill_launcher(&uid);
        uids.push(uid);
    }
    // RerunOnFailure: the crashed VMI is replaced by a new one that runs, after one counted
    // failure.
    wait_for("a new running VMI for rerun", START, || async {
        let vmi = vmis.get_opt("rerun").await.ok()??;
        let replaced = vmi.metadata.uid.as_deref() != Some(uids[0].as_str());
        (replaced && vmi.status.as_ref()?.phase? == VmiPhase::Running).then_some(())
    })
    .await;
    let vm = vms.get("rerun").await.expect("VM");
    let failures = vm
        .status
        .and_then(|s| s.start_failure)
        .and_then(|f| f.consecutive_fail_count);
    assert!(
        failures.is_none() || failures == Some(1),
        "one failure counted, reset once running: {failures:?}"
    );
    // Once: the failed VMI stays, with its reason; no new one is made.
    let status = wait_for("the Once VMI to fail", START, || async {
        let vmi = vmis.get_opt("once").await.ok()??;
        let status = vmi.status.clone()?;
        (status.phase? == VmiPhase::Failed).then_some((vmi.metadata.uid.clone(), status))
    })
    .await;
    assert_eq!(
        status.0.as_deref(),
        Some(uids[1].as_str()),
        "the Once VMI is not replaced"
    );
    assert!(
        status.1.reason.is_some(),
        "a failed VMI says why: {:?}",
        status.1
    );
    printable_status(&vms, "once", "Stopped").await;

    // Each crashed VMI got KubeVirt's Warning `Stopped` event.
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace.name);
    for uid in &uids {
        wait_for(
            "a Warning Stopped event on the crashed VMI",
            START,
            || async {
                let list = events
                    .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
                    .await
                    .ok()?;
                list.items
                    .iter()
                    .any(|e| {
                        e.type_.as_deref() == Some("Warning")
                            && e.reason.as_deref() == Some("Stopped")
                    })
                    .then_some(())
            },
        )
        .await;
    }

    // virtctl stop: the VMI goes, the strategy stays, and no new VMI comes.
    let stop = virtctl(&namespace.name, &["stop", "rerun"]);
    assert_eq!(stop.code, Some(0), "virtctl stop: {stop:?}");
    wait_for("the rerun VMI to be gone", START, || async {
        vmis.get_opt("rerun").await.ok()?.is_none().then_some(())
    })
    .await;
    printable_status(&vms, "rerun", "Stopped").await;
    // An observation window, not a wait for a condition: the VM must stay stopped.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        vmis.get_opt("rerun").await.expect("get").is_none(),
        "a stopped RerunOnFailure VM was started again"
    );
    let vm = vms.get("rerun").await.expect("VM");
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("RerunOnFailure"));
    // virtctl start: a Start request runs it again.
    let start = virtctl(&namespace.name, &["start", "rerun"]);
    assert_eq!(start.code, Some(0), "virtctl start: {start:?}");
    vmi_in_phase(&vmis, "rerun", VmiPhase::Running).await;
}
