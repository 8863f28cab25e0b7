//! The guest's SMBIOS tables on the local cluster: with the KubeVirt CR's
//! `spec.configuration.smbios` set, a VM of KubeVirt's getting-started example (the cirros
//! stand-in, which boots Debian's kernel on QEMU's microvm) reads in `/sys/class/dmi/id/` the
//! CR's manufacturer, product, version, SKU and family, its own `firmware.serial`, and the
//! firmware UUID virt-controller derived from the VM's name. Its userData prints them on the
//! console, read through the launcher's console socket.

use std::time::Duration;

use api::{VirtualMachine, VirtualMachineInstance};
use ferrovirt_tests::cluster_lock::ClusterChange;
use ferrovirt_tests::{
    client, getting_started_vm, patch_kubevirt_cr, read_console, wait_for, wait_running,
    TestNamespace,
};
use kube::api::PostParams;
use kube::Api;

const VM: &str = "smbios";

/// Prints the DMI fields the guest's kernel read, on one line.
const USER_DATA: &str = "#!/bin/sh\ncd /sys/class/dmi/id && echo \"FV-DMI $(cat sys_vendor \
                         product_name product_version product_sku product_family \
                         product_serial product_uuid | tr '\\n' '|')\"\n";

#[tokio::test]
async fn the_crs_smbios_settings_and_the_vms_firmware_reach_the_guest() {
    let _alone = ClusterChange::begin().await;
    let settings = serde_json::json!({
        "manufacturer": "Ferrovirt Test", "product": "P-1", "version": "V-2", "sku": "S-3",
        "family": "F-4"
    });
    let out =
        patch_kubevirt_cr(&serde_json::json!({"spec": {"configuration": {"smbios": settings}}}));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-smbios").await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &namespace.name);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace.name);
    let mut vm = getting_started_vm(VM);
    vm["spec"]["runStrategy"] = "Always".into();
    let template = &mut vm["spec"]["template"]["spec"];
    template["domain"]["firmware"] = serde_json::json!({"serial": "fv-serial-7"});
    template["volumes"][1]["cloudInitNoCloud"]["userData"] = USER_DATA.into();
    let vm: VirtualMachine = serde_json::from_value(vm).expect("a VirtualMachine");
    vms.create(&PostParams::default(), &vm)
        .await
        .expect("VM created");
    let running = wait_running(&vmis, VM, Duration::from_secs(300)).await;
    let uuid = running
        .spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.uuid.clone())
        .expect("the VMI has the VM's firmware UUID");
    let node = running
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("a node");
    let uid = running.metadata.uid.clone().expect("a uid");
    let line = wait_for(
        "the userData's FV-DMI line on the console",
        Duration::from_secs(240),
        || async {
            let console = read_console(&node, &uid, Duration::from_secs(3));
            console
                .lines()
                .find_map(|l| l.trim_end().strip_prefix("FV-DMI ").map(str::to_string))
        },
    )
    .await;
    assert_eq!(
        line,
        format!("Ferrovirt Test|P-1|V-2|S-3|F-4|fv-serial-7|{uuid}|"),
        "what the guest read in /sys/class/dmi/id/"
    );
}
