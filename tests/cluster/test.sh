#!/usr/bin/env bash
# Checks the local cluster end to end. Runs `cluster.sh up` first (a no-op of a
# few seconds when the cluster is up; on a fresh machine it builds and starts it).
# Prints `ok - NAME` or `not ok - NAME: reason` per check and ends with
# `N passed, N failed`; exits non-zero if any check failed. Nothing is skipped:
# a check that cannot run fails and says what is missing.
#
# Options (environment):
#   FERROVIRT_TEST_WORKER=name   worker node to add and test (default ferrovirt-worker1;
#                                "" skips nothing: the worker checks then fail)
#   FERROVIRT_TEST_DOWN=0        do not run the down/up cycle at the end
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CLUSTER="$HERE/cluster.sh"
source "$HERE/lib/common.sh"

WORKER=${FERROVIRT_TEST_WORKER-ferrovirt-worker1}
NS=ferrovirt-test
passed=0
failed=0

ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() { echo "not ok - $1: $2"; failed=$((failed + 1)); }
# check NAME COMMAND...: COMMAND prints the reason on failure.
# Once the cluster is found not up, the remaining checks fail at once (not
# skipped) instead of each waiting for its deadline.
cluster_down_reason=""
check() {
    local name=$1 out
    shift
    if [[ -n $cluster_down_reason ]]; then
        not_ok "$name" "cannot run: $cluster_down_reason"
    elif out=$("$@" 2>&1); then
        ok "$name"
    else
        not_ok "$name" "$(echo "$out" | tail -n 3 | tr '\n' ' ')"
    fi
}

k() { "$KUBE_BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# poll SECONDS COMMAND...: retry COMMAND until it succeeds or time runs out;
# prints COMMAND's last output on failure.
poll() {
    local secs=$1 out deadline
    shift
    deadline=$((SECONDS + secs))
    while :; do
        out=$("$@" 2>&1) && { echo "$out"; return 0; }
        ((SECONDS >= deadline)) && { echo "timed out after ${secs}s: $out"; return 1; }
        sleep 1
    done
}

# ---------------------------------------------------------------------------
check_prerequisites() {
    local missing=()
    [[ -x "$KUBE_BIN/kubectl" ]] || missing+=("$KUBE_BIN/kubectl (run cluster.sh up)")
    [[ -s "$ADMIN_KUBECONFIG" ]] || missing+=("$ADMIN_KUBECONFIG (run cluster.sh up)")
    [[ -x "$TOOLS_BIN/crane" ]] || missing+=("$TOOLS_BIN/crane (run cluster.sh up)")
    ((${#missing[@]} == 0)) || { echo "missing: ${missing[*]}"; return 1; }
    k get --raw /readyz >/dev/null || { echo "the API server is not ready"; return 1; }
}

nodes_ready() {
    local lines bad
    lines=$(k get nodes --no-headers) || return 1
    [[ -n $lines ]] || { echo "no nodes"; return 1; }
    bad=$(echo "$lines" | awk '$2 != "Ready" {print $1 "=" $2}')
    [[ -z $bad ]] || { echo "not Ready: $bad"; return 1; }
    echo "$lines"
}

apply_pod() { # NAME IMAGE NODE PRIVILEGED RESTART_POLICY -- ARGS...: a Pod running ARGS
    local name=$1 image=$2 node=$3 privileged=$4 restart=$5
    shift 6
    local args="" a
    for a in "$@"; do args+="\"${a//\"/\\\"}\", "; done
    k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: $NS
  labels: {app: $name}
spec:
  nodeName: $node
  restartPolicy: $restart
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $image
    command: [${args%, }]
    securityContext: {privileged: $privileged}
EOF
}

pod_running() { # NAME
    k -n "$NS" wait --for=condition=Ready "pod/$1" --timeout=120s >/dev/null ||
        { k -n "$NS" describe pod "$1" | tail -n 8; return 1; }
}

pod_succeeded() { # NAME
    k -n "$NS" wait --for=jsonpath='{.status.phase}'=Succeeded "pod/$1" --timeout=120s >/dev/null ||
        { k -n "$NS" get pod "$1" -o jsonpath='{.status.phase} {.status.containerStatuses[0].state}'; k -n "$NS" logs "$1"; return 1; }
}

image_from_local_registry() { # POD REF: the Pod's image is the local registry's REF
    local want got
    want=$("$TOOLS_BIN/crane" --insecure digest "$2") || { echo "no $2 in the local registry"; return 1; }
    got=$(k -n "$NS" get pod "$1" -o jsonpath='{.status.containerStatuses[0].imageID}')
    [[ $got == *"$want" ]] || { echo "Pod runs $got, the local registry has $want"; return 1; }
}

test_busybox_pod() {
    local node=$1 name=$2
    apply_pod "$name" busybox "$node" false Always -- sleep 3600 >/dev/null || return 1
    pod_running "$name" && image_from_local_registry "$name" 127.0.0.1:5000/library/busybox:latest
}

# quay.io/... and registry:5000/... references pull from the local registry unchanged.
test_mirrors() {
    local node=$1 ref name
    "$TOOLS_BIN/crane" --insecure copy 127.0.0.1:5000/library/busybox:latest \
        127.0.0.1:5000/ferrovirt-test/busybox:mirror >/dev/null || return 1
    for ref in quay.io registry:5000 registry.k8s.io; do
        name=mirror-$(echo "$ref" | tr -c 'a-z0-9\n' -)
        apply_pod "$name" "$ref/ferrovirt-test/busybox:mirror" "$node" false Never -- true >/dev/null || return 1
    done
    for ref in quay.io registry:5000 registry.k8s.io; do
        pod_succeeded "mirror-$(echo "$ref" | tr -c 'a-z0-9\n' -)" || { echo "image $ref/ferrovirt-test/busybox:mirror"; return 1; }
    done
}

# cluster.sh push-image DIR REF: an OCI image layout, pushed under one name,
# runs under another registry's name.
test_push_image() {
    local node=$1 layout
    layout=$(mktemp -d)
    "$TOOLS_BIN/crane" --insecure pull --format=oci 127.0.0.1:5000/library/busybox:latest "$layout" ||
        { rm -rf "$layout"; return 1; }
    "$CLUSTER" push-image "$layout" quay.io/ferrovirt-test/pushed:v1 || { rm -rf "$layout"; return 1; }
    rm -rf "$layout"
    apply_pod pushed registry:5000/ferrovirt-test/pushed:v1 "$node" false Never -- true >/dev/null || return 1
    pod_succeeded pushed
}

test_kvm_pod() {
    local node=$1 name=$2
    [[ -e /dev/kvm ]] || { echo "this machine has no /dev/kvm"; return 1; }
    apply_pod "$name" busybox "$node" true Never -- sh -c 'exec 3<>/dev/kvm && echo opened /dev/kvm' >/dev/null || return 1
    pod_succeeded "$name" || return 1
    k -n "$NS" logs "$name" | grep -q 'opened /dev/kvm' || { k -n "$NS" logs "$name"; return 1; }
}

ensure_web_service() {
    k -n "$NS" get pod web >/dev/null 2>&1 && k -n "$NS" get service web >/dev/null 2>&1 && return 0
    apply_pod web busybox "$CONTROL_NODE" false Always -- sh -c \
        'mkdir -p /www && echo ferrovirt-web >/www/index.html && exec httpd -f -p 8080 -h /www' >/dev/null || return 1
    k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: web, namespace: $NS}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
EOF
    pod_running web
}

# http_get_in_pod POD IP PORT: GET / with busybox nc (Debian's static busybox
# wget crashes here), expecting the web Pod's page.
http_get_in_pod() {
    k -n "$NS" exec "$1" -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 $2 $3" | grep -q ferrovirt-web
}

test_service_from_pod() {
    local client=$1 ip
    ensure_web_service || return 1
    ip=$(k -n "$NS" get service web -o jsonpath='{.spec.clusterIP}') || return 1
    poll 60 http_get_in_pod "$client" "$ip" 80 && return 0
    echo "GET http://$ip/ (Service web) from $client failed"
    service_diagnosis
    return 1
}

# What a failed Service check needs to be understood: where the Pods are, what the
# EndpointSlice says, whether the control node's kube-proxy is in sync and programmed it.
service_diagnosis() {
    k -n "$NS" get pods -o wide
    k -n "$NS" get endpointslices -l kubernetes.io/service-name=web -o wide
    echo "kube-proxy on the control node: $(curl -sS -m 3 http://127.0.0.1:10256/livez 2>&1)"
    echo "the host's nat rules for $NS/web:"
    iptables-save -t nat 2>&1 | grep -F "$NS/web"
    echo "bridge-nf-call-iptables: $(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>&1)"
}

# An image with the cluster's kubectl (a static Go binary) on busybox: kubectl
# in a Pod uses the in-cluster config, i.e. the `kubernetes` Service, the
# service-account token and the cluster CA, as every in-cluster client does.
KUBECTL_IMAGE=registry:5000/ferrovirt-test/kubectl:latest
ensure_kubectl_image() {
    "$TOOLS_BIN/crane" --insecure digest 127.0.0.1:5000/ferrovirt-test/kubectl:latest >/dev/null 2>&1 && return 0
    local root
    root=$(mktemp -d)
    "$TOOLS_BIN/crane" --insecure export 127.0.0.1:5000/library/busybox:latest - | tar -C "$root" -xf - || return 1
    cp "$KUBE_BIN/kubectl" "$root/bin/kubectl"
    "$CLUSTER" build-image "$root" "$KUBECTL_IMAGE" "" /bin/sh || { rm -rf "$root"; return 1; }
    rm -rf "$root"
}

test_apiserver_from_pod() { # NODE NAME
    local node=$1 name=$2
    ensure_kubectl_image || { echo "could not build $KUBECTL_IMAGE"; return 1; }
    k -n "$NS" delete pod "$name" --ignore-not-found --wait=true >/dev/null
    apply_pod "$name" "$KUBECTL_IMAGE" "$node" false Never -- kubectl get --raw /api >/dev/null || return 1
    pod_succeeded "$name" || return 1
    k -n "$NS" logs "$name" | grep -q '"kind":"APIVersions"' || { k -n "$NS" logs "$name"; return 1; }
}

test_pod_to_pod() { # CLIENT: reaches the web Pod's IP directly
    local client=$1 ip
    ip=$(k -n "$NS" get pod web -o jsonpath='{.status.podIP}') || return 1
    poll 30 http_get_in_pod "$client" "$ip" 8080 || { echo "GET http://$ip:8080/ (Pod web) from $client failed"; return 1; }
}

# The API server calls webhooks and aggregated APIs at their Pods' addresses
# (--enable-aggregator-routing): the host must reach Pods on every node.
test_host_reaches_pod() { # NODE NAME
    local node=$1 name=$2 ip
    apply_pod "$name" busybox "$node" false Always -- sh -c \
        'mkdir -p /www && echo ferrovirt-web >/www/index.html && exec httpd -f -p 8080 -h /www' >/dev/null || return 1
    pod_running "$name" || return 1
    ip=$(k -n "$NS" get pod "$name" -o jsonpath='{.status.podIP}') || return 1
    poll 30 curl -fsS -m 3 "http://$ip:8080/" | grep -q ferrovirt-web || { echo "GET http://$ip:8080/ from the host failed"; return 1; }
}

# An aggregated API (what virt-api serves as subresources.kubevirt.io): an
# APIService backed by openssl s_server in a Pod on NODE, which demands the
# API server's front-proxy client certificate (signed by the front-proxy CA).
test_aggregated_api() { # NODE
    local node=$1 tls rc=0
    "$TOOLS_BIN/crane" --insecure digest 127.0.0.1:5000/ferrovirt-test/openssl:latest >/dev/null 2>&1 ||
        "$CLUSTER" build-binary-image registry:5000/ferrovirt-test/openssl:latest /usr/bin/openssl >/dev/null 2>&1 ||
        { echo "could not build the openssl image (needs /usr/bin/openssl)"; return 1; }
    tls=$(mktemp -d)
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -keyout "$tls/tls.key" -out "$tls/tls.crt" -subj "/CN=agg-test.$NS.svc" 2>/dev/null || { rm -rf "$tls"; return 1; }
    cp "$STATE/pki/front-proxy-ca.crt" "$tls/"
    k -n "$NS" create configmap agg-tls --from-file="$tls" --dry-run=client -o yaml | k apply -f - >/dev/null
    rm -rf "$tls"
    k apply -f - >/dev/null <<YAML || return 1
apiVersion: v1
kind: Pod
metadata: {name: agg-test, namespace: $NS, labels: {app: agg-test}}
spec:
  nodeName: $node
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: registry:5000/ferrovirt-test/openssl:latest
    command: [sh, -c]
    args:
    - |
      mkdir -p /srv/apis/test.ferrovirt.io && cd /srv &&
      echo '{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"test.ferrovirt.io/v1","resources":[]}' >apis/test.ferrovirt.io/v1 &&
      exec openssl s_server -quiet -accept 8443 -WWW -cert /tls/tls.crt -key /tls/tls.key -CAfile /tls/front-proxy-ca.crt -Verify 1
    volumeMounts: [{name: tls, mountPath: /tls}]
  volumes: [{name: tls, configMap: {name: agg-tls}}]
---
apiVersion: v1
kind: Service
metadata: {name: agg-test, namespace: $NS}
spec:
  selector: {app: agg-test}
  ports: [{port: 443, targetPort: 8443}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.test.ferrovirt.io}
spec:
  group: test.ferrovirt.io
  version: v1
  service: {namespace: $NS, name: agg-test, port: 443}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 1000
  versionPriority: 15
YAML
    if ! k wait --for=condition=Available apiservice/v1.test.ferrovirt.io --timeout=90s >/dev/null; then
        k get apiservice v1.test.ferrovirt.io -o jsonpath='{.status.conditions[0].message}'
        rc=1
    elif ! k get --raw /apis/test.ferrovirt.io/v1 | grep -q '"groupVersion":"test.ferrovirt.io/v1"'; then
        echo "GET /apis/test.ferrovirt.io/v1 did not reach the Pod"
        rc=1
    fi
    # An unavailable APIService would disturb discovery for every client: remove it.
    k delete apiservice v1.test.ferrovirt.io --ignore-not-found >/dev/null
    return $rc
}

test_worker_ready() {
    [[ -n $WORKER ]] || { echo "FERROVIRT_TEST_WORKER is empty: no worker node to test"; return 1; }
    if ! k get node "$WORKER" >/dev/null 2>&1; then
        "$CLUSTER" add-node "$WORKER" >/dev/null 2>&1 || { echo "cluster.sh add-node $WORKER failed"; return 1; }
    fi
    k wait --for=condition=Ready "node/$WORKER" --timeout=180s
}

# Everything of the cluster, as seen from the host. Empty when it is down.
leftovers() {
    local out=""
    local pids
    pids=$(find /sys/fs/cgroup/pids/ferrovirt -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')
    [[ -n ${pids// /} ]] && out+="processes in /ferrovirt cgroups: $pids; "
    local procs
    procs=$(ps -eo pid=,comm= | awk '$2 ~ /^(etcd|kube-apiserver|kube-controller|kube-scheduler|kubelet|kube-proxy|containerd|containerd-shim|docker-registry|pause)$/ {print}' | tr '\n' ' ')
    [[ -n $procs ]] && out+="processes: $procs; "
    local cgs
    cgs=$(ls -d /sys/fs/cgroup/*/ferrovirt 2>/dev/null | tr '\n' ' ')
    [[ -n $cgs ]] && out+="cgroups: $cgs; "
    local mounts
    # Only the cluster's own paths: other work on this machine mounts things too.
    mounts=$(findmnt -rn -o TARGET,FSTYPE | awk '
        $1 ~ /^(\/var\/lib\/ferrovirt-cluster|\/var\/lib\/kubelet|\/var\/lib\/containerd|\/run\/containerd|\/etc\/containerd|\/etc\/cni|\/var\/log\/pods|\/var\/log\/containers|\/run\/netns\/cni-)/ ||
        ($2 == "overlay" && $1 ~ /containerd|kubelet/) {print $1}' | tr '\n' ' ')
    [[ -n $mounts ]] && out+="mounts: $mounts; "
    local links
    links=$(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^(fvbr0|fvcni0|fvv[0-9]+)$" | tr '\n' ' ')
    [[ -n $links ]] && out+="links: $links; "
    local netns
    netns=$(ip netns list 2>/dev/null | grep -E '^(cni-|fv)' | tr '\n' ' ')
    [[ -n $netns ]] && out+="netns: $netns; "
    local ipt chains
    for ipt in iptables ip6tables; do
        for t in filter nat mangle; do
            chains=$($ipt -w -t $t -S 2>/dev/null | grep -E '^-N (KUBE-|CNI-|FERROVIRT-)' | awk '{print $2}' | tr '\n' ' ')
            [[ -n $chains ]] && out+="$ipt $t chains: $chains; "
        done
    done
    echo -n "$out"
}

test_down_leaves_nothing() {
    local out left
    out=$("$CLUSTER" down 2>&1) || { echo "cluster.sh down failed: $out"; return 1; }
    left=$(leftovers)
    [[ -z $left ]] || { echo "left behind: $left"; return 1; }
}

test_up_again() {
    local out start=$SECONDS
    out=$("$CLUSTER" up 2>&1) || { echo "cluster.sh up failed: $(echo "$out" | tail -n 5)"; return 1; }
    echo "$((SECONDS - start))" >"$UP_SECONDS_FILE"
    nodes_ready >/dev/null || return 1
    # The Pods from before come back on the restarted nodes.
    pod_running busybox || return 1
}

# ---------------------------------------------------------------------------
test_up() {
    local out start=$SECONDS
    out=$("$CLUSTER" up 2>&1) || { echo "cluster.sh up failed: $(echo "$out" | tail -n 5)"; return 1; }
    echo "$((SECONDS - start))" >"$UP_SECONDS_FILE"
}

main() {
    UP_SECONDS_FILE=$(mktemp)
    check "cluster.sh up" test_up
    [[ -s $UP_SECONDS_FILE ]] && echo "# cluster.sh up took $(cat "$UP_SECONDS_FILE")s"
    rm -f "$UP_SECONDS_FILE"
    check "prerequisites" check_prerequisites
    ((failed == 0)) || cluster_down_reason="the cluster is not up (see the first failures)"
    check "nodes Ready" nodes_ready
    k create namespace "$NS" >/dev/null 2>&1
    k delete apiservice v1.test.ferrovirt.io --ignore-not-found >/dev/null 2>&1
    k -n "$NS" delete pod --all --wait=true --timeout=60s >/dev/null 2>&1
    k -n "$NS" wait --for=jsonpath='{.metadata.name}'=default serviceaccount/default --timeout=30s >/dev/null 2>&1
    check "busybox Pod from the local registry Running" test_busybox_pod "$CONTROL_NODE" busybox
    check "quay.io, registry:5000 and registry.k8s.io images pull from the local registry" test_mirrors "$CONTROL_NODE"
    check "cluster.sh push-image: a pushed OCI layout runs" test_push_image "$CONTROL_NODE"
    check "privileged Pod opens /dev/kvm" test_kvm_pod "$CONTROL_NODE" kvm
    check "Pod reaches a Service ClusterIP" test_service_from_pod busybox
    check "Pod reaches the API server through the kubernetes Service" test_apiserver_from_pod "$CONTROL_NODE" api-client
    check "worker node $WORKER Ready" test_worker_ready
    check "busybox Pod Running on worker $WORKER" test_busybox_pod "$WORKER" busybox-worker
    check "Pod on the worker reaches a Service ClusterIP on the control node" test_service_from_pod busybox-worker
    check "Pod on the worker reaches the API server" test_apiserver_from_pod "$WORKER" api-client-worker
    check "Pod on the worker reaches a Pod on the control node" test_pod_to_pod busybox-worker
    check "privileged Pod on the worker opens /dev/kvm" test_kvm_pod "$WORKER" kvm-worker
    check "the API server's host reaches a Pod on the worker (webhook path)" test_host_reaches_pod "$WORKER" web-worker
    check "an aggregated APIService served by a Pod on the worker is Available and answers" test_aggregated_api "$WORKER"
    if [[ ${FERROVIRT_TEST_DOWN:-1} == 1 ]]; then
        check "down leaves no process, mount, netns, link or iptables chain" test_down_leaves_nothing
        UP_SECONDS_FILE=$(mktemp)
        check "up after down: nodes Ready and Pods Running again" test_up_again
        [[ -s $UP_SECONDS_FILE ]] && echo "# cluster.sh up after down took $(cat "$UP_SECONDS_FILE")s"
        rm -f "$UP_SECONDS_FILE"
    fi
    echo "$passed passed, $failed failed"
    ((failed == 0))
}

main "$@"
