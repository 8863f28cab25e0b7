//! The discovery documents of `subresources.kubevirt.io/v1`.
//!
//! kube-apiserver's aggregator reads `/apis/subresources.kubevirt.io/v1` to decide that the
//! APIService is available, and clients (kubectl, client-go's discovery) read all three to
//! learn which subresources exist and with which verbs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery,
};

use crate::routes::{Subresource, EXPAND_VM_SPEC, GROUP, VERSION};

fn group_version() -> String {
    format!("{GROUP}/{VERSION}")
}

/// `GET /apis/subresources.kubevirt.io`.
pub fn api_group() -> APIGroup {
    let version = GroupVersionForDiscovery {
        group_version: group_version(),
        version: VERSION.to_string(),
    };
    APIGroup {
        name: GROUP.to_string(),
        preferred_version: Some(version.clone()),
        versions: vec![version],
        server_address_by_client_cidrs: None,
    }
}

/// `GET /apis`: only the group this server serves.
pub fn api_group_list() -> APIGroupList {
    APIGroupList {
        groups: vec![api_group()],
    }
}

/// `GET /apis/subresources.kubevirt.io/v1`: `expand-vm-spec` (first, as KubeVirt lists it),
/// then one entry per subresource (`virtualmachineinstances/console`, ...), each with the verb
/// a SubjectAccessReview checks.
pub fn api_resource_list() -> APIResourceList {
    let expand_vm_spec = APIResource {
        name: EXPAND_VM_SPEC.to_string(),
        namespaced: true,
        kind: "VirtualMachine".to_string(),
        verbs: vec![crate::auth::verb_for(&http::Method::PUT).to_string()],
        singular_name: String::new(),
        group: None,
        version: None,
        categories: None,
        short_names: None,
        storage_version_hash: None,
    };
    let subresources = Subresource::ALL.into_iter().map(|s| APIResource {
        name: format!("{}/{}", s.owner().resource(), s.name()),
        namespaced: true,
        kind: match s.owner() {
            crate::routes::Owner::VirtualMachine => "VirtualMachine",
            crate::routes::Owner::VirtualMachineInstance => "VirtualMachineInstance",
        }
        .to_string(),
        verbs: vec![crate::auth::verb_for(&s.method()).to_string()],
        singular_name: String::new(),
        group: None,
        version: None,
        categories: None,
        short_names: None,
        storage_version_hash: None,
    });
    let resources = std::iter::once(expand_vm_spec)
        .chain(subresources)
        .collect();
    APIResourceList {
        group_version: group_version(),
        resources,
    }
}

/// Serialises a discovery document with its `kind` and `apiVersion` (`v1`, as Kubernetes
/// writes them).
pub fn to_json<T: serde::Serialize>(kind: &str, doc: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(doc)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("kind".into(), kind.into());
        map.insert("apiVersion".into(), "v1".into());
    }
    serde_json::to_vec(&value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_list_names_every_subresource_with_its_verb() {
        let list = api_resource_list();
        assert_eq!(list.group_version, "subresources.kubevirt.io/v1");
        let console = list
            .resources
            .iter()
            .find(|r| r.name == "virtualmachineinstances/console")
            .expect("console listed");
        assert_eq!(console.verbs, vec!["get"]);
        assert!(console.namespaced);
        for vnc in [
            "virtualmachineinstances/vnc",
            "virtualmachineinstances/vnc/screenshot",
        ] {
            let listed = list
                .resources
                .iter()
                .find(|r| r.name == vnc)
                .unwrap_or_else(|| panic!("{vnc} listed"));
            assert_eq!(
                (listed.kind.as_str(), &listed.verbs, listed.namespaced),
                ("VirtualMachineInstance", &vec!["get".to_string()], true),
                "{vnc}"
            );
        }
        let start = list
            .resources
            .iter()
            .find(|r| r.name == "virtualmachines/start")
            .expect("start listed");
        assert_eq!(start.verbs, vec!["update"]);
        let expand_spec = list
            .resources
            .iter()
            .find(|r| r.name == "virtualmachines/expand-spec")
            .expect("expand-spec listed");
        assert_eq!(expand_spec.verbs, vec!["get"]);
        let expand_vm_spec = &list.resources[0];
        assert_eq!(expand_vm_spec.name, "expand-vm-spec");
        assert_eq!(expand_vm_spec.verbs, vec!["update"]);
        assert!(expand_vm_spec.namespaced);
        assert_eq!(list.resources.len(), Subresource::ALL.len() + 1);
    }

    #[test]
    fn documents_carry_kind_and_preferred_version() {
        let json: serde_json::Value =
            serde_json::from_slice(&to_json("APIGroupList", &api_group_list()).unwrap()).unwrap();
        assert_eq!(json["kind"], "APIGroupList");
        assert_eq!(json["groups"][0]["name"], "subresources.kubevirt.io");
        assert_eq!(
            json["groups"][0]["preferredVersion"]["groupVersion"],
            "subresources.kubevirt.io/v1"
        );
    }
}
