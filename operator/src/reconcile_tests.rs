use super::*;
use crate::manifests::InstallConfig;

#[test]
fn every_kind_of_the_install_has_an_api_resource() {
    let plan = certs::plan(
        "kubevirt",
        &BTreeMap::new(),
        None,
        1_800_000_000,
        Lifetimes::default(),
    )
    .unwrap();
    for object in install::desired(&InstallConfig::default(), &plan, "t").unwrap() {
        let kind = object["kind"].as_str().unwrap();
        let (resource, _) = api_resource(kind).unwrap_or_else(|| panic!("{kind}"));
        assert_eq!(resource.api_version, object["apiVersion"], "{kind}");
    }
}
