//! Chaos on the two-node local cluster, as KubeVirt's chaos lanes do it: twenty VMs run while
//! VMs start, stop, migrate and are created, and virt-controller, virt-handler, virt-api, one
//! virt-launcher, kube-apiserver and etcd are each killed with SIGKILL, as a crash kills them.
//! They come back as they would in a user's cluster: the kubelet restarts a component's
//! container, the VM controller replaces the VMI whose launcher died, and `cluster.sh up` starts
//! the control-plane daemon that is not running, as a node's supervisor would.
//!
//! Afterwards every VM is in the state its spec asks for, no VM was lost, no launcher Pod or
//! process is left without its VMI, and every guest that was to keep running shows the same boot
//! on its console: the token it keeps in RAM, with a larger count and uptime (`counter`).
//! The test prints a table: each fault, what was asked around it, what happened, and what was
//! checked after it.
//!
//! It holds the cluster lock alone: it takes the API server away from every other test.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use api::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use api::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use ferrovirt_tests::cluster_lock::{kubevirt_spec, set_kubevirt_spec};
use ferrovirt_tests::counter::{self, console_counts, Count};
use ferrovirt_tests::faults::{
    all_restart_counts, component_pids, kill_component, kill_daemon, launcher_uids, restart_counts,
    restarted_since, wait_restarted,
};
use ferrovirt_tests::{
    client, kill_launcher, kubectl, launcher_pids, migration_of, migration_phase as phase,
    patch_kubevirt_cr, sigkill, tiny_vm, two_schedulable_nodes, virtctl, wait_for, ClusterLock,
    TestNamespace,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

/// How many VMs run through all the faults.
const FLEET: usize = 20;

fn fleet_name(i: usize) -> String {
    format!("chaos-{i:02}")
}

/// The VMs the faults act on, beside the fleet.
const STOPPED_FIRST: &str = "chaos-00"; // stopped under the controller's death, started under etcd's
const MIGRATED_FIRST: &str = "chaos-01"; // migrated while its source node's handler dies
const STOPPED: &str = "chaos-02"; // stopped while virt-api is dead
const CRASHED: &str = "chaos-03"; // its launcher is killed
const MIGRATED_SECOND: &str = "chaos-04"; // migrated while the API server dies
const LATE: &str = "chaos-late"; // created Halted, started under the controller's death
const NEW: &str = "chaos-new"; // created while virt-api (and its webhooks) is dead

/// One line of the chaos table.
struct Row {
    fault: &'static str,
    around: String,
    happened: String,
    checked: String,
}

/// A guest as seen on its console.
#[derive(Clone, Debug)]
struct Guest {
    uid: String,
    node: String,
    count: Count,
}

/// Runs `virtctl ARGS` until it succeeds; returns how many attempts failed, and the first
/// failure's message.
async fn virtctl_until_it_works(ns: &str, args: &[&str]) -> (usize, Option<String>) {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut failed = 0;
    let mut first = None;
    loop {
        let out = virtctl(ns, args);
        if out.code == Some(0) {
            return (failed, first);
        }
        failed += 1;
        first.get_or_insert_with(|| out.stderr.trim().to_string());
        assert!(
            Instant::now() < deadline,
            "virtctl {args:?} never succeeded: {out:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn run_ok(ns: &str, args: &[&str]) {
    let out = virtctl(ns, args);
    assert_eq!(out.code, Some(0), "virtctl {args:?}: {out:?}");
}

/// Reads the console of each running VMI in `names` at once; each guest's latest count.
async fn observe(vmis: &Api<VirtualMachineInstance>, names: &[String]) -> BTreeMap<String, Guest> {
    let mut readers = tokio::task::JoinSet::new();
    for name in names {
        let vmi = vmis
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("VMI {name}: {e}"));
        let status = vmi.status.clone().unwrap_or_default();
        assert_eq!(
            status.phase,
            Some(VmiPhase::Running),
            "VMI {name}: {status:?}"
        );
        let node = status.node_name.expect("nodeName of a running VMI");
        let uid = vmi.uid().expect("uid");
        let name = name.clone();
        readers.spawn(async move {
            let seen = console_counts(&node, &uid, 1, Duration::from_secs(300)).await;
            let count = seen.last().cloned().expect("a count");
            (name, Guest { uid, node, count })
        });
    }
    let mut guests = BTreeMap::new();
    while let Some(read) = readers.join_next().await {
        let (name, guest) = read.expect("a console reader");
        guests.insert(name, guest);
    }
    guests
}

/// Waits until every VMI in `names` is Running.
async fn wait_all_running(vmis: &Api<VirtualMachineInstance>, names: &[String], timeout: Duration) {
    wait_for(
        &format!("{} VMIs Running", names.len()),
        timeout,
        || async {
            let list = vmis.list(&ListParams::default()).await.ok()?;
            let running: BTreeSet<String> = list
                .items
                .iter()
                .filter(|v| v.status.as_ref().and_then(|s| s.phase) == Some(VmiPhase::Running))
                .map(|v| v.name_any())
                .collect();
            names.iter().all(|n| running.contains(n)).then_some(())
        },
    )
    .await;
}

/// Waits until VMI `name` is gone.
async fn wait_gone(vmis: &Api<VirtualMachineInstance>, name: &str) {
    wait_for(
        &format!("VMI {name} gone"),
        Duration::from_secs(180),
        || async { vmis.get_opt(name).await.ok()?.is_none().then_some(()) },
    )
    .await;
}

/// Waits until migration `name` has ended and says how.
async fn migration_end(migrations: &Api<VirtualMachineInstanceMigration>, name: &str) -> String {
    let ended = wait_for(
        &format!("migration {name} to end"),
        Duration::from_secs(300),
        || async {
            let m = migrations.get(name).await.ok()?;
            phase(&m).filter(|p| p.is_final()).map(|p| (p, m))
        },
    )
    .await;
    match ended.0 {
        MigrationPhase::Succeeded => "Succeeded".into(),
        _ => {
            let conditions = ended.1.status.map(|s| s.conditions).unwrap_or_default();
            let why = conditions
                .iter()
                .filter_map(|c| c.message.clone())
                .collect::<Vec<_>>()
                .join("; ");
            format!("Failed ({why})")
        }
    }
}

/// Waits until VMI `name` runs, with no migration under way, and checks that its console counts
/// on in the boot `before` counted in. Returns the guest as seen now.
async fn still_counting(vmis: &Api<VirtualMachineInstance>, name: &str, before: &Guest) -> Guest {
    let vmi = wait_for(
        &format!("VMI {name} Running with no migration under way"),
        Duration::from_secs(180),
        || async {
            let vmi = vmis.get(name).await.ok()?;
            let status = vmi.status.as_ref()?;
            let settled = status
                .migration_state
                .as_ref()
                .is_none_or(|m| m.completed == Some(true) || m.failed == Some(true));
            (status.phase == Some(VmiPhase::Running) && settled).then_some(vmi)
        },
    )
    .await;
    let uid = vmi.uid().expect("uid");
    assert_eq!(
        uid, before.uid,
        "VMI {name} was replaced: the guest restarted"
    );
    let node = vmi.status.and_then(|s| s.node_name).expect("nodeName");
    let seen = console_counts(&node, &uid, 1, Duration::from_secs(120)).await;
    let count = seen.last().cloned().expect("a count");
    assert!(
        count.continues(&before.count),
        "the guest of {name} restarted: {count:?} on {node} after {:?} on {}",
        before.count,
        before.node
    );
    Guest { uid, node, count }
}

/// The table's words for a guest seen in the same boot as before.
fn same_boot(name: &str, was: &Guest, is: &Guest) -> String {
    format!(
        "{name} Running on {}, same boot (count {} then {})",
        is.node, was.count.n, is.count.n
    )
}

/// The VMs' names, each with the run strategy its spec asks for now.
async fn strategies(vms: &Api<VirtualMachine>) -> BTreeMap<String, String> {
    vms.list(&ListParams::default())
        .await
        .expect("VMs listed")
        .items
        .into_iter()
        .map(|vm| {
            let strategy = vm.spec.run_strategy.clone().unwrap_or_default();
            (vm.name_any(), strategy)
        })
        .collect()
}

/// Whether every VM is in the state its spec asks for: `Always` with its VMI Running and the VM
/// Ready, `Halted` with no VMI and the VM Stopped. The error lists the VMs that are not.
async fn settled(
    vms: &Api<VirtualMachine>,
    vmis: &Api<VirtualMachineInstance>,
) -> Result<(), String> {
    let vm_list = vms
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let vmi_list = vmis
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let phases: BTreeMap<String, Option<VmiPhase>> = vmi_list
        .items
        .iter()
        .map(|v| (v.name_any(), v.status.as_ref().and_then(|s| s.phase)))
        .collect();
    let mut wrong = Vec::new();
    for vm in &vm_list.items {
        let name = vm.name_any();
        let status = vm.status.clone().unwrap_or_default();
        let printable = status.printable_status.clone().unwrap_or_default();
        let ok = match vm.spec.run_strategy.as_deref() {
            Some("Always") => {
                phases.get(&name) == Some(&Some(VmiPhase::Running))
                    && status.ready == Some(true)
                    && printable == "Running"
            }
            Some("Halted") => !phases.contains_key(&name) && printable == "Stopped",
            other => return Err(format!("VM {name} has run strategy {other:?}")),
        };
        if !ok {
            wrong.push(format!(
                "{name}: spec {:?}, VMI {:?}, status {printable:?} ready {:?}",
                vm.spec.run_strategy,
                phases.get(&name),
                status.ready
            ));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("\n"))
    }
}

/// Polls `check` until it finds nothing wrong, or panics after 5 minutes with what it found last.
async fn until_empty<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let wrong = check().await;
        if wrong.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{}",
            wrong.join("\n")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Orphans: launcher Pods of the namespace whose VMI is gone (or replaced), and launcher
/// processes on the host whose VMI is gone from the whole cluster.
async fn orphans(client: &Client, ns: &str) -> Vec<String> {
    let vmis: Api<VirtualMachineInstance> = Api::all(client.clone());
    let live: BTreeSet<String> = vmis
        .list(&ListParams::default())
        .await
        .expect("VMIs listed")
        .items
        .iter()
        .filter_map(|v| v.uid())
        .collect();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let launchers = pods
        .list(&ListParams::default().labels(&format!(
            "{}={}",
            contract::labels::APP,
            contract::labels::LAUNCHER_APP
        )))
        .await
        .expect("launcher Pods listed");
    let mut found = Vec::new();
    for pod in &launchers.items {
        let owner = pod.labels().get(contract::labels::CREATED_BY).cloned();
        if !owner.as_ref().is_some_and(|uid| live.contains(uid)) {
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            found.push(format!("Pod {} (VMI {owner:?}, {phase:?})", pod.name_any()));
        }
    }
    for uid in launcher_uids() {
        if !live.contains(&uid) {
            found.push(format!("virt-launcher process of VMI {uid}"));
        }
    }
    found
}

/// virt-operator came through the API server's and etcd's deaths: a change to the KubeVirt
/// CR's spec is observed (`status.observedGeneration` reaches the new generation), then the spec
/// is put back as it was.
async fn operator_still_reconciles() -> Row {
    let generations = || {
        let out = kubectl(
            "kubevirt",
            &[
                "get",
                "kv",
                "kubevirt",
                "-o",
                "jsonpath={.metadata.generation} {.status.observedGeneration}",
            ],
        );
        let mut numbers = out.stdout.split_whitespace().map(|n| n.parse::<i64>().ok());
        (numbers.next().flatten(), numbers.next().flatten())
    };
    let saved = kubevirt_spec().expect("the KubeVirt CR kubevirt/kubevirt");
    let change = serde_json::json!({"spec": {"configuration": {"migrations": {
        "bandwidthPerMigration": "65Mi"}}}});
    let out = patch_kubevirt_cr(&change);
    assert_eq!(out.code, Some(0), "changing the KubeVirt CR: {out:?}");
    let (generation, _) = generations();
    let generation = generation.expect("the KubeVirt CR's generation");
    let changed = Instant::now();
    let observed = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if generations().1.is_some_and(|o| o >= generation) {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
    let out = set_kubevirt_spec(&saved);
    assert_eq!(
        out.code,
        Some(0),
        "putting the KubeVirt CR's spec back: {out:?}"
    );
    assert!(
        observed.is_ok(),
        "virt-operator did not observe generation {generation} of the KubeVirt CR within 120 s \
         after the faults (observedGeneration {:?})",
        generations().1
    );
    Row {
        fault: "(virt-operator)",
        around: "a change to the KubeVirt CR's spec after the faults".into(),
        happened: format!("observed {:.1?} after the change", changed.elapsed()),
        checked: "status.observedGeneration reached the new generation; the spec put back".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_vms_live_through_their_components_and_the_control_plane_dying() {
    let _alone = ClusterLock::exclusive().await;
    let client = client().await;
    two_schedulable_nodes(&client).await;
    let namespace = TestNamespace::create(&client, "chaos").await;
    let ns = namespace.name.as_str();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), ns);
    let user_data = counter::user_data("");
    let mut table: Vec<Row> = Vec::new();

    // The fleet, and one VM to start later.
    let fleet: Vec<String> = (0..FLEET).map(fleet_name).collect();
    let started = Instant::now();
    for name in &fleet {
        vms.create(&PostParams::default(), &tiny_vm(name, "Always", &user_data))
            .await
            .unwrap_or_else(|e| panic!("VM {name} created: {e}"));
    }
    vms.create(&PostParams::default(), &tiny_vm(LATE, "Halted", &user_data))
        .await
        .expect("the halted VM created");
    wait_all_running(&vmis, &fleet, Duration::from_secs(900)).await;
    let mut guests = observe(&vmis, &fleet).await;
    let per_node = guests
        .values()
        .fold(BTreeMap::<&str, usize>::new(), |mut m, g| {
            *m.entry(g.node.as_str()).or_default() += 1;
            m
        });
    println!(
        "{FLEET} VMs running and counting in {:.0?}: {per_node:?}",
        started.elapsed()
    );

    // 1. virt-controller, with a stop and a start just asked for.
    run_ok(ns, &["stop", STOPPED_FIRST]);
    run_ok(ns, &["start", LATE]);
    let (killed, back) = kill_component(&client, "virt-controller", None).await;
    wait_gone(&vmis, STOPPED_FIRST).await;
    wait_all_running(&vmis, &[LATE.to_string()], Duration::from_secs(300)).await;
    table.push(Row {
        fault: "virt-controller",
        around: format!("`virtctl stop {STOPPED_FIRST}`, `virtctl start {LATE}` just before"),
        happened: format!("{killed} process killed; its container Ready again after {back:.1?}"),
        checked: format!("{STOPPED_FIRST} stopped (no VMI), {LATE} Running"),
    });

    // 2. virt-handler on the source node of a migration.
    run_ok(ns, &["migrate", MIGRATED_FIRST]);
    let migration = migration_of(&client, ns, MIGRATED_FIRST).await.name_any();
    let source = guests[MIGRATED_FIRST].node.clone();
    let at = wait_for(
        "the migration past Pending",
        Duration::from_secs(120),
        || async {
            let m = migrations.get(&migration).await.ok()?;
            phase(&m).filter(|p| *p != MigrationPhase::Pending)
        },
    )
    .await;
    let (killed, back) = kill_component(&client, "virt-handler", Some(&source)).await;
    let end = migration_end(&migrations, &migration).await;
    let seen = still_counting(&vmis, MIGRATED_FIRST, &guests[MIGRATED_FIRST]).await;
    table.push(Row {
        fault: "virt-handler",
        around: format!("`virtctl migrate {MIGRATED_FIRST}`, killed on its source node {source} in phase {at:?}"),
        happened: format!(
            "{killed} process killed; Ready again after {back:.1?}; the migration {end}"
        ),
        checked: same_boot(MIGRATED_FIRST, &guests[MIGRATED_FIRST], &seen),
    });
    guests.insert(MIGRATED_FIRST.into(), seen);

    // 3. virt-api: its subresources and webhooks are gone until it is back.
    let pids = component_pids("virt-api", None);
    let before = restart_counts(&client, "virt-api", None).await;
    assert!(!pids.is_empty(), "no virt-api process");
    let killed_at = Instant::now();
    sigkill(&pids);
    // The create first: it reaches the API server within milliseconds, while virt-api's
    // validating webhook is dead, and must be refused, not let through unchecked.
    let mut rejected = 0;
    let created = loop {
        let vm = tiny_vm(NEW, "Always", &user_data);
        match vms.create(&PostParams::default(), &vm).await {
            Ok(_) => break killed_at.elapsed(),
            Err(e) => {
                if rejected == 0 {
                    println!("creating {NEW} while virt-api is down: {e}");
                }
                rejected += 1;
                assert!(
                    killed_at.elapsed() < Duration::from_secs(180),
                    "VM {NEW} never accepted: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let (failed, first_error) = virtctl_until_it_works(ns, &["stop", STOPPED]).await;
    wait_restarted(&client, &before).await;
    wait_gone(&vmis, STOPPED).await;
    wait_all_running(&vmis, &[NEW.to_string()], Duration::from_secs(300)).await;
    table.push(Row {
        fault: "virt-api",
        around: format!("creating VM {NEW}, then `virtctl stop {STOPPED}`, each retried until it works"),
        happened: format!(
            "{} process(es) killed; the create was refused {rejected} time(s) and accepted {created:.1?} after the kill; virtctl failed {failed} time(s) (first: {})",
            pids.len(),
            first_error.unwrap_or_else(|| "never".into())
        ),
        checked: format!("{STOPPED} stopped (no VMI), {NEW} Running"),
    });

    // 4. One launcher: the VM controller replaces its VMI, as runStrategy Always asks.
    let crashed = guests[CRASHED].clone();
    let killed_at = Instant::now();
    kill_launcher(&crashed.uid);
    let replaced = wait_for(
        "the crashed VM's new VMI Running",
        Duration::from_secs(300),
        || async {
            let vmi = vmis.get(CRASHED).await.ok()?;
            let running = vmi.status.as_ref()?.phase == Some(VmiPhase::Running);
            (running && vmi.uid()? != crashed.uid).then_some(vmi)
        },
    )
    .await;
    let back = killed_at.elapsed();
    let new_uid = replaced.uid().expect("uid");
    wait_for(
        "the dead launcher's process gone",
        Duration::from_secs(60),
        || async { launcher_pids(&crashed.uid).is_empty().then_some(()) },
    )
    .await;
    let node = replaced.status.and_then(|s| s.node_name).expect("nodeName");
    let reborn = console_counts(&node, &new_uid, 1, Duration::from_secs(300)).await;
    let reborn = reborn.last().cloned().expect("a count");
    assert_ne!(
        reborn.token, crashed.count.token,
        "a new VMI, yet the same boot"
    );
    table.push(Row {
        fault: "one virt-launcher",
        around: format!("{CRASHED}'s launcher, SIGKILL"),
        happened: format!("a new VMI Running {back:.1?} after the kill"),
        checked: format!("{CRASHED} runs a new boot (new token), its old launcher is gone"),
    });
    guests.insert(
        CRASHED.into(),
        Guest {
            uid: new_uid,
            node,
            count: reborn,
        },
    );

    // 5. kube-apiserver, with a migration under way.
    run_ok(ns, &["migrate", MIGRATED_SECOND]);
    let migration = migration_of(&client, ns, MIGRATED_SECOND).await.name_any();
    let restarts = all_restart_counts(&client).await;
    let up = tokio::task::spawn_blocking(|| kill_daemon("kube-apiserver", Duration::from_secs(15)))
        .await
        .expect("the API server's restart");
    let end = migration_end(&migrations, &migration).await;
    let seen = still_counting(&vmis, MIGRATED_SECOND, &guests[MIGRATED_SECOND]).await;
    let components = restarted_since(&client, &restarts).await;
    table.push(Row {
        fault: "kube-apiserver",
        around: format!("`virtctl migrate {MIGRATED_SECOND}` just before; dead for 15 s"),
        happened: format!(
            "`cluster.sh up` brought it back in {up:.1?}; the migration {end}; {components}"
        ),
        checked: same_boot(MIGRATED_SECOND, &guests[MIGRATED_SECOND], &seen),
    });
    guests.insert(MIGRATED_SECOND.into(), seen);

    // 6. etcd, with a start just asked for.
    run_ok(ns, &["start", STOPPED_FIRST]);
    let restarts = all_restart_counts(&client).await;
    let up = tokio::task::spawn_blocking(|| kill_daemon("etcd", Duration::from_secs(15)))
        .await
        .expect("etcd's restart");
    wait_all_running(
        &vmis,
        &[STOPPED_FIRST.to_string()],
        Duration::from_secs(300),
    )
    .await;
    let components = restarted_since(&client, &restarts).await;
    table.push(Row {
        fault: "etcd",
        around: format!("`virtctl start {STOPPED_FIRST}` just before; dead for 15 s"),
        happened: format!("`cluster.sh up` brought it back in {up:.1?}; {components}"),
        checked: format!("{STOPPED_FIRST} Running again"),
    });

    // After all of it: every VM as its spec asks, none lost, no orphan, no guest restarted.
    let mut expected: BTreeMap<String, String> = fleet
        .iter()
        .chain([LATE.to_string(), NEW.to_string()].iter())
        .map(|n| (n.clone(), "Always".to_string()))
        .collect();
    expected.insert(STOPPED.into(), "Halted".into());
    assert_eq!(
        strategies(&vms).await,
        expected,
        "VMs lost, or their specs changed"
    );
    until_empty("every VM in the state its spec asks for", || async {
        settled(&vms, &vmis).await.err().into_iter().collect()
    })
    .await;
    until_empty("no launcher Pod or process without its VMI", || async {
        orphans(&client, ns).await
    })
    .await;
    let kept: Vec<String> = fleet
        .iter()
        .filter(|n| ![STOPPED_FIRST, STOPPED, CRASHED].contains(&n.as_str()))
        .cloned()
        .collect();
    let now = observe(&vmis, &kept).await;
    let mut restarted = Vec::new();
    for name in &kept {
        let (was, is) = (&guests[name], &now[name]);
        if was.uid != is.uid || !is.count.continues(&was.count) {
            restarted.push(format!("{name}: {was:?} then {is:?}"));
        }
    }
    assert!(
        restarted.is_empty(),
        "guests restarted:\n{}",
        restarted.join("\n")
    );
    table.push(Row {
        fault: "(after all six)",
        around: format!("{} VMs", expected.len()),
        happened: format!("settled {:.0?} after the first VM was created", started.elapsed()),
        checked: format!(
            "each VM as its spec asks (1 Halted, {} Running); no VM lost; no launcher Pod or process without its VMI; {} guests kept their boot",
            expected.len() - 1,
            kept.len()
        ),
    });

    table.push(operator_still_reconciles().await);

    let mut out = String::from(
        "\n| fault | around it | what happened | checked after |\n|---|---|---|---|\n",
    );
    for row in &table {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            row.fault, row.around, row.happened, row.checked
        );
    }
    println!("{out}");
}
