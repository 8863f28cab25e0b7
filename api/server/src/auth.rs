//! Authentication and authorization as an aggregated API server.
//!
//! kube-apiserver authenticates the user, then proxies the request to virt-api over TLS,
//! presenting its front-proxy client certificate and naming the user in request headers
//! (`X-Remote-User`, `X-Remote-Group`, `X-Remote-Extra-<key>`). virt-api:
//!
//! 1. reads the `extension-apiserver-authentication` ConfigMap in `kube-system` for the
//!    requestheader CA, the allowed client names and the header names ([`RequestHeaderConfig`]);
//! 2. accepts the headers only from a connection whose client certificate chains to that CA
//!    (checked in the TLS handshake, see [`crate::tls`]) and whose common name is allowed;
//! 3. asks kube-apiserver whether that user may use the subresource with a
//!    `SubjectAccessReview` (group `subresources.kubevirt.io`, resource e.g.
//!    `virtualmachineinstances`, subresource `console`, verb `get` for GET and `update` for PUT;
//!    for `expand-vm-spec`, resource `expand-vm-spec` with no subresource and no name);
//!    a denial is a 403.

use std::collections::BTreeMap;

use http::{HeaderMap, Method};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;

use crate::routes::{SubresourceRequest, EXPAND_VM_SPEC, GROUP, VERSION};

/// Name and namespace of the ConfigMap kube-apiserver publishes its requestheader settings in.
pub const AUTH_CONFIGMAP: (&str, &str) = ("kube-system", "extension-apiserver-authentication");

/// How to read the user from a proxied request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHeaderConfig {
    /// PEM of the CA that signs the front proxy's client certificate.
    pub client_ca_pem: String,
    /// Common names the front proxy's certificate may have; empty: any.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefixes: Vec<String>,
}

/// Why the requestheader settings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestHeaderConfigError {
    #[error("the ConfigMap has no requestheader-client-ca-file: the aggregation layer of kube-apiserver is not configured")]
    NoClientCa,
    #[error("{key} is not a JSON list of strings")]
    NotAList {
        key: String,
        #[source]
        source: serde_json::Error,
    },
}

impl RequestHeaderConfig {
    /// Reads the settings from the `extension-apiserver-authentication` ConfigMap.
    pub fn from_configmap(cm: &ConfigMap) -> Result<Self, RequestHeaderConfigError> {
        let data = cm.data.clone().unwrap_or_default();
        let list = |key: &str, default: &[&str]| -> Result<Vec<String>, RequestHeaderConfigError> {
            match data.get(key) {
                None => Ok(default.iter().map(|s| s.to_string()).collect()),
                Some(text) => serde_json::from_str(text).map_err(|source| {
                    RequestHeaderConfigError::NotAList {
                        key: key.to_string(),
                        source,
                    }
                }),
            }
        };
        Ok(RequestHeaderConfig {
            client_ca_pem: data
                .get("requestheader-client-ca-file")
                .cloned()
                .ok_or(RequestHeaderConfigError::NoClientCa)?,
            allowed_names: list("requestheader-allowed-names", &[])?,
            username_headers: list("requestheader-username-headers", &["X-Remote-User"])?,
            group_headers: list("requestheader-group-headers", &["X-Remote-Group"])?,
            extra_headers_prefixes: list(
                "requestheader-extra-headers-prefix",
                &["X-Remote-Extra-"],
            )?,
        })
    }

    /// Whether a verified front-proxy certificate with this common name may assert users.
    pub fn name_allowed(&self, common_name: Option<&str>) -> bool {
        self.allowed_names.is_empty()
            || common_name.is_some_and(|cn| self.allowed_names.iter().any(|n| n == cn))
    }
}

/// The user a proxied request is made for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Reads the user from the front-proxy headers; `None` when no username header is set.
pub fn user_from_headers(config: &RequestHeaderConfig, headers: &HeaderMap) -> Option<User> {
    let name = config
        .username_headers
        .iter()
        .find_map(|h| headers.get(h.as_str()).and_then(|v| v.to_str().ok()))
        .filter(|n| !n.is_empty())?
        .to_string();
    let groups = config
        .group_headers
        .iter()
        .flat_map(|h| headers.get_all(h.as_str()).iter())
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (header, value) in headers {
        for prefix in &config.extra_headers_prefixes {
            let lower_prefix = prefix.to_ascii_lowercase();
            if let Some(key) = header.as_str().strip_prefix(&lower_prefix) {
                if let Ok(v) = value.to_str() {
                    let key = percent_decode(key);
                    extra.entry(key).or_default().push(v.to_string());
                }
            }
        }
    }
    Some(User {
        name,
        groups,
        extra,
    })
}

/// Extra header keys are percent-encoded by kube-apiserver.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(Ok(b)) = text.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16)) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The verb a SubjectAccessReview checks for an HTTP method, as KubeVirt maps them.
pub fn verb_for(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::PUT => "update",
        Method::POST => "create",
        Method::DELETE => "delete",
        Method::PATCH => "patch",
        _ => "get",
    }
}

/// What one SubjectAccessReview asks: may the user `verb` the `resource` (and `subresource`)
/// of group `subresources.kubevirt.io` in `namespace`, on the object `name` if there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub namespace: String,
    pub verb: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    pub name: Option<String>,
}

impl Access {
    /// A subresource of one object: `virtualmachineinstances/console` of `name`, with the verb
    /// of the subresource's method. A subresource of two segments is asked by its first
    /// (`vnc/screenshot` as `vnc`): kube-apiserver authorizes the request by that one before it
    /// proxies it, and KubeVirt's virt-api asks the same.
    pub fn subresource(request: &SubresourceRequest) -> Self {
        let s = request.subresource;
        let name = s.name();
        Access {
            namespace: request.namespace.clone(),
            verb: verb_for(&s.method()),
            resource: s.owner().resource(),
            subresource: Some(name.split('/').next().unwrap_or(name)),
            name: Some(request.name.clone()),
        }
    }

    /// `PUT .../namespaces/{ns}/expand-vm-spec`: `update` on the resource `expand-vm-spec`,
    /// with no subresource and no name, as KubeVirt asks.
    pub fn expand_vm_spec(namespace: &str) -> Self {
        Access {
            namespace: namespace.to_string(),
            verb: verb_for(&Method::PUT),
            resource: EXPAND_VM_SPEC,
            subresource: None,
            name: None,
        }
    }

    /// `resource/subresource`, as discovery and RBAC rules name it.
    fn resource_path(&self) -> String {
        match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_string(),
        }
    }
}

/// The SubjectAccessReview asking whether `user` may have `access`.
pub fn access_review(user: &User, access: &Access) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(access.namespace.clone()),
                verb: Some(access.verb.to_string()),
                group: Some(GROUP.to_string()),
                version: Some(VERSION.to_string()),
                resource: Some(access.resource.to_string()),
                subresource: access.subresource.map(str::to_string),
                name: access.name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The reason a SubjectAccessReview answer gives, for the 403 message, worded as
/// kube-apiserver words its own.
pub fn denial_message(user: &User, access: &Access, reason: Option<&str>) -> String {
    let object = match &access.name {
        Some(name) => format!(" \"{name}\""),
        None => String::new(),
    };
    let mut message = format!(
        "{}.{GROUP}{object} is forbidden: User \"{}\" cannot {} resource \"{}\" in API group \"{GROUP}\" in the namespace \"{}\"",
        access.resource,
        user.name,
        access.verb,
        access.resource_path(),
        access.namespace,
    );
    if let Some(reason) = reason.filter(|r| !r.is_empty()) {
        message.push_str(": ");
        message.push_str(reason);
    }
    message
}

/// The common name of a DER certificate's subject, found by walking the DER structure
/// (Certificate -> tbsCertificate -> subject -> RDNs -> id-at-commonName).
pub fn certificate_common_name(der: &[u8]) -> Option<String> {
    let (_, cert_body, _) = der_element(der)?;
    let (_, tbs, _) = der_element(cert_body)?;
    let mut rest = tbs;
    // version [0] is optional; then serial, signature algorithm, issuer, validity, subject.
    let (tag, _, after) = der_element(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..4 {
        let (_, _, after) = der_element(rest)?;
        rest = after;
    }
    let (_, subject, _) = der_element(rest)?;
    let mut rdns = subject;
    while !rdns.is_empty() {
        let (_, set, after) = der_element(rdns)?;
        rdns = after;
        let (_, attribute, _) = der_element(set)?;
        let (_, oid, value_rest) = der_element(attribute)?;
        if oid == [0x55, 0x04, 0x03] {
            let (_, value, _) = der_element(value_rest)?;
            return Some(String::from_utf8_lossy(value).into_owned());
        }
    }
    None
}

/// Splits one DER element off `data`: (tag, contents, rest).
fn der_element(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *data.first()?;
    let first = *data.get(1)? as usize;
    let (length, header) = if first < 0x80 {
        (first, 2)
    } else {
        let count = first & 0x7f;
        if count == 0 || count > 4 {
            return None;
        }
        let mut length = 0usize;
        for i in 0..count {
            length = (length << 8) | *data.get(2 + i)? as usize;
        }
        (length, 2 + count)
    };
    let end = header.checked_add(length)?;
    Some((tag, data.get(header..end)?, data.get(end..)?))
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
