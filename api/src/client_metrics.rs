//! `kubevirt_rest_client_requests_total`: the requests a component made to the API server,
//! counted the way KubeVirt's components count theirs (client-go's `rest_client_requests_total`
//! under KubeVirt's prefix), by response `code`, HTTP `method`, `host`, `resource` and
//! Kubernetes `verb` (`GET`, `LIST`, `WATCH`, `CREATE`, `UPDATE`, `PATCH`, `DELETE`,
//! `DELETECOLLECTION`). KubeVirt's density test reads it through Prometheus to compare the
//! writes of VMIs with the Pods created (`PATCH-virtualmachineinstances-count` per
//! `CREATE-pods-count` and so on).
//!
//! [`client`] builds a component's kube client with [`CountRequests`] as its outermost layer;
//! [`encode`] renders the counter in Prometheus' text format for the component's `/metrics`.
//! The counts live for the process, as a Prometheus counter's do.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};

use crate::prometheus_text::encode_labels;

pub const REQUESTS_TOTAL: &str = "kubevirt_rest_client_requests_total";

/// The labels of one series of [`REQUESTS_TOTAL`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestKey {
    /// The response's status code, or `<error>` when none came (as client-go says it).
    pub code: String,
    pub method: String,
    pub host: String,
    pub resource: String,
    pub verb: String,
}

static REQUESTS: Mutex<BTreeMap<RequestKey, u64>> = Mutex::new(BTreeMap::new());

/// The plural resource and the Kubernetes verb of a request to the API server, from its method
/// and its path (with the query). The subresource counts as its resource (a status update is an
/// `UPDATE` of `virtualmachineinstances`); a path outside `/api` and `/apis` has no resource.
pub fn resource_and_verb(method: &str, path_and_query: &str) -> (String, String) {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // After `/api/v1` or `/apis/<group>/<version>`: [namespaces, <ns>,] <resource> [<name> ...]
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _namespace, inner @ ..] if !inner.is_empty() => inner,
        other => other,
    };
    let resource = rest.first().copied().unwrap_or_default().to_string();
    // A non-resource path (`/version`, `/apis`) is read with GET, as the API server says it.
    let named = rest.len() != 1;
    let watch = query
        .split('&')
        .any(|pair| pair == "watch=true" || pair == "watch=1");
    let verb = match method {
        "GET" if watch => "WATCH",
        "GET" if named => "GET",
        "GET" => "LIST",
        "POST" => "CREATE",
        "PUT" => "UPDATE",
        "PATCH" => "PATCH",
        "DELETE" if named => "DELETE",
        "DELETE" => "DELETECOLLECTION",
        other => other,
    };
    (resource, verb.to_string())
}

/// Adds one to the series of `key`.
pub fn record(key: RequestKey) {
    if let Ok(mut requests) = REQUESTS.lock() {
        *requests.entry(key).or_default() += 1;
    }
}

/// The series counted so far.
pub fn snapshot() -> BTreeMap<RequestKey, u64> {
    REQUESTS.lock().map(|r| r.clone()).unwrap_or_default()
}

/// [`REQUESTS_TOTAL`] in Prometheus' text format (empty before the first request).
pub fn encode() -> String {
    encode_series(&snapshot())
}

fn encode_series(series: &BTreeMap<RequestKey, u64>) -> String {
    if series.is_empty() {
        return String::new();
    }
    let name = REQUESTS_TOTAL;
    let mut out = format!(
        "# HELP {name} Number of HTTP requests, partitioned by status code, method, and host.\n\
         # TYPE {name} counter\n"
    );
    for (key, count) in series {
        let labels = encode_labels(&[
            ("code", &key.code),
            ("host", &key.host),
            ("method", &key.method),
            ("resource", &key.resource),
            ("verb", &key.verb),
        ]);
        out.push_str(&format!("{name}{{{labels}}} {count}\n"));
    }
    out
}

/// A layer that counts each request of the service it wraps in [`REQUESTS_TOTAL`], with `host`
/// (the API server's address as the client's config names it, `10.96.0.1` in a Pod: the
/// requests this outermost layer sees carry only their path).
#[derive(Clone, Debug)]
pub struct CountRequests {
    pub host: String,
}

impl<S> Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            host: self.host.clone(),
        }
    }
}

/// The service of [`CountRequests`].
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    host: String,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().as_str().to_string();
        let path = request
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or_else(|| request.uri().path());
        let (resource, verb) = resource_and_verb(&method, path);
        let host = request
            .uri()
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_else(|| self.host.clone());
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            record(RequestKey {
                code,
                method,
                host,
                resource,
                verb,
            });
            result
        })
    }
}

/// The component's kube client, as `kube::Client::try_default` builds it (the in-cluster config
/// or the kubeconfig), with its requests counted.
pub async fn client() -> Result<kube::Client, kube::Error> {
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&CountRequests { host })
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rv(method: &str, path: &str) -> (String, String) {
        resource_and_verb(method, path)
    }

    fn pair(resource: &str, verb: &str) -> (String, String) {
        (resource.to_string(), verb.to_string())
    }

    #[test]
    fn verbs_follow_the_method_the_name_and_the_watch() {
        let vmis = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances";
        assert_eq!(rv("GET", vmis), pair("virtualmachineinstances", "LIST"));
        assert_eq!(
            rv("GET", &format!("{vmis}?watch=true&resourceVersion=5")),
            pair("virtualmachineinstances", "WATCH")
        );
        assert_eq!(
            rv("GET", &format!("{vmis}/a")),
            pair("virtualmachineinstances", "GET")
        );
        assert_eq!(rv("POST", vmis), pair("virtualmachineinstances", "CREATE"));
        assert_eq!(
            rv("PUT", &format!("{vmis}/a/status")),
            pair("virtualmachineinstances", "UPDATE")
        );
        assert_eq!(
            rv("PATCH", &format!("{vmis}/a")),
            pair("virtualmachineinstances", "PATCH")
        );
        assert_eq!(
            rv("DELETE", &format!("{vmis}/a")),
            pair("virtualmachineinstances", "DELETE")
        );
        assert_eq!(
            rv("DELETE", vmis),
            pair("virtualmachineinstances", "DELETECOLLECTION")
        );
    }

    #[test]
    fn core_cluster_scoped_and_namespace_paths() {
        assert_eq!(
            rv("POST", "/api/v1/namespaces/default/pods"),
            pair("pods", "CREATE")
        );
        assert_eq!(rv("GET", "/api/v1/nodes/node-1"), pair("nodes", "GET"));
        assert_eq!(rv("GET", "/api/v1/nodes"), pair("nodes", "LIST"));
        // A namespace itself, and the list of them.
        assert_eq!(
            rv("GET", "/api/v1/namespaces/default"),
            pair("namespaces", "GET")
        );
        assert_eq!(rv("GET", "/api/v1/namespaces"), pair("namespaces", "LIST"));
        assert_eq!(
            rv("GET", "/apis/kubevirt.io/v1/kubevirts?watch=1"),
            pair("kubevirts", "WATCH")
        );
        // Outside the resource paths.
        assert_eq!(rv("GET", "/version"), pair("", "GET"));
        assert_eq!(rv("GET", "/apis"), pair("", "GET"));
    }

    #[test]
    fn series_are_encoded_with_escaped_labels() {
        let mut series = BTreeMap::new();
        series.insert(
            RequestKey {
                code: "200".into(),
                method: "PATCH".into(),
                host: "10.0.0.1:6443".into(),
                resource: "virtualmachineinstances".into(),
                verb: "PATCH".into(),
            },
            3,
        );
        series.insert(
            RequestKey {
                code: "<error>".into(),
                method: "GET".into(),
                host: "a\"b".into(),
                resource: String::new(),
                verb: "GET".into(),
            },
            1,
        );
        let text = encode_series(&series);
        assert!(
            text.starts_with("# HELP kubevirt_rest_client_requests_total "),
            "{text}"
        );
        assert!(text.contains("# TYPE kubevirt_rest_client_requests_total counter\n"));
        assert!(text.contains(
            "kubevirt_rest_client_requests_total{code=\"200\",host=\"10.0.0.1:6443\",method=\"PATCH\",\
             resource=\"virtualmachineinstances\",verb=\"PATCH\"} 3\n"
        ));
        assert!(text.contains("host=\"a\\\"b\""), "{text}");
        assert_eq!(encode_series(&BTreeMap::new()), "");
    }

    /// A service that answers every request with `status`, or fails when it is None.
    #[derive(Clone)]
    struct Answer(Option<u16>);

    impl Service<Request<()>> for Answer {
        type Response = Response<()>;
        type Error = &'static str;
        type Future = std::future::Ready<Result<Response<()>, &'static str>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(match self.0 {
                Some(status) => Ok(Response::builder().status(status).body(()).unwrap()),
                None => Err("connection refused"),
            })
        }
    }

    fn count_of(host: &str, code: &str, verb: &str, resource: &str) -> u64 {
        snapshot()
            .into_iter()
            .filter(|(k, _)| {
                k.host == host && k.code == code && k.verb == verb && k.resource == resource
            })
            .map(|(_, n)| n)
            .sum()
    }

    #[tokio::test]
    async fn the_layer_counts_each_answer_and_each_failure() {
        // A host of its own: the counter is the process's, shared with other tests.
        let host = "the-layer-test:6443";
        let layer = CountRequests { host: host.into() };
        let request = |method: &str, path: &str| {
            Request::builder()
                .method(method)
                .uri(path)
                .body(())
                .unwrap()
        };
        let mut ok = layer.layer(Answer(Some(201)));
        let pods = "/api/v1/namespaces/default/pods";
        for _ in 0..2 {
            let response = ok.call(request("POST", pods)).await.unwrap();
            assert_eq!(response.status(), 201);
        }
        let mut conflict = layer.layer(Answer(Some(409)));
        conflict
            .call(request("PUT", &format!("{pods}/a")))
            .await
            .unwrap();
        let mut refused = layer.layer(Answer(None));
        assert_eq!(
            refused.call(request("GET", pods)).await.unwrap_err(),
            "connection refused"
        );
        assert_eq!(count_of(host, "201", "CREATE", "pods"), 2);
        assert_eq!(count_of(host, "409", "UPDATE", "pods"), 1);
        assert_eq!(count_of(host, "<error>", "LIST", "pods"), 1);
        assert!(encode().contains(&format!(
            "kubevirt_rest_client_requests_total{{code=\"201\",host=\"{host}\",method=\"POST\",\
             resource=\"pods\",verb=\"CREATE\"}} 2\n"
        )));
    }
}
