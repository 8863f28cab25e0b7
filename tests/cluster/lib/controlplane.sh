# shellcheck shell=bash
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the local
# OCI registry, as host processes. Sourced by cluster.sh.

ETCD_CLIENT_PORT=23790   # not etcd's default, so a developer's own etcd can run too
ETCD_PEER_PORT=23800
API_ADDRESS=$NODE_NET.1
API_URL=https://$API_ADDRESS:$APISERVER_PORT
REGISTRY_ADDRESS=$NODE_NET.1:$REGISTRY_PORT

start_etcd() {
    mkdir -p "$STATE/etcd"
    chmod 700 "$STATE/etcd"
    start_daemon etcd control-plane /usr/bin/etcd \
        --name ferrovirt \
        --data-dir "$STATE/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "ferrovirt=http://127.0.0.1:$ETCD_PEER_PORT" \
        --snapshot-count 10000 \
        --logger zap --log-outputs stderr
    wait_for "etcd" 60 curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health" || die "etcd did not start (log: $LOGS/etcd.log)"
}

start_apiserver() {
    start_daemon kube-apiserver control-plane "$KUBE_BIN/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --bind-address "$API_ADDRESS" \
        --advertise-address "$API_ADDRESS" \
        --secure-port "$APISERVER_PORT" \
        --service-cluster-ip-range "$SERVICE_CIDR" \
        --client-ca-file "$PKI/ca.crt" \
        --tls-cert-file "$PKI/apiserver.crt" \
        --tls-private-key-file "$PKI/apiserver.key" \
        --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority "$PKI/ca.crt" \
        --kubelet-preferred-address-types InternalIP \
        --service-account-key-file "$PKI/sa.pub" \
        --service-account-signing-key-file "$PKI/sa.key" \
        --service-account-issuer "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
        --authorization-mode Node,RBAC \
        --enable-admission-plugins NodeRestriction \
        --allow-privileged=true \
        --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
        --requestheader-allowed-names front-proxy-client \
        --requestheader-username-headers X-Remote-User \
        --requestheader-group-headers X-Remote-Group \
        --requestheader-extra-headers-prefix X-Remote-Extra- \
        --proxy-client-cert-file "$PKI/front-proxy-client.crt" \
        --proxy-client-key-file "$PKI/front-proxy-client.key" \
        --enable-aggregator-routing=true \
        --profiling=false
    wait_for "kube-apiserver" 120 curl -fsS --cacert "$PKI/ca.crt" "$API_URL/readyz" ||
        die "kube-apiserver did not become ready (log: $LOGS/kube-apiserver.log)"
}

start_controller_manager() {
    start_daemon kube-controller-manager control-plane "$KUBE_BIN/kube-controller-manager" \
        --kubeconfig "$KCFG/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$KCFG/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$KCFG/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 \
        --leader-elect=false \
        --use-service-account-credentials=true \
        --service-account-private-key-file "$PKI/sa.key" \
        --root-ca-file "$PKI/ca.crt" \
        --cluster-signing-cert-file "$PKI/ca.crt" \
        --cluster-signing-key-file "$PKI/ca.key" \
        --service-cluster-ip-range "$SERVICE_CIDR" \
        --allocate-node-cidrs=false \
        --controllers '*,bootstrapsigner,tokencleaner' \
        --profiling=false
}

start_scheduler() {
    start_daemon kube-scheduler control-plane "$KUBE_BIN/kube-scheduler" \
        --kubeconfig "$KCFG/scheduler.kubeconfig" \
        --authentication-kubeconfig "$KCFG/scheduler.kubeconfig" \
        --authorization-kubeconfig "$KCFG/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 \
        --leader-elect=false \
        --profiling=false
}

# The registry listens on the host bridge, so nodes in their own network
# namespaces reach it too; socat gives it a 127.0.0.1:5000 alias, which crane
# and other clients treat as plain HTTP without flags.
start_registry() {
    mkdir -p "$STATE/registry/data"
    cat >"$STATE/registry/config.yml" <<EOF
version: 0.1
log:
  level: warn
  fields:
    service: registry
storage:
  filesystem:
    rootdirectory: $STATE/registry/data
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDRESS
  headers:
    X-Content-Type-Options: [nosniff]
EOF
    start_daemon registry control-plane /usr/bin/docker-registry serve "$STATE/registry/config.yml"
    start_daemon registry-loopback control-plane /usr/bin/socat \
        "TCP-LISTEN:$REGISTRY_PORT,bind=127.0.0.1,reuseaddr,fork" "TCP:$REGISTRY_ADDRESS"
    wait_for "the registry" 30 curl -fsS "http://$REGISTRY_ADDRESS/v2/" || die "the registry did not start (log: $LOGS/registry.log)"
    wait_for "the registry on 127.0.0.1" 10 curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" ||
        die "the registry's loopback alias did not start (log: $LOGS/registry-loopback.log)"
}

start_control_plane() {
    start_etcd
    start_apiserver
    start_controller_manager
    start_scheduler
}
