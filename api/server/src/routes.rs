//! The URL space virt-api serves, parsed into [`Route`]s, and the paths virtctl builds.
//!
//! - `/mutate-<resource>` and `/validate-<resource>`: admission webhooks (`AdmissionReview` v1),
//!   called by kube-apiserver without user credentials.
//! - `/apis`, `/apis/subresources.kubevirt.io`, `/apis/subresources.kubevirt.io/v1`: discovery.
//! - `/apis/subresources.kubevirt.io/v1/namespaces/{ns}/{virtualmachines|virtualmachineinstances}/{name}/{subresource}`:
//!   the subresources, reached through kube-apiserver's aggregation layer; a subresource's name
//!   may have two segments (`vnc/screenshot`).
//! - `/apis/subresources.kubevirt.io/v1/namespaces/{ns}/expand-vm-spec`: expands a VM sent in
//!   the body (a resource of its own, not a subresource of an object).
//! - `/apis/subresources.kubevirt.io/v1/{version,healthz}` and `/healthz`.

use http::Method;

/// The aggregated API group.
pub const GROUP: &str = "subresources.kubevirt.io";
/// Its version.
pub const VERSION: &str = "v1";
/// Versions accepted in paths (KubeVirt still serves v1alpha3 as an alias).
const ACCEPTED_VERSIONS: &[&str] = &["v1", "v1alpha3"];

/// The kind of object a subresource hangs off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    VirtualMachine,
    VirtualMachineInstance,
}

impl Owner {
    /// The plural resource name in URLs and SubjectAccessReviews.
    pub fn resource(self) -> &'static str {
        match self {
            Owner::VirtualMachine => "virtualmachines",
            Owner::VirtualMachineInstance => "virtualmachineinstances",
        }
    }
}

/// A subresource virt-api implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Console,
    /// `vnc`: a WebSocket of the VM's VNC (RFB) stream.
    Vnc,
    /// `vnc/screenshot`: a PNG of the VM's screen.
    VncScreenshot,
    Pause,
    Unpause,
    Reset,
    SoftReboot,
    GuestOsInfo,
    UserList,
    FilesystemList,
    Freeze,
    Unfreeze,
    /// `portforward/{port}[/{protocol}]` of a VMI ([`Route::PortForward`]).
    VmiPortForward,
    /// The same through the VM, to its VMI.
    VmPortForward,
    Start,
    Stop,
    Restart,
    Migrate,
    ExpandSpec,
}

impl Subresource {
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Console => "console",
            Subresource::Vnc => "vnc",
            Subresource::VncScreenshot => "vnc/screenshot",
            Subresource::Pause => "pause",
            Subresource::Unpause => "unpause",
            Subresource::Reset => "reset",
            Subresource::SoftReboot => "softreboot",
            Subresource::GuestOsInfo => "guestosinfo",
            Subresource::UserList => "userlist",
            Subresource::FilesystemList => "filesystemlist",
            Subresource::Freeze => "freeze",
            Subresource::Unfreeze => "unfreeze",
            Subresource::VmiPortForward | Subresource::VmPortForward => PORT_FORWARD,
            Subresource::Start => "start",
            Subresource::Stop => "stop",
            Subresource::Restart => "restart",
            Subresource::Migrate => "migrate",
            Subresource::ExpandSpec => "expand-spec",
        }
    }

    /// The object kind this subresource belongs to.
    pub fn owner(self) -> Owner {
        match self {
            Subresource::Start
            | Subresource::Stop
            | Subresource::Restart
            | Subresource::Migrate
            | Subresource::ExpandSpec
            | Subresource::VmPortForward => Owner::VirtualMachine,
            _ => Owner::VirtualMachineInstance,
        }
    }

    /// The HTTP method the subresource is called with.
    pub fn method(self) -> Method {
        match self {
            Subresource::Console
            | Subresource::Vnc
            | Subresource::VncScreenshot
            | Subresource::GuestOsInfo
            | Subresource::UserList
            | Subresource::FilesystemList
            | Subresource::VmiPortForward
            | Subresource::VmPortForward
            | Subresource::ExpandSpec => Method::GET,
            _ => Method::PUT,
        }
    }

    /// Every subresource, for discovery.
    pub const ALL: [Subresource; 19] = [
        Subresource::Console,
        Subresource::Vnc,
        Subresource::VncScreenshot,
        Subresource::Pause,
        Subresource::Unpause,
        Subresource::Reset,
        Subresource::SoftReboot,
        Subresource::GuestOsInfo,
        Subresource::UserList,
        Subresource::FilesystemList,
        Subresource::Freeze,
        Subresource::Unfreeze,
        Subresource::VmiPortForward,
        Subresource::VmPortForward,
        Subresource::Start,
        Subresource::Stop,
        Subresource::Restart,
        Subresource::Migrate,
        Subresource::ExpandSpec,
    ];

    fn parse(owner: Owner, name: &str) -> Option<Subresource> {
        Subresource::ALL
            .into_iter()
            .find(|s| s.owner() == owner && s.name() == name)
    }
}

/// The port-forward subresource's name; its path goes on with the port and the protocol.
pub const PORT_FORWARD: &str = "portforward";

/// Where a port-forward goes in the guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortTarget {
    pub port: u16,
    /// `tcp` (the default) or `udp`, lower case as in the path.
    pub protocol: String,
}

/// The namespaced resource `expand-vm-spec` (`PUT` with a VirtualMachine body).
pub const EXPAND_VM_SPEC: &str = "expand-vm-spec";

/// One request to a subresource of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubresourceRequest {
    pub namespace: String,
    pub name: String,
    pub subresource: Subresource,
}

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Mutate(String),
    Validate(String),
    /// `/apis`
    ApiGroupList,
    /// `/apis/subresources.kubevirt.io`
    ApiGroup,
    /// `/apis/subresources.kubevirt.io/v1`
    ApiResourceList,
    Version,
    Healthz,
    Subresource(SubresourceRequest),
    /// `PUT .../namespaces/{ns}/expand-vm-spec`, with the namespace.
    ExpandVmSpec(String),
    /// `GET .../{virtualmachineinstances|virtualmachines}/{name}/portforward/{port}[/{protocol}]`
    /// (a WebSocket of the connection's bytes).
    PortForward(SubresourceRequest, PortTarget),
    /// A path under the group this server does not implement (404).
    NotFound,
    /// A known subresource called with the wrong method (405).
    MethodNotAllowed,
}

/// Parses method and path (without query) into a route.
pub fn route(method: &Method, path: &str) -> Route {
    // KubeVirt's tests ask for `//healthz` (they join `https://localhost:<port>/` and
    // `/healthz`): leading slashes count as one.
    let path = path.trim_end_matches('/');
    let path = match path.find(|c| c != '/') {
        Some(start) if start > 1 => &path[start - 1..],
        _ => path,
    };
    if let Some(resource) = path.strip_prefix("/mutate-") {
        return Route::Mutate(resource.to_string());
    }
    if let Some(resource) = path.strip_prefix("/validate-") {
        return Route::Validate(resource.to_string());
    }
    let parts: Vec<&str> = path.split('/').skip(1).collect();
    match parts.as_slice() {
        ["healthz"] => Route::Healthz,
        ["apis"] => Route::ApiGroupList,
        ["apis", g] if *g == GROUP => Route::ApiGroup,
        ["apis", g, v] if *g == GROUP && ACCEPTED_VERSIONS.contains(v) => Route::ApiResourceList,
        ["apis", g, v, "version"] if *g == GROUP && ACCEPTED_VERSIONS.contains(v) => Route::Version,
        ["apis", g, v, "healthz"] if *g == GROUP && ACCEPTED_VERSIONS.contains(v) => Route::Healthz,
        ["apis", g, v, "namespaces", ns, resource]
            if *g == GROUP && ACCEPTED_VERSIONS.contains(v) && *resource == EXPAND_VM_SPEC =>
        {
            if *method != Method::PUT {
                return Route::MethodNotAllowed;
            }
            Route::ExpandVmSpec(ns.to_string())
        }
        ["apis", g, v, "namespaces", ns, resource, name, "portforward", port, rest @ ..]
            if *g == GROUP && ACCEPTED_VERSIONS.contains(v) && rest.len() <= 1 =>
        {
            let subresource = match *resource {
                "virtualmachines" => Subresource::VmPortForward,
                "virtualmachineinstances" => Subresource::VmiPortForward,
                _ => return Route::NotFound,
            };
            let Some(port) = port.parse::<u16>().ok().filter(|p| *p > 0) else {
                return Route::NotFound;
            };
            if *method != subresource.method() {
                return Route::MethodNotAllowed;
            }
            let protocol = rest.first().map_or("tcp", |p| p).to_ascii_lowercase();
            Route::PortForward(
                SubresourceRequest {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    subresource,
                },
                PortTarget { port, protocol },
            )
        }
        // A subresource's name is one segment (`console`) or two (`vnc/screenshot`).
        ["apis", g, v, "namespaces", ns, resource, name, sub @ ..]
            if *g == GROUP
                && ACCEPTED_VERSIONS.contains(v)
                && matches!(sub.len(), 1 | 2)
                && sub[0] != PORT_FORWARD =>
        {
            let owner = match *resource {
                "virtualmachines" => Owner::VirtualMachine,
                "virtualmachineinstances" => Owner::VirtualMachineInstance,
                _ => return Route::NotFound,
            };
            let Some(subresource) = Subresource::parse(owner, &sub.join("/")) else {
                return Route::NotFound;
            };
            if *method != subresource.method() {
                return Route::MethodNotAllowed;
            }
            Route::Subresource(SubresourceRequest {
                namespace: ns.to_string(),
                name: name.to_string(),
                subresource,
            })
        }
        _ => Route::NotFound,
    }
}

/// The path of a subresource, as virtctl calls it through kube-apiserver.
pub fn subresource_path(namespace: &str, name: &str, subresource: Subresource) -> String {
    format!(
        "/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{}/{name}/{}",
        subresource.owner().resource(),
        subresource.name()
    )
}

/// The path of a port-forward to `port` (`tcp` or `udp`) of a VMI, or of a VM's VMI.
pub fn port_forward_path(
    namespace: &str,
    owner: Owner,
    name: &str,
    port: u16,
    protocol: &str,
) -> String {
    format!(
        "/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{}/{name}/{PORT_FORWARD}/{port}/{protocol}",
        owner.resource()
    )
}

/// The path of `expand-vm-spec` in a namespace.
pub fn expand_vm_spec_path(namespace: &str) -> String {
    format!("/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{EXPAND_VM_SPEC}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_forward_paths_carry_the_port_and_protocol() {
        let path = port_forward_path("ns", Owner::VirtualMachineInstance, "vmi", 22, "tcp");
        assert_eq!(
            path,
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vmi/portforward/22/tcp"
        );
        let request = |subresource| SubresourceRequest {
            namespace: "ns".into(),
            name: "vmi".into(),
            subresource,
        };
        assert_eq!(
            route(&Method::GET, &path),
            Route::PortForward(
                request(Subresource::VmiPortForward),
                PortTarget {
                    port: 22,
                    protocol: "tcp".into()
                }
            )
        );
        assert_eq!(
            route(
                &Method::GET,
                "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vmi/portforward/8080"
            ),
            Route::PortForward(
                request(Subresource::VmPortForward),
                PortTarget {
                    port: 8080,
                    protocol: "tcp".into()
                }
            )
        );
        for bad in [
            "portforward",
            "portforward/0",
            "portforward/70000",
            "portforward/22/tcp/x",
        ] {
            assert_eq!(
                route(
                    &Method::GET,
                    &format!("/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/v/{bad}")
                ),
                Route::NotFound,
                "{bad}"
            );
        }
        assert_eq!(route(&Method::PUT, &path), Route::MethodNotAllowed);
    }

    #[test]
    fn subresource_paths_round_trip() {
        for s in Subresource::ALL
            .into_iter()
            .filter(|s| s.name() != PORT_FORWARD)
        {
            let path = subresource_path("default", "testvm", s);
            assert_eq!(
                route(&s.method(), &path),
                Route::Subresource(SubresourceRequest {
                    namespace: "default".into(),
                    name: "testvm".into(),
                    subresource: s,
                }),
                "{path}"
            );
        }
    }

    #[test]
    fn paths_match_kubevirt() {
        assert_eq!(
            subresource_path("ns", "vm", Subresource::Console),
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm/console"
        );
        assert_eq!(
            subresource_path("ns", "vm", Subresource::Start),
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm/start"
        );
    }

    #[test]
    fn expand_paths_and_methods() {
        let expand_spec =
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm/expand-spec";
        assert_eq!(
            subresource_path("ns", "vm", Subresource::ExpandSpec),
            expand_spec
        );
        assert_eq!(
            route(&Method::GET, expand_spec),
            Route::Subresource(SubresourceRequest {
                namespace: "ns".into(),
                name: "vm".into(),
                subresource: Subresource::ExpandSpec,
            })
        );
        assert_eq!(route(&Method::PUT, expand_spec), Route::MethodNotAllowed);
        let vmi_expand_spec =
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm/expand-spec";
        assert_eq!(route(&Method::GET, vmi_expand_spec), Route::NotFound);

        let expand_vm_spec = "/apis/subresources.kubevirt.io/v1/namespaces/ns/expand-vm-spec";
        assert_eq!(expand_vm_spec_path("ns"), expand_vm_spec);
        assert_eq!(
            route(&Method::PUT, expand_vm_spec),
            Route::ExpandVmSpec("ns".into())
        );
        assert_eq!(
            route(
                &Method::PUT,
                "/apis/subresources.kubevirt.io/v1alpha3/namespaces/ns/expand-vm-spec/"
            ),
            Route::ExpandVmSpec("ns".into())
        );
        for method in [Method::GET, Method::POST, Method::PATCH] {
            assert_eq!(route(&method, expand_vm_spec), Route::MethodNotAllowed);
        }
        assert_eq!(
            route(
                &Method::PUT,
                "/apis/subresources.kubevirt.io/v1/namespaces/ns/expand-other"
            ),
            Route::NotFound
        );
    }

    #[test]
    fn vnc_and_its_screenshot_are_vmi_subresources() {
        let vmi = "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm";
        let request = |subresource| {
            Route::Subresource(SubresourceRequest {
                namespace: "ns".into(),
                name: "vm".into(),
                subresource,
            })
        };
        assert_eq!(
            subresource_path("ns", "vm", Subresource::VncScreenshot),
            format!("{vmi}/vnc/screenshot")
        );
        assert_eq!(
            route(&Method::GET, &format!("{vmi}/vnc")),
            request(Subresource::Vnc)
        );
        assert_eq!(
            route(&Method::GET, &format!("{vmi}/vnc/screenshot")),
            request(Subresource::VncScreenshot)
        );
        assert_eq!(
            route(
                &Method::GET,
                "/apis/subresources.kubevirt.io/v1alpha3/namespaces/ns/virtualmachineinstances/vm/vnc/screenshot/"
            ),
            request(Subresource::VncScreenshot)
        );
        assert_eq!(
            route(&Method::PUT, &format!("{vmi}/vnc/screenshot")),
            Route::MethodNotAllowed
        );
        for unknown in [
            "vnc/other",
            "vnc/screenshot/x",
            "console/screenshot",
            "screenshot",
        ] {
            assert_eq!(
                route(&Method::GET, &format!("{vmi}/{unknown}")),
                Route::NotFound,
                "{unknown}"
            );
        }
        // Only a VMI has a display of its own.
        assert_eq!(
            route(
                &Method::GET,
                "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm/vnc/screenshot"
            ),
            Route::NotFound
        );
    }

    #[test]
    fn wrong_owner_method_and_unknown() {
        let vmi_start =
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/x/start";
        assert_eq!(route(&Method::PUT, vmi_start), Route::NotFound);
        let pause =
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/x/pause";
        assert_eq!(route(&Method::GET, pause), Route::MethodNotAllowed);
        assert_eq!(route(&Method::GET, "/apis/other/v1"), Route::NotFound);
    }

    #[test]
    fn discovery_admission_and_health() {
        assert_eq!(route(&Method::GET, "/apis"), Route::ApiGroupList);
        assert_eq!(
            route(&Method::GET, "/apis/subresources.kubevirt.io/"),
            Route::ApiGroup
        );
        assert_eq!(
            route(&Method::GET, "/apis/subresources.kubevirt.io/v1"),
            Route::ApiResourceList
        );
        assert_eq!(
            route(&Method::GET, "/apis/subresources.kubevirt.io/v1/version"),
            Route::Version
        );
        assert_eq!(route(&Method::GET, "/healthz"), Route::Healthz);
        assert_eq!(route(&Method::GET, "//healthz"), Route::Healthz);
        assert_eq!(
            route(&Method::GET, "/apis/subresources.kubevirt.io/v1/healthz"),
            Route::Healthz
        );
        assert_eq!(
            route(&Method::POST, "/validate-virtualmachines"),
            Route::Validate("virtualmachines".into())
        );
        assert_eq!(
            route(&Method::POST, "/mutate-virtualmachineinstances"),
            Route::Mutate("virtualmachineinstances".into())
        );
    }
}
