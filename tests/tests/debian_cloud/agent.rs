//! The Debian guest's qemu-guest-agent through virt-handler (`guestosinfo`, `userlist`,
//! `fslist`, `freeze` holding a write until `unfreeze`, `soft-reboot` from inside), and a soft
//! reboot through ACPI with the agent stopped.

use std::time::{Duration, Instant};

use api::VirtualMachineInstance;
use ferrovirt_tests::console::ConsoleSession;
use ferrovirt_tests::{virtctl, wait_for};
use kube::Api;

use super::{BOOT, PASSWORD, USER};

/// PUTs `body` to the VMI's subresource `sub` (`kubectl replace --raw`, a PUT).
fn put_subresource(namespace: &str, vm: &str, sub: &str, body: &serde_json::Value) {
    let file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(file.path(), body.to_string()).expect("the body");
    let path = format!(
        "/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{vm}/{sub}"
    );
    let out = ferrovirt_tests::kubectl(
        namespace,
        &[
            "replace",
            "--raw",
            &path,
            "-f",
            &file.path().display().to_string(),
        ],
    );
    assert_eq!(out.code, Some(0), "PUT {path}: {out:?}");
}

/// The VMI's `status.fsFreezeStatus`.
async fn freeze_status(vmis: &Api<VirtualMachineInstance>, vm: &str) -> Option<String> {
    vmis.get(vm)
        .await
        .ok()
        .and_then(|v| v.status)
        .and_then(|s| s.fs_freeze_status)
}

/// `freeze` through the API: the VMI says `fsFreezeStatus: frozen`, a file the console's shell
/// starts to write does not appear while frozen (its write waits in the guest's kernel), and
/// `unfreeze` lets it finish. Returns how long the write waited.
async fn freeze_blocks_a_write(
    vmis: &Api<VirtualMachineInstance>,
    namespace: &str,
    vm: &str,
) -> Duration {
    put_subresource(
        namespace,
        vm,
        "freeze",
        &serde_json::json!({"unfreezeTimeout": "5m"}),
    );
    wait_for("fsFreezeStatus frozen", Duration::from_secs(60), || async {
        (freeze_status(vmis, vm).await.as_deref() == Some("frozen")).then_some(())
    })
    .await;
    let (ns, name) = (namespace.to_string(), vm.to_string());
    let console = tokio::task::spawn_blocking(move || -> Result<ConsoleSession, String> {
        let mut console = ConsoleSession::open(&ns, &name)?;
        console.prompt("$ ", Duration::from_secs(60))?;
        console.run(
            "sh -c 'echo data > frozen-write && echo write-$((1 + 1))-done' & echo started-$((2 + 2))",
            "started-4",
        )?;
        // While frozen the write waits: its message must not come.
        match console.shown("write-2-done", Duration::from_secs(10)) {
            Ok(()) => Err("the write finished while the filesystems were frozen".into()),
            Err(_) => Ok(console),
        }
    })
    .await
    .expect("the console session thread")
    .unwrap_or_else(|e| panic!("{vm}: writing while frozen: {e}"));
    let waited = Instant::now();
    put_subresource(namespace, vm, "unfreeze", &serde_json::json!({}));
    tokio::task::spawn_blocking(move || -> Result<(), String> {
        let mut console = console;
        console.shown("write-2-done", Duration::from_secs(120))?;
        console.escape().map(drop)
    })
    .await
    .expect("the console session thread")
    .unwrap_or_else(|e| panic!("{vm}: the write after unfreeze: {e}"));
    let held = waited.elapsed() + Duration::from_secs(10);
    wait_for(
        "fsFreezeStatus gone after unfreeze",
        Duration::from_secs(60),
        || async { freeze_status(vmis, vm).await.is_none().then_some(()) },
    )
    .await;
    held
}

/// The guest agent's answers as virtctl prints them (JSON).
/// After a soft reboot: the VMI of UID `uid` still runs.
async fn same_vmi_running(vmis: &Api<VirtualMachineInstance>, vm: &str, uid: &Option<String>) {
    let after = vmis.get(vm).await.expect("the VMI after the soft reboot");
    assert_eq!(
        &after.metadata.uid, uid,
        "{vm}: the same VMI runs after a soft reboot"
    );
    assert_eq!(
        after.status.as_ref().and_then(|s| s.phase),
        Some(api::VmiPhase::Running),
        "{vm} after the soft reboot"
    );
}

/// Whether the VMI's `AgentConnected` condition is True.
fn agent_connected(vmi: &VirtualMachineInstance) -> bool {
    vmi.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "AgentConnected" && c.status == "True")
    })
}

/// `virtctl soft-reboot` with the guest agent stopped (`systemctl stop` on the console): the
/// launcher presses the ACPI power button, systemd powers the guest off, QEMU (told to pause
/// at that power-off) is reset and resumed, and the guest boots again to its login prompt: the
/// kernel's "reboot: Power down", then firmware and kernel again. The same VMI runs on.
/// Returns what to print.
pub async fn soft_reboot_through_acpi(
    vmis: &Api<VirtualMachineInstance>,
    namespace: &str,
    vm: &str,
) -> String {
    let (ns, name) = (namespace.to_string(), vm.to_string());
    tokio::task::spawn_blocking(move || -> Result<String, String> {
        let mut console = ConsoleSession::open(&ns, &name)?;
        console.prompt("$ ", Duration::from_secs(60))?;
        console.run(
            "sudo systemctl stop qemu-guest-agent; echo agent-stopped-$((2 + 3))",
            "agent-stopped-5",
        )?;
        console.escape()
    })
    .await
    .expect("the console session thread")
    .unwrap_or_else(|e| panic!("{vm}: stopping the guest agent on the console: {e}"));
    let uid = wait_for(
        "the VMI without AgentConnected",
        Duration::from_secs(120),
        || async {
            let vmi = vmis.get(vm).await.ok()?;
            (!agent_connected(&vmi)).then_some(vmi.metadata.uid)
        },
    )
    .await;
    let (ns, name) = (namespace.to_string(), vm.to_string());
    let rebooted = tokio::task::spawn_blocking(move || -> Result<Duration, String> {
        let mut console = ConsoleSession::open(&ns, &name)?;
        console.prompt("$ ", Duration::from_secs(60))?;
        let asked = Instant::now();
        let out = virtctl(&ns, &["soft-reboot", &name]);
        if (out.code, out.stdout.trim())
            != (Some(0), &format!("VMI {name} was scheduled to soft-reboot"))
        {
            return Err(format!("virtctl soft-reboot: {out:?}"));
        }
        console.shown("reboot: Power down", BOOT)?;
        console.shown("Linux version", BOOT)?;
        console.login(USER, PASSWORD, BOOT)?;
        let rebooted = asked.elapsed();
        console.escape()?;
        Ok(rebooted)
    })
    .await
    .expect("the console session thread")
    .unwrap_or_else(|e| panic!("{vm}: soft reboot through ACPI: {e}"));
    same_vmi_running(vmis, vm, &uid).await;
    format!(
        "; soft-reboot without the agent (ACPI): powered off, booted again and the login prompt \
         {:.1} s later",
        rebooted.as_secs_f64()
    )
}

fn virtctl_json(namespace: &str, args: &[&str]) -> Result<serde_json::Value, String> {
    let out = virtctl(namespace, args);
    if out.code != Some(0) {
        return Err(format!("virtctl {args:?}: {out:?}"));
    }
    serde_json::from_str(&out.stdout)
        .map_err(|e| format!("virtctl {args:?} printed no JSON ({e}): {out:?}"))
}

/// The guest agent on `vm`, whose user is logged in on the serial console: the VMI's condition
/// and OS info, `virtctl guestosinfo`, `userlist`, `fslist`, then `soft-reboot`. Returns what to
/// print.
pub async fn guest_agent(vmis: &Api<VirtualMachineInstance>, namespace: &str, vm: &str) -> String {
    let waited = Instant::now();
    let vmi = wait_for("the VMI's AgentConnected condition", BOOT, || async {
        let vmi = vmis.get(vm).await.ok()?;
        let connected = vmi
            .status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c.type_ == "AgentConnected" && c.status == "True");
        connected.then_some(vmi)
    })
    .await;
    let to_agent = waited.elapsed();
    let os = vmi
        .status
        .as_ref()
        .and_then(|s| s.guest_os_info.clone())
        .unwrap_or_else(|| panic!("{vm}: AgentConnected without status.guestOSInfo: {vmi:?}"));
    assert_eq!(
        (os.id.as_deref(), os.version_id.as_deref()),
        (Some("debian"), Some("12")),
        "{vm}: status.guestOSInfo {os:?}"
    );

    let info = virtctl_json(namespace, &["guestosinfo", vm]).unwrap_or_else(|e| panic!("{e}"));
    let pretty = info["os"]["prettyName"].as_str().unwrap_or_default();
    assert!(
        pretty.starts_with("Debian GNU/Linux 12"),
        "guestosinfo names Debian 12: {info}"
    );
    assert!(
        info["guestAgentVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
            && info["hostname"].as_str().is_some_and(|h| !h.is_empty()),
        "guestosinfo has the agent's version and the guest's hostname: {info}"
    );

    // The agent lists the users of utmp; the launcher polls it every few seconds.
    let users = wait_for(
        "the console's user in virtctl userlist",
        Duration::from_secs(120),
        || async {
            let users = virtctl_json(namespace, &["userlist", vm]).ok()?;
            let listed = users["items"]
                .as_array()?
                .iter()
                .any(|u| u["userName"] == USER);
            listed.then_some(users)
        },
    )
    .await;
    let filesystems = virtctl_json(namespace, &["fslist", vm]).unwrap_or_else(|e| panic!("{e}"));
    let root = filesystems["items"]
        .as_array()
        .and_then(|items| items.iter().find(|fs| fs["mountPoint"] == "/"))
        .unwrap_or_else(|| panic!("fslist shows no `/`: {filesystems}"));
    assert_eq!(
        root["fileSystemType"], "ext4",
        "the root filesystem: {root}"
    );
    assert!(
        root["totalBytes"].as_u64().is_some_and(|b| b > 0),
        "the root filesystem's size: {root}"
    );

    let frozen_for = freeze_blocks_a_write(vmis, namespace, vm).await;

    let uid = vmi.metadata.uid.clone();
    let out = virtctl(namespace, &["soft-reboot", vm]);
    assert_eq!(
        (out.code, out.stdout.trim()),
        (
            Some(0),
            format!("VMI {vm} was scheduled to soft-reboot").as_str()
        ),
        "virtctl soft-reboot: {out:?}"
    );
    let rebooted = Instant::now();
    let (namespace_owned, vm_owned) = (namespace.to_string(), vm.to_string());
    tokio::task::spawn_blocking(move || -> Result<(), String> {
        let mut console = ConsoleSession::open(&namespace_owned, &vm_owned)?;
        console.shown("reboot: Restarting system", BOOT)?;
        console.shown("Linux version", BOOT)?;
        console.escape().map(drop)
    })
    .await
    .expect("the console session thread")
    .unwrap_or_else(|e| panic!("{vm}: the guest did not reboot after soft-reboot: {e}"));
    same_vmi_running(vmis, vm, &uid).await;
    format!(
        "; guest agent connected {:.1} s after the login ({} user(s), {} filesystem(s)); \
         freeze held a write for {:.1} s until unfreeze; soft-reboot: new boot on the console \
         {:.1} s later",
        to_agent.as_secs_f64(),
        users["items"].as_array().map_or(0, Vec::len),
        filesystems["items"].as_array().map_or(0, Vec::len),
        frozen_for.as_secs_f64(),
        rebooted.elapsed().as_secs_f64()
    )
}
