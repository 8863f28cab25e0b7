//! The Pod floor of the density test: copies of one of its launcher Pods, with nothing that ties
//! them to a VMI, created as the VMIs were once the VMIs are gone. Their launchers start and
//! wait for a virt-handler that never calls (no VMI owns them), so what they take from creation
//! to a running `compute` container is the kubelet's, containerd's and runc's part of a VMI's
//! start on this machine, with no guest booting beside them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions::is_deleted};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::sync::mpsc;

/// The label on the copies.
pub const LABEL: (&str, &str) = ("bench", "pod-floor");

/// Which containers a copy keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// All of the launcher Pod's: its init container, `compute`, the containerDisks'.
    Whole,
    /// `compute` alone: the smallest Pod a launcher can run in.
    ComputeOnly,
}

/// A copy of launcher Pod `template` named `name`: its spec (its containers as `shape` says)
/// without the node it was bound to (the scheduler places the copy), its metadata only the
/// name and [`LABEL`]: no owner, no `kubevirt.io` label or annotation, so neither
/// virt-controller nor virt-handler takes it up.
pub fn launcher_pod_copy(template: &Pod, name: &str, shape: Shape) -> Pod {
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.node_name = None;
    if shape == Shape::ComputeOnly {
        spec.init_containers = None;
        spec.containers.retain(|c| c.name == "compute");
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some([(LABEL.0.to_string(), LABEL.1.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Seconds from the Pod's creation to its `compute` container's start, from the Pod's own
/// timestamps (one-second resolution).
pub fn compute_started_after(pod: &Pod) -> Option<f64> {
    let created = pod.metadata.creation_timestamp.as_ref()?.0.as_second();
    let started = pod
        .status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .find(|s| s.name == "compute")?
        .state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()?
        .0
        .as_second();
    Some((started - created) as f64)
}

/// What the floor measured.
#[derive(Debug, Default)]
pub struct Floor {
    /// Pod created -> `compute` started, from the Pods' timestamps, seconds.
    pub from_status: Vec<f64>,
    /// Create call sent -> a watch saw `compute` running, seconds.
    pub observed: Vec<f64>,
    /// Copies whose `compute` did not run within the timeout.
    pub missing: usize,
}

/// Creates `count` copies of `template` `interval` apart in `pods`' namespace, waits up to
/// `timeout` for each `compute` container to run, then deletes them and waits until they are
/// gone.
pub async fn measure(
    pods: &Api<Pod>,
    template: &Pod,
    shape: Shape,
    count: usize,
    interval: Duration,
    timeout: Duration,
) -> anyhow::Result<Floor> {
    let selector = format!("{}={}", LABEL.0, LABEL.1);
    // The watch says when it first sees each copy's `compute` running.
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let watch = {
        let config = watcher::Config::default().labels(&selector);
        let stream = watcher::watcher(pods.clone(), config);
        tokio::spawn(async move {
            let mut stream = stream.boxed();
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
                    _ => continue,
                };
                if compute_started_after(&pod).is_some()
                    && started_tx.send((pod.name_any(), Instant::now())).is_err()
                {
                    return;
                }
            }
        })
    };

    let start = Instant::now();
    let mut creates = Vec::new();
    let mut ticker = tokio::time::interval(interval);
    for i in 0..count {
        ticker.tick().await;
        let pod = launcher_pod_copy(template, &format!("floor-{i:03}"), shape);
        let pods = pods.clone();
        creates.push(tokio::spawn(async move {
            let sent = Instant::now();
            (pods.create(&PostParams::default(), &pod).await, sent)
        }));
    }
    let mut sent_at = HashMap::new();
    for create in creates {
        let (result, sent) = create.await?;
        let pod = result.context("creating a copy of a launcher Pod")?;
        sent_at.insert(pod.name_any(), sent);
    }
    let deadline = tokio::time::Instant::from_std(start + timeout);
    let mut seen: HashMap<String, Instant> = HashMap::new();
    while seen.len() < count {
        match tokio::time::timeout_at(deadline, started.recv()).await {
            Ok(Some((name, at))) => {
                seen.entry(name).or_insert(at);
            }
            Ok(None) | Err(_) => break,
        }
    }
    watch.abort();

    let listed = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    let floor = Floor {
        from_status: listed.iter().filter_map(compute_started_after).collect(),
        observed: seen
            .iter()
            .filter_map(|(name, at)| Some(at.duration_since(*sent_at.get(name)?).as_secs_f64()))
            .collect(),
        missing: count - seen.len(),
    };

    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default().labels(&selector),
    )
    .await
    .context("deleting the copies")?;
    wait_gone(
        pods,
        &ListParams::default().labels(&selector),
        Duration::from_secs(300),
    )
    .await
    .context("the copies of the launcher Pod after their deletion")?;
    Ok(floor)
}

/// Waits, by watching each, until the Pods that `list` selects now are deleted; an error after
/// `within`.
pub async fn wait_gone(pods: &Api<Pod>, list: &ListParams, within: Duration) -> anyhow::Result<()> {
    let listed = pods.list(list).await?.items;
    let n = listed.len();
    let waits = listed.into_iter().map(|pod| {
        let (pods, name) = (pods.clone(), pod.name_any());
        let uid = pod.metadata.uid.unwrap_or_default();
        async move { await_condition(pods, &name, is_deleted(&uid)).await }
    });
    match tokio::time::timeout(within, futures::future::try_join_all(waits)).await {
        Ok(result) => result.map(drop).context("watching the Pods' deletion"),
        Err(_) => anyhow::bail!("{n} Pods not all gone after {} s", within.as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ContainerStatus;

    use super::*;

    fn launcher_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "virt-launcher-density-000-abcde",
                "namespace": "bench",
                "uid": "1234",
                "resourceVersion": "99",
                "creationTimestamp": "2026-12-07T10:00:00Z",
                "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "uid-1"},
                "annotations": {"kubevirt.io/domain": "density-000"},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance", "name": "density-000", "uid": "uid-1"}],
            },
            "spec": {
                "nodeName": "ferrovirt-worker",
                "initContainers": [{"name": "init", "image": "registry:5000/virt-launcher"}],
                "containers": [
                    {"name": "compute", "image": "registry:5000/virt-launcher"},
                    {"name": "volumecontainerdisk", "image": "registry:5000/cirros"},
                ],
            },
            "status": {
                "containerStatuses": [{
                    "name": "compute", "image": "x", "imageID": "", "ready": true,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-12-07T10:00:07Z"}},
                }],
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_copy_keeps_the_spec_and_nothing_that_ties_it_to_its_vmi() {
        let template = launcher_pod();
        let copy = launcher_pod_copy(&template, "floor-000", Shape::Whole);
        assert_eq!(copy.metadata.name.as_deref(), Some("floor-000"));
        assert_eq!(
            copy.metadata.labels,
            Some([("bench".to_string(), "pod-floor".to_string())].into())
        );
        assert!(copy.metadata.owner_references.is_none());
        assert!(copy.metadata.annotations.is_none());
        assert!(copy.metadata.uid.is_none() && copy.metadata.resource_version.is_none());
        assert!(copy.status.is_none());
        let spec = copy.spec.unwrap();
        assert_eq!(spec.node_name, None);
        let mut expected = template.spec.clone().unwrap();
        expected.node_name = None;
        assert_eq!(spec, expected);

        let small = launcher_pod_copy(&template, "floor-001", Shape::ComputeOnly);
        let spec = small.spec.unwrap();
        assert_eq!(spec.init_containers, None);
        let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["compute"]);
        assert_eq!(spec.node_name, None);
    }

    #[test]
    fn compute_start_is_read_from_the_pods_timestamps() {
        let pod = launcher_pod();
        assert_eq!(compute_started_after(&pod), Some(7.0));
        fn first_status(pod: &mut Pod) -> &mut ContainerStatus {
            let status = pod.status.as_mut().unwrap();
            &mut status.container_statuses.as_mut().unwrap()[0]
        }
        let mut waiting = pod.clone();
        first_status(&mut waiting).state = Some(Default::default());
        assert_eq!(compute_started_after(&waiting), None);
        let mut other = pod;
        first_status(&mut other).name = "volumecontainerdisk".into();
        assert_eq!(compute_started_after(&other), None);
    }
}
