//! The CustomResourceDefinitions of the kubevirt.io kinds, and of the kinds of KubeVirt's sibling
//! groups that Ferrovirt serves without implementing them ([`crate::siblings`]).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{
    KubeVirt, VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration,
    VirtualMachineInstanceReplicaSet,
};

/// Every CRD Ferrovirt installs, in a stable order: the kinds it implements, then the
/// [siblings](crate::siblings).
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        KubeVirt::crd(),
        VirtualMachine::crd(),
        VirtualMachineInstance::crd(),
        VirtualMachineInstanceMigration::crd(),
        VirtualMachineInstanceReplicaSet::crd(),
        crate::pool::crd(),
        <crate::MigrationPolicy as CustomResourceExt>::crd(),
    ];
    crds.extend(crate::instancetype::crds());
    crds.extend(crate::snapshot::crds());
    crds.push(crate::clone::crd());
    crds.extend(crate::siblings::crds());
    crds
}

/// The CRDs as one multi-document YAML stream.
pub fn to_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}
