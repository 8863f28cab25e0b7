//! KubeVirt's other API groups on the local cluster (exports, backups,
//! plugins, ...): every kind is served at each of KubeVirt's versions (listing and
//! deleting them never gives a 404, as KubeVirt's functional tests need after each spec), and
//! virt-controller marks each object with the kind's NotSupported condition once, with one
//! Warning event, and writes nothing more.

use std::time::Duration;

use api::siblings::{Scope, Sibling, NOT_SUPPORTED_REASON};
use ferrovirt_tests::{client, wait_for, TestNamespace};
use k8s_openapi::api::core::v1::Event;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};

const MARKED: Duration = Duration::from_secs(60);

fn resource(sibling: &Sibling, version: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk(sibling.group, version, sibling.kind);
    ApiResource::from_gvk_with_plural(&gvk, sibling.plural)
}

fn api_for(
    client: &Client,
    sibling: &Sibling,
    version: &str,
    namespace: &str,
) -> Api<DynamicObject> {
    let ar = resource(sibling, version);
    match sibling.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &ar),
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    }
}

/// The kind's NotSupported condition, when the object has it.
fn not_supported(sibling: &Sibling, object: &DynamicObject) -> Option<Value> {
    let conditions = object.data.get("status")?.get("conditions")?.as_array()?;
    conditions
        .iter()
        .find(|c| {
            c["type"] == sibling.condition.type_
                && c["status"] == sibling.condition.status
                && c["reason"] == NOT_SUPPORTED_REASON
        })
        .cloned()
}

/// Cluster-scoped objects are not in the test namespace: deleted when dropped.
struct ClusterObjects {
    client: Client,
    objects: Vec<(&'static Sibling, String)>,
}

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        let objects = std::mem::take(&mut self.objects);
        let client = self.client.clone();
        // As TestNamespace: the test's runtime is blocked here, delete from a thread of its own.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                for (sibling, name) in objects {
                    let api = api_for(&client, sibling, sibling.storage_version(), "");
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                }
            });
        })
        .join();
    }
}

#[tokio::test]
async fn every_kubevirt_kind_is_served_and_unsupported_ones_say_so() {
    let client = client().await;
    let namespace = TestNamespace::create(&client, "e2e-unsupported").await;
    let ns = namespace.name.clone();
    let mut cluster = ClusterObjects {
        client: client.clone(),
        objects: Vec::new(),
    };

    // Served at every version KubeVirt serves: listing is not a 404.
    for sibling in api::siblings::ALL {
        for version in sibling.versions {
            api_for(&client, sibling, version.name, &ns)
                .list(&ListParams::default())
                .await
                .unwrap_or_else(|e| {
                    panic!("listing {} at {}: {e}", sibling.crd_name(), version.name)
                });
        }
    }

    // One object of each kind, at its stored version.
    let mut created = Vec::new();
    for sibling in api::siblings::ALL {
        let name = match sibling.scope {
            Scope::Namespaced => "unsupported".to_string(),
            Scope::Cluster => format!("e2e-unsupported-{}", std::process::id() % 100_000),
        };
        let api = api_for(&client, sibling, sibling.storage_version(), &ns);
        let object = DynamicObject::new(&name, &resource(sibling, sibling.storage_version()))
            .data(json!({"spec": {}}));
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating {} {name}: {e}", sibling.kind));
        if sibling.scope == Scope::Cluster {
            cluster.objects.push((sibling, name.clone()));
        }
        created.push((sibling, name));
    }

    for (sibling, name) in &created {
        let api = api_for(&client, sibling, sibling.storage_version(), &ns);
        let condition = wait_for(
            &format!("{} {name} to be marked NotSupported", sibling.kind),
            MARKED,
            || async { not_supported(sibling, &api.get(name).await.ok()?) },
        )
        .await;
        assert_eq!(
            condition["message"],
            format!(
                "{} ({}) is not supported by Ferrovirt",
                sibling.kind,
                sibling.api_version()
            )
        );
        assert!(condition["lastTransitionTime"].is_string(), "{condition}");

        // The event: in the object's namespace, or `default` for a cluster-scoped object.
        let event_namespace = match sibling.scope {
            Scope::Namespaced => ns.as_str(),
            Scope::Cluster => "default",
        };
        let events: Api<Event> = Api::namespaced(client.clone(), event_namespace);
        let selector = format!("involvedObject.name={name},reason={NOT_SUPPORTED_REASON}");
        wait_for(
            &format!("the NotSupported event of {} {name}", sibling.kind),
            MARKED,
            || async {
                let list = events
                    .list(&ListParams::default().fields(&selector))
                    .await
                    .ok()?;
                list.items
                    .into_iter()
                    .find(|e| {
                        e.involved_object.kind.as_deref() == Some(sibling.kind)
                            && e.type_.as_deref() == Some("Warning")
                    })
                    .map(|_| ())
            },
        )
        .await;
    }

    // Nothing is written again once the condition is there.
    let mut versions = Vec::new();
    for (sibling, name) in &created {
        let api = api_for(&client, sibling, sibling.storage_version(), &ns);
        let object = api.get(name).await.expect("object");
        versions.push(object.resource_version());
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    for ((sibling, name), version) in created.iter().zip(versions) {
        let api = api_for(&client, sibling, sibling.storage_version(), &ns);
        let object = api.get(name).await.expect("object");
        assert_eq!(
            object.resource_version(),
            version,
            "{} {name} was written again",
            sibling.kind
        );
    }

    // Every version reads the same object, condition included.
    for (sibling, name) in &created {
        for version in sibling.versions {
            let object = api_for(&client, sibling, version.name, &ns)
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("{} {name} at {}: {e}", sibling.kind, version.name));
            assert!(not_supported(sibling, &object).is_some());
        }
    }

    // KubeVirt's test cleanup: delete the namespaced kinds by collection.
    for sibling in api::siblings::ALL
        .iter()
        .filter(|s| s.scope == Scope::Namespaced)
    {
        let api = api_for(&client, sibling, sibling.storage_version(), &ns);
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting every {}: {e}", sibling.kind));
        wait_for(
            &format!("every {} to be gone", sibling.kind),
            MARKED,
            || async {
                api.list(&ListParams::default())
                    .await
                    .ok()
                    .filter(|l| l.items.is_empty())
                    .map(|_| ())
            },
        )
        .await;
    }
    for (sibling, name) in std::mem::take(&mut cluster.objects) {
        let api = api_for(&client, sibling, sibling.storage_version(), &ns);
        api.delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {} {name}: {e}", sibling.kind));
    }
    drop(namespace);
}
