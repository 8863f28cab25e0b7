//! Where the shared test data lives.

use std::path::PathBuf;

/// `shared/` beside the repository (CI lays a copy there), or `$FERROVIRT_SHARED`.
pub fn shared_dir() -> PathBuf {
    let dir = std::env::var_os("FERROVIRT_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    assert!(
        dir.join("fixtures").is_dir(),
        "missing test data: {} has no fixtures/ (shared/ must sit beside the repository, \
         or FERROVIRT_SHARED must name it)",
        dir.display()
    );
    dir
}

#[allow(dead_code)] // each test binary uses its own part of this module
pub fn swagger() -> serde_json::Value {
    let path = shared_dir().join("fixtures/kubevirt-openapi/swagger.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("swagger.json is JSON")
}
