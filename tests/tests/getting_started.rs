//! KubeVirt's getting-started flow on the local cluster, typed as a user types it: the real
//! `virtctl` binary with the cluster's kubeconfig, and `kubectl`.
//!
//! A VirtualMachine made from `examples/vm-cirros.yaml` (its own name, `runStrategy: Halted`)
//! in a namespace of its own; then `virtctl start`, the VMI Running (also in `kubectl get
//! vmis`) and booted from the cirros stand-in's own `/boot/grub/grub.cfg`, `virtctl console`
//! on a pseudo-terminal: the guest's login prompt, a login as `cirros`, a command whose output only the guest's shell can print, Ctrl+] to leave;
//! `virtctl pause vmi` (Paused condition) and `unpause` (the console answers again),
//! `virtctl reset` (the same VMI, a new boot to the login prompt on an open console),
//! `virtctl restart` (a new VMI that runs), `virtctl stop` (no VMI, the VM Stopped). And what
//! virtctl says, with which exit code, for a VM that does not exist, for `guestosinfo`
//! without a guest agent, for `stop --grace-period` without `--force`; `virtctl
//! version` and virt-api's `healthz` through kube-apiserver; `virtctl stop --force
//! --grace-period 0` of a started VM.
//!
//! Beside it: the installed virt-handler's console and action server answers only virt-api's
//! client certificate (mutual TLS, checked with curl and the operator's Secrets).

use std::time::Duration;

use api::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::console::ConsoleSession;
use ferrovirt_tests::{
    client, kubectl, virtctl, virtctl_binary, wait_for, CommandOutput, TestNamespace,
    GUEST_READY_MARKER,
};
use kube::api::PostParams;
use kube::Api;

const VM: &str = "getting-started";
/// Starting a VMI (image pull, launcher, QEMU TCG boot) on a loaded 2-core machine.
const START: Duration = Duration::from_secs(300);
/// The guest's accounts (guest-images/README.md: cirros's user and password).
const USER: &str = "cirros";
const PASSWORD: &str = "gocubsgo";

/// `examples/vm-cirros.yaml` with its own name and `runStrategy: Halted`.
fn getting_started_vm() -> VirtualMachine {
    serde_json::from_value(ferrovirt_tests::getting_started_vm(VM)).expect("a VirtualMachine")
}

fn assert_success(what: &str, out: &CommandOutput, stdout: &str) {
    assert_eq!(
        out.code,
        Some(0),
        "{what}: expected exit code 0; stdout: {}; stderr: {}",
        out.stdout,
        out.stderr
    );
    assert_eq!(out.stdout.trim(), stdout, "{what}: stderr: {}", out.stderr);
}

async fn running_vmi(
    vmis: &Api<VirtualMachineInstance>,
    other_than: Option<&str>,
) -> VirtualMachineInstance {
    wait_for(
        &format!("VMI {VM} Running (a UID other than {other_than:?})"),
        START,
        || async {
            let vmi = vmis.get_opt(VM).await.ok()??;
            let new = vmi.metadata.uid.as_deref() != other_than;
            (new && vmi.status.as_ref()?.phase? == VmiPhase::Running).then_some(vmi)
        },
    )
    .await
}

async fn paused_condition(vmis: &Api<VirtualMachineInstance>, paused: bool) {
    wait_for(
        &format!("VMI {VM} with Paused condition {paused}"),
        Duration::from_secs(60),
        || async {
            let vmi = vmis.get_opt(VM).await.ok()??;
            let is_paused = vmi
                .status?
                .conditions
                .iter()
                .any(|c| c.type_ == "Paused" && c.status == "True");
            (is_paused == paused).then_some(())
        },
    )
    .await
}

async fn vm_printable_status(vms: &Api<VirtualMachine>, want: &str) {
    wait_for(
        &format!("VM {VM} printableStatus {want}"),
        START,
        || async {
            let vm = vms.get(VM).await.ok()?;
            (vm.status?.printable_status.as_deref() == Some(want)).then_some(())
        },
    )
    .await
}

/// What a user sees: `kubectl get vmis` lists the VMI with phase Running.
fn kubectl_shows_running(namespace: &str) {
    let out = kubectl(namespace, &["get", "vmis"]);
    assert_eq!(out.code, Some(0), "kubectl get vmis: {}", out.stderr);
    let row = out
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(VM))
        .unwrap_or_else(|| panic!("kubectl get vmis does not list {VM}:\n{}", out.stdout));
    assert!(
        row.split_whitespace().any(|w| w == "Running"),
        "kubectl get vmis: expected {VM} Running:\n{}",
        out.stdout
    );
}

/// First session: log in and run a command.
fn first_console_session(namespace: &str) -> Result<String, String> {
    let mut console = ConsoleSession::open(namespace, VM)?;
    console.login(USER, PASSWORD, START)?;
    console.run("echo ferrovirt-$((6*7)) $(id -un)", "ferrovirt-42 cirros")?;
    console.escape()
}

/// A later session: the login shell from before is still there.
fn second_console_session(namespace: &str) -> Result<String, String> {
    let mut console = ConsoleSession::open(namespace, VM)?;
    console.prompt("$ ", Duration::from_secs(60))?;
    console.run("echo unpaused-$((5+5))", "unpaused-10")?;
    console.escape()
}

/// A console open at the shell's prompt while `virtctl reset` runs: the guest boots again to a
/// new login prompt, and the login works.
fn reset_console_session(namespace: &str) -> Result<String, String> {
    let mut console = ConsoleSession::open(namespace, VM)?;
    console.prompt("$ ", Duration::from_secs(60))?;
    let out = virtctl(namespace, &["reset", VM]);
    assert_success(
        "virtctl reset",
        &out,
        &format!("VMI {VM} was scheduled to reset"),
    );
    // A login prompt can follow a shell prompt only through a new boot.
    console.shown("login: ", START)?;
    console.login(USER, PASSWORD, START)?;
    console.run("echo reset-$((4*4))", "reset-16")?;
    console.escape()
}

async fn console(namespace: &str, session: fn(&str) -> Result<String, String>) -> String {
    let namespace = namespace.to_string();
    tokio::task::spawn_blocking(move || session(&namespace))
        .await
        .expect("the console session thread")
        .unwrap_or_else(|e| panic!("virtctl console: {e}"))
}

/// What a session showed after the guest's boot log (the console's backlog replays it).
fn after_boot(transcript: &str) -> &str {
    transcript
        .rsplit_once(GUEST_READY_MARKER)
        .map_or(transcript, |(_, after)| after)
}

/// As KubeVirt's virtctl: exit code 1 and `Error <verb>ing VirtualMachine <server message>`.
fn missing_vm_is_reported(namespace: &str) {
    for (args, prefix) in [
        (vec!["start", "no-such-vm"], "Error starting VirtualMachine"),
        (vec!["stop", "no-such-vm"], "Error stopping VirtualMachine"),
        (
            vec!["restart", "no-such-vm"],
            "Error restarting VirtualMachine",
        ),
    ] {
        let out = virtctl(namespace, &args);
        assert_eq!(
            out.code,
            Some(1),
            "virtctl {args:?} for a missing VM: expected exit code 1; stdout: {}; stderr: {}",
            out.stdout,
            out.stderr
        );
        assert!(
            out.stderr.starts_with(prefix) && out.stderr.contains("\"no-such-vm\" not found"),
            "virtctl {args:?}: expected `{prefix} ... \"no-such-vm\" not found`, got: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "nothing on stdout: {}", out.stdout);
    }
    // The console does not wait for a VMI that does not exist (it does for one not running).
    let out = virtctl(namespace, &["console", "no-such-vm", "--timeout", "1"]);
    assert_eq!(
        out.code,
        Some(1),
        "virtctl console for a missing VMI: {out:?}"
    );
    assert!(
        out.stderr.contains("Can't access VMI no-such-vm: ")
            && out.stderr.contains("\"no-such-vm\" not found"),
        "virtctl console: expected `Can't access VMI no-such-vm: ... not found`, got: {}",
        out.stderr
    );
    let out = virtctl(namespace, &["pause", "vmi", "no-such-vm"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .starts_with("Error pausing VirtualMachineInstance no-such-vm:")
            && out.stderr.contains("not found"),
        "{}",
        out.stderr
    );
}

/// What needs a running VMI but changes nothing: the guest-agent subresources are refused
/// clearly, usage errors are caught before any call, version and healthz answer.
fn the_other_commands(namespace: &str) {
    let out = virtctl(namespace, &["guestosinfo", VM]);
    assert_eq!(
        out.code,
        Some(1),
        "guestosinfo without a guest agent: {out:?}"
    );
    assert!(
        out.stderr
            .contains("VMI does not have guest agent connected"),
        "guestosinfo: expected KubeVirt's `VMI does not have guest agent connected`, got: {}",
        out.stderr
    );
    let out = virtctl(namespace, &["stop", VM, "--grace-period", "5"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "Can not set gracePeriod without --force=true"
    );
    let out = virtctl(namespace, &["stop", VM, "--force"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stderr.trim(), "Can not force stop without gracePeriod");

    let out = virtctl(namespace, &["version"]);
    assert_eq!(out.code, Some(0), "virtctl version: {out:?}");
    assert!(
        out.stdout
            .contains("Client Version: version.Info{GitVersion:\"v")
            && out
                .stdout
                .contains("Server Version: version.Info{GitVersion:\"v"),
        "virtctl version: {}",
        out.stdout
    );
    let out = kubectl(
        namespace,
        &["get", "--raw", "/apis/subresources.kubevirt.io/v1/healthz"],
    );
    assert_eq!(out.code, Some(0), "healthz through kube-apiserver: {out:?}");
    // KubeVirt's answer: the API server's connectivity and the KubeVirt CR's resourceVersion.
    let health: serde_json::Value = serde_json::from_str(&out.stdout).expect("healthz is JSON");
    assert_eq!(health["apiserver"]["connectivity"], "ok", "{health}");
    assert!(health["config-resource-version"].is_string(), "{health}");
}

#[tokio::test]
async fn getting_started_with_virtctl() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-getting-started").await;
    let ns = namespace.name.as_str();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    // Fails here with what to run when virtctl is not built.
    virtctl_binary();

    vms.create(&PostParams::default(), &getting_started_vm())
        .await
        .expect("VM created");
    vm_printable_status(&vms, "Stopped").await;
    assert!(
        vmis.get_opt(VM).await.expect("get VMI").is_none(),
        "a Halted VM has no VMI"
    );
    missing_vm_is_reported(ns);

    // virtctl start: the VMI runs.
    let out = virtctl(ns, &["start", VM]);
    assert_success(
        "virtctl start",
        &out,
        &format!("VM {VM} was scheduled to start"),
    );
    let first = running_vmi(&vmis, None).await;
    // The stand-in for KubeVirt's cirros image boots its own kernel, as grub.cfg names it.
    let (reason, message) = ferrovirt_tests::boot_source(&first);
    assert_eq!(reason, "UserDisk", "BootSource: {message}");
    assert!(
        message.contains("/boot/grub/grub.cfg") && message.contains("cirros-rootfs"),
        "BootSource does not name the image's grub.cfg and root: {message}"
    );
    kubectl_shows_running(ns);
    the_other_commands(ns);

    // virtctl console: the guest's login prompt, a login, a command, Ctrl+].
    let transcript = console(ns, first_console_session).await;
    println!("first console session:\n{}", after_boot(&transcript));
    assert!(transcript.contains("login: "), "{transcript}");

    // virtctl pause vmi / unpause vmi.
    let out = virtctl(ns, &["pause", "vmi", VM]);
    assert_success(
        "virtctl pause",
        &out,
        &format!("VMI {VM} was scheduled to pause"),
    );
    paused_condition(&vmis, true).await;
    vm_printable_status(&vms, "Paused").await;
    let out = virtctl(ns, &["unpause", "vmi", VM]);
    assert_success(
        "virtctl unpause",
        &out,
        &format!("VMI {VM} was scheduled to unpause"),
    );
    paused_condition(&vmis, false).await;
    // The guest runs again: the shell of the first session answers a new console.
    let transcript = console(ns, second_console_session).await;
    println!(
        "console session after unpause:\n{}",
        after_boot(&transcript)
    );

    // virtctl reset: the same VMI, its guest booted again.
    let transcript = console(ns, reset_console_session).await;
    println!(
        "console session across virtctl reset:\n{}",
        after_boot(&transcript)
    );
    let after = running_vmi(&vmis, None).await;
    assert_eq!(
        after.metadata.uid, first.metadata.uid,
        "virtctl reset keeps the VMI"
    );

    // virtctl restart: a new VMI that runs.
    let out = virtctl(ns, &["restart", VM]);
    assert_success(
        "virtctl restart",
        &out,
        &format!("VM {VM} was scheduled to restart"),
    );
    let old_uid = first.metadata.uid.as_deref().expect("a VMI UID");
    let second = running_vmi(&vmis, Some(old_uid)).await;
    assert_ne!(second.metadata.uid.as_deref(), Some(old_uid));
    kubectl_shows_running(ns);

    // virtctl stop: the VMI goes, the VM is Stopped and Halted.
    let out = virtctl(ns, &["stop", VM]);
    assert_success(
        "virtctl stop",
        &out,
        &format!("VM {VM} was scheduled to stop"),
    );
    wait_for(&format!("VMI {VM} to be gone"), START, || async {
        vmis.get_opt(VM).await.ok()?.is_none().then_some(())
    })
    .await;
    vm_printable_status(&vms, "Stopped").await;
    let vm = vms.get(VM).await.expect("the VM");
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Halted"));

    // Started again, stopped at once: `--force --grace-period 0`.
    let out = virtctl(ns, &["start", VM]);
    assert_success(
        "virtctl start",
        &out,
        &format!("VM {VM} was scheduled to start"),
    );
    running_vmi(&vmis, second.metadata.uid.as_deref()).await;
    let out = virtctl(ns, &["stop", VM, "--force", "--grace-period", "0"]);
    assert_success(
        "virtctl stop --force --grace-period 0",
        &out,
        &format!("VM {VM} was scheduled to stop"),
    );
    wait_for(&format!("VMI {VM} to be gone"), START, || async {
        vmis.get_opt(VM).await.ok()?.is_none().then_some(())
    })
    .await;
    vm_printable_status(&vms, "Stopped").await;
}

/// Writes a certificate Secret's `tls.crt`, `tls.key` and `ca.crt` into `dir`.
async fn write_secret(client: &kube::Client, name: &str, dir: &std::path::Path) {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "kubevirt");
    let secret = secrets
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("Secret kubevirt/{name} (made by virt-operator): {e}"));
    let data = secret.data.unwrap_or_default();
    std::fs::create_dir_all(dir).expect("a directory for the certificates");
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        let value = data
            .get(key)
            .unwrap_or_else(|| panic!("Secret kubevirt/{name} has no {key}"));
        std::fs::write(dir.join(key), &value.0).expect("writing a certificate file");
    }
}

/// curl to a virt-handler's subresource server as `virt-handler.kubevirt.svc`, optionally
/// with a client certificate; returns curl's exit code and what it printed.
fn curl_handler(ip: &str, ca: &std::path::Path, client: Option<&std::path::Path>) -> (i32, String) {
    let mut command = std::process::Command::new("curl");
    command.args(["-s", "--max-time", "10", "-X", "PUT", "-w", " %{http_code}"]);
    command.arg("--cacert").arg(ca.join("ca.crt"));
    if let Some(dir) = client {
        command.arg("--cert").arg(dir.join("tls.crt"));
        command.arg("--key").arg(dir.join("tls.key"));
    }
    command.args([
        "--resolve",
        &format!("virt-handler.kubevirt.svc:8186:{ip}"),
        "https://virt-handler.kubevirt.svc:8186/v1/vmis/no-such-vmi/pause",
    ]);
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("running curl (Debian package curl): {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The installed virt-handler answers virt-api's client certificate (a VMI it does not run:
/// 404) and refuses a client without one, and one with the handlers' own certificate (same
/// CA, another name), at the TLS handshake.
#[tokio::test]
async fn virt_handler_answers_only_virt_apis_certificate() {
    let client = client().await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "kubevirt");
    let handlers = pods
        .list(&kube::api::ListParams::default().labels("kubevirt.io=virt-handler"))
        .await
        .expect("listing virt-handler Pods");
    let ip = handlers
        .items
        .iter()
        .find_map(|p| p.status.as_ref()?.pod_ip.clone())
        .expect("a virt-handler Pod with an IP");
    let dir = std::env::temp_dir().join(format!("ferrovirt-handler-tls-{}", std::process::id()));
    let (api_certs, handler_certs) = (dir.join("virt-api"), dir.join("virt-handler"));
    write_secret(&client, "kubevirt-virt-handler-certs", &api_certs).await;
    write_secret(
        &client,
        "kubevirt-virt-handler-server-certs",
        &handler_certs,
    )
    .await;

    let with_api_cert = curl_handler(&ip, &api_certs, Some(&api_certs));
    let without_cert = curl_handler(&ip, &api_certs, None);
    let with_handler_cert = curl_handler(&ip, &api_certs, Some(&handler_certs));
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(
        with_api_cert,
        (
            0,
            "no launcher for VMI no-such-vmi on this node 404".to_string()
        ),
        "with virt-api's certificate: expected the handler's 404"
    );
    for (who, (code, out)) in [
        ("without a client certificate", without_cert),
        ("with the handlers' own certificate", with_handler_cert),
    ] {
        assert_ne!(code, 0, "{who}: expected the handshake to fail, got {out}");
        assert!(
            out.ends_with(" 000"),
            "{who}: no HTTP answer expected, got {out}"
        );
    }
}
