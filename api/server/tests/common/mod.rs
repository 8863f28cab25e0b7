//! The harness of the cluster test: finds the local cluster (failing with what to run when it
//! is not up), makes certificates with openssl, runs virt-api on the host, registers it, and
//! removes every registration again when dropped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use virt_api::manifests::{self, InstallConfig, WebhookTarget};

mod fake_handler;

const NOT_UP: &str = "the local cluster is not up: run `tests/cluster/cluster.sh up` first";
const APISERVICE: &str = "v1.subresources.kubevirt.io";
const TEST_LABEL: &str = "ferrovirt.io/virt-api-test";
const PKI: &str = "/var/lib/ferrovirt-cluster/pki";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every manifest of the project's own (`api/testdata/manifests/`), parsed.
pub fn fixtures() -> Vec<(String, Value)> {
    let dir = repo_root().join("api/testdata/manifests");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(&n)).expect("readable manifest");
            let value: Value = serde_yaml::from_str(&text).expect("YAML manifest");
            (n, value)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// What a command printed.
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

fn run_command(command: &mut Command, stdin: Option<&[u8]>) -> Output {
    command.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        pipe.write_all(input).expect("writing stdin");
    }
    let out = child.wait_with_output().expect("waiting for the command");
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The local cluster's admin kubeconfig, checked to answer.
pub struct Cluster {
    pub kubeconfig: PathBuf,
}

impl Cluster {
    pub fn connect() -> Cluster {
        let script = repo_root().join("tests/cluster/cluster.sh");
        let out = run_command(Command::new("bash").arg(&script).arg("kubeconfig"), None);
        let path = out
            .stdout
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_string();
        assert!(
            out.ok && Path::new(&path).exists(),
            "{NOT_UP} (`cluster.sh kubeconfig` gave no kubeconfig: {})",
            out.stderr
        );
        let cluster = Cluster {
            kubeconfig: PathBuf::from(path),
        };
        let ready = cluster.kubectl(&["get", "--raw", "/readyz"], None);
        assert!(
            ready.ok,
            "{NOT_UP} (kube-apiserver does not answer: {})",
            ready.stderr
        );
        cluster
    }

    pub fn kubectl(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        run_command(
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(args),
            stdin,
        )
    }
}

/// An HTTP answer read with curl.
pub struct HttpAnswer {
    pub code: u16,
    pub body: String,
}

/// One run of virt-api on the host, registered with the cluster.
pub struct Run {
    cluster_kubeconfig: PathBuf,
    pub namespace: String,
    port: u16,
    dir: tempfile::TempDir,
    virt_api: Child,
    webhook_names: (String, String),
    /// Port of the fake virt-handler (see [`Run::fake_handler`]).
    pub handler_port: u16,
    /// The fake virt-handler's certificates (`tls.crt`, `tls.key`, `ca.crt`), made by the
    /// same CA as the client certificate virt-api presents.
    pub handler_cert_dir: PathBuf,
    /// The APIService of an installed virt-api, put back when the test ends.
    installed_api_service: Option<Value>,
    /// Installed deployments (virt-operator, virt-controller) and their replicas, scaled to 0
    /// while the test runs and scaled back after, in reverse order.
    paused_deployments: Vec<(String, String)>,
    /// The cluster lock, held from before the deployments are paused and the CRDs applied until
    /// they are put back (a field drops after `Drop::drop` has run).
    _lock: ferrovirt_tests::ClusterLock,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn openssl(args: &[&str]) {
    let out = run_command(Command::new("openssl").args(args), None);
    assert!(out.ok, "openssl {args:?}: {}", out.stderr);
}

/// Scales the installed deployment `name` in `kubevirt` to 0 and waits for its Pods to go;
/// returns its replicas, or `None` when it is not installed.
fn pause_deployment(cluster: &Cluster, name: &str) -> Option<String> {
    let replicas = cluster.kubectl(
        &[
            "-n",
            "kubevirt",
            "get",
            "deployment",
            name,
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        None,
    );
    if !replicas.ok {
        return None;
    }
    let out = cluster.kubectl(
        &[
            "-n",
            "kubevirt",
            "scale",
            "deployment",
            name,
            "--replicas=0",
        ],
        None,
    );
    assert!(out.ok, "scaling the installed {name} to 0: {}", out.stderr);
    let out = cluster.kubectl(
        &[
            "-n",
            "kubevirt",
            "wait",
            "--for=delete",
            "pod",
            "-l",
            &format!("kubevirt.io={name}"),
            "--timeout=90s",
        ],
        None,
    );
    assert!(out.ok, "the installed {name} did not stop: {}", out.stderr);
    Some(replicas.stdout.trim().to_string())
}

impl Run {
    pub fn start(cluster: &Cluster) -> Run {
        let lock = ferrovirt_tests::ClusterLock::exclusive_blocking();
        let id = std::process::id();
        let namespace = format!("virt-api-test-{id}");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let d = |name: &str| dir.path().join(name).to_string_lossy().into_owned();

        // An installed virt-api's APIService is borrowed for the test and put back after it.
        let existing = cluster.kubectl(&["get", "apiservice", APISERVICE, "-o", "json"], None);
        let mut installed_api_service = None;
        if existing.ok {
            let mut v: Value = serde_json::from_str(&existing.stdout).unwrap_or_default();
            if !v["metadata"]["labels"][TEST_LABEL].is_string() {
                if let Some(meta) = v["metadata"].as_object_mut() {
                    for field in [
                        "resourceVersion",
                        "uid",
                        "creationTimestamp",
                        "managedFields",
                        "generation",
                    ] {
                        meta.remove(field);
                    }
                }
                if let Some(object) = v.as_object_mut() {
                    object.remove("status");
                }
                installed_api_service = Some(v);
            }
        }

        // An installed virt-operator would put its APIService back and restart what is paused
        // here; an installed virt-controller would fail the stand-in VMIs (no launcher Pods).
        // Both are paused (the operator first) and scaled back when the test ends.
        let paused_deployments = ["virt-operator", "virt-controller"]
            .into_iter()
            .filter_map(|name| pause_deployment(cluster, name).map(|r| (name.to_string(), r)))
            .collect();

        // The kubevirt.io CRDs.
        let crds = api::crd::to_yaml().expect("CRD YAML");
        let out = cluster.kubectl(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=virt-api-test",
                "-f",
                "-",
            ],
            Some(crds.as_bytes()),
        );
        assert!(out.ok, "applying the CRDs: {}", out.stderr);
        let out = cluster.kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/virtualmachines.kubevirt.io",
                "crd/virtualmachineinstances.kubevirt.io",
            ],
            None,
        );
        assert!(out.ok, "CRDs not established: {}", out.stderr);

        // The namespace, labelled for the webhooks' namespaceSelector.
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": namespace, "labels": {TEST_LABEL: id.to_string()}}});
        let out = cluster.kubectl(&["apply", "-f", "-"], Some(ns.to_string().as_bytes()));
        assert!(out.ok, "creating namespace {namespace}: {}", out.stderr);

        // Where kube-apiserver reaches the host: its own advertised address.
        let out = cluster.kubectl(
            &[
                "get",
                "endpointslice",
                "-n",
                "default",
                "-l",
                "kubernetes.io/service-name=kubernetes",
                "-o",
                "jsonpath={.items[0].endpoints[0].addresses[0]}",
            ],
            None,
        );
        let host_ip = out.stdout.trim().to_string();
        assert!(
            out.ok && !host_ip.is_empty(),
            "kube-apiserver's address: {}",
            out.stderr
        );

        // Certificates: a CA, and virt-api's serving certificate.
        let san = format!("subjectAltName=DNS:virt-api.{namespace}.svc,IP:127.0.0.1,IP:{host_ip}");
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &d("ca.key"),
            "-out",
            &d("ca.crt"),
            "-days",
            "1",
            "-subj",
            "/CN=virt-api-test-ca",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &d("tls.key"),
            "-out",
            &d("tls.csr"),
            "-subj",
            "/CN=virt-api",
            "-addext",
            &san,
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &d("tls.csr"),
            "-CA",
            &d("ca.crt"),
            "-CAkey",
            &d("ca.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            &d("tls.crt"),
            "-copy_extensions",
            "copy",
        ]);

        // virt-handler's serving certificate and virt-api's client certificate for it.
        for (name, subject, extensions) in [
            (
                "handler-server",
                "/CN=kubevirt.io:system:node:virt-handler",
                "subjectAltName=DNS:virt-handler.kubevirt.svc\nextendedKeyUsage=serverAuth,clientAuth\n",
            ),
            (
                "handler-client",
                "/CN=kubevirt.io:system:client:virt-handler",
                "extendedKeyUsage=clientAuth\n",
            ),
        ] {
            std::fs::create_dir_all(d(name)).expect("certificate directory");
            std::fs::write(d(&format!("{name}/ext")), extensions).expect("extensions file");
            openssl(&[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &d(&format!("{name}/tls.key")),
                "-out",
                &d(&format!("{name}/tls.csr")),
                "-subj",
                subject,
            ]);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &d(&format!("{name}/tls.csr")),
                "-CA",
                &d("ca.crt"),
                "-CAkey",
                &d("ca.key"),
                "-CAcreateserial",
                "-days",
                "1",
                "-out",
                &d(&format!("{name}/tls.crt")),
                "-extfile",
                &d(&format!("{name}/ext")),
            ]);
            std::fs::copy(d("ca.crt"), d(&format!("{name}/ca.crt"))).expect("CA copy");
        }

        let handler_cert_dir = PathBuf::from(d("handler-server"));
        let port = free_port();
        let handler_port = free_port();
        let log = std::fs::File::create(d("virt-api.log")).expect("log file");
        let virt_api = Command::new(env!("CARGO_BIN_EXE_virt-api"))
            .env("KUBECONFIG", &cluster.kubeconfig)
            .env("RUST_LOG", "info")
            .args([
                "--listen",
                &format!("0.0.0.0:{port}"),
                "--tls-cert-file",
                &d("tls.crt"),
                "--tls-key-file",
                &d("tls.key"),
                "--handler-namespace",
                &namespace,
                "--handler-port",
                &handler_port.to_string(),
                "--handler-cert-dir",
                &d("handler-client"),
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting virt-api");
        let mut run = Run {
            cluster_kubeconfig: cluster.kubeconfig.clone(),
            namespace: namespace.clone(),
            port,
            dir,
            virt_api,
            webhook_names: (
                format!("virt-api-test-{id}-mutator"),
                format!("virt-api-test-{id}-validator"),
            ),
            handler_port,
            handler_cert_dir,
            installed_api_service,
            paused_deployments,
            _lock: lock,
        };
        run.wait_healthy();
        run.register(&host_ip);
        run
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("virt-api.log")).unwrap_or_default()
    }

    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.virt_api.try_wait() {
                panic!("virt-api exited ({status}):\n{}", self.log());
            }
            let out = run_command(
                Command::new("curl")
                    .args(["-sk", &format!("https://127.0.0.1:{}/healthz", self.port)]),
                None,
            );
            if out.ok && out.stdout.contains("ok") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "virt-api not healthy within 60 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn register(&self, host_ip: &str) {
        let ca = std::fs::read(self.dir.path().join("ca.crt")).expect("CA");
        let config = InstallConfig {
            namespace: self.namespace.clone(),
            image: String::new(),
            ca_bundle: ca,
            webhook_target: WebhookTarget::Url(format!("https://127.0.0.1:{}", self.port)),
        };
        let selector = json!({"matchLabels": {TEST_LABEL: std::process::id().to_string()}});
        let mut objects = Vec::new();
        for (mut hooks, kind, name) in [
            (
                serde_json::to_value(manifests::mutating_webhook_configuration(&config))
                    .expect("JSON"),
                "MutatingWebhookConfiguration",
                &self.webhook_names.0,
            ),
            (
                serde_json::to_value(manifests::validating_webhook_configuration(&config))
                    .expect("JSON"),
                "ValidatingWebhookConfiguration",
                &self.webhook_names.1,
            ),
        ] {
            hooks["apiVersion"] = json!("admissionregistration.k8s.io/v1");
            hooks["kind"] = json!(kind);
            hooks["metadata"]["name"] = json!(name);
            for hook in hooks["webhooks"].as_array_mut().expect("webhooks") {
                hook["namespaceSelector"] = selector.clone();
            }
            objects.push(hooks);
        }
        let mut service = serde_json::to_value(manifests::service(&config)).expect("JSON");
        service["apiVersion"] = json!("v1");
        service["kind"] = json!("Service");
        service["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("selector");
        objects.push(service);
        objects.push(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "virt-api-host", "namespace": self.namespace,
                         "labels": {"kubernetes.io/service-name": manifests::NAME}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host_ip], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": self.port, "protocol": "TCP"}],
        }));
        let mut api_service = serde_json::to_value(manifests::api_service(&config)).expect("JSON");
        api_service["apiVersion"] = json!("apiregistration.k8s.io/v1");
        api_service["kind"] = json!("APIService");
        api_service["metadata"]["labels"][TEST_LABEL] = json!(std::process::id().to_string());
        objects.push(api_service);
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let out = self.kubectl_stdin(&["apply", "-f", "-"], &list);
        assert!(out.ok, "registering virt-api: {}", out.stderr);
        let out = self.kubectl(&[
            "wait",
            "--for=condition=Available",
            "--timeout=90s",
            &format!("apiservice/{APISERVICE}"),
        ]);
        assert!(
            out.ok,
            "APIService not Available: {}\n{}\nvirt-api log:\n{}",
            out.stderr,
            self.kubectl(&["get", "apiservice", APISERVICE, "-o", "yaml"])
                .stdout,
            self.log()
        );
    }

    fn kubectl_in(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        run_command(
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.cluster_kubeconfig)
                .args(["-n", &self.namespace])
                .args(args),
            stdin,
        )
    }

    /// kubectl in the test namespace.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_in(args, None)
    }

    /// kubectl in the test namespace with a JSON object on stdin.
    pub fn kubectl_stdin(&self, args: &[&str], object: &Value) -> Output {
        self.kubectl_in(args, Some(object.to_string().as_bytes()))
    }

    /// virtctl (built beside this test) in the test namespace.
    pub fn virtctl(&self, args: &[&str]) -> Output {
        let exe = std::env::current_exe().expect("test executable");
        let virtctl = exe
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("virtctl"))
            .expect("target directory");
        assert!(
            virtctl.exists(),
            "{} is missing: build it with `cargo build -p virtctl`",
            virtctl.display()
        );
        run_command(
            Command::new(virtctl)
                .arg("--kubeconfig")
                .arg(&self.cluster_kubeconfig)
                .args(["-n", &self.namespace])
                .args(args),
            None,
        )
    }

    fn curl(&self, path: &str, user: &str, client_cert: bool) -> HttpAnswer {
        let mut command = Command::new("curl");
        command.args(["-sk", "-o", "-", "-w", "\n%{http_code}"]);
        if client_cert {
            command.args([
                "--cert",
                &format!("{PKI}/front-proxy-client.crt"),
                "--key",
                &format!("{PKI}/front-proxy-client.key"),
            ]);
        }
        command.args([
            "-H",
            &format!("X-Remote-User: {user}"),
            "-H",
            "X-Remote-Group: system:authenticated",
            &format!("https://127.0.0.1:{}{path}", self.port),
        ]);
        let out = run_command(&mut command, None);
        let (body, code) = out.stdout.rsplit_once('\n').unwrap_or(("", ""));
        HttpAnswer {
            code: code.trim().parse().unwrap_or(0),
            body: body.to_string(),
        }
    }

    /// A request to virt-api as kube-apiserver's front proxy would make it for `user`.
    pub fn as_front_proxy(&self, path: &str, user: &str) -> HttpAnswer {
        self.curl(path, user, true)
    }

    /// The same headers without the front proxy's client certificate.
    pub fn without_client_certificate(&self, path: &str, user: &str) -> HttpAnswer {
        self.curl(path, user, false)
    }
}

impl Run {
    /// Starts virtctl with piped stdin and stdout (not a terminal: no raw mode).
    pub fn virtctl_piped(&self, args: &[&str]) -> Child {
        let exe = std::env::current_exe().expect("test executable");
        let virtctl = exe
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("virtctl"))
            .expect("target directory");
        Command::new(virtctl)
            .arg("--kubeconfig")
            .arg(&self.cluster_kubeconfig)
            .args(["-n", &self.namespace])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting virtctl")
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let k = |args: &[&str]| {
            run_command(
                Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&self.cluster_kubeconfig)
                    .args(args),
                None,
            )
        };
        k(&["delete", "--ignore-not-found", "apiservice", APISERVICE]);
        k(&[
            "delete",
            "--ignore-not-found",
            "mutatingwebhookconfiguration",
            &self.webhook_names.0,
        ]);
        k(&[
            "delete",
            "--ignore-not-found",
            "validatingwebhookconfiguration",
            &self.webhook_names.1,
        ]);
        k(&[
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "namespace",
            &self.namespace,
        ]);
        if let Some(installed) = &self.installed_api_service {
            let text = serde_json::to_vec(installed).unwrap_or_default();
            run_command(
                Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&self.cluster_kubeconfig)
                    .args(["create", "-f", "-"]),
                Some(&text),
            );
        }
        for (name, replicas) in self.paused_deployments.iter().rev() {
            k(&[
                "-n",
                "kubevirt",
                "scale",
                "deployment",
                name,
                &format!("--replicas={replicas}"),
            ]);
        }
        let _ = self.virt_api.kill();
        let _ = self.virt_api.wait();
    }
}
