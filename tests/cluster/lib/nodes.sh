# shellcheck shell=bash
# Nodes: each is a holder process owning a mount namespace (and, for worker
# nodes, a network namespace), with containerd, kubelet and kube-proxy inside.
# Sourced by cluster.sh.
#
# The control node ($CONTROL_NODE, index 0) shares the host's network
# namespace, where the API server and the registry listen. Worker node n
# (n >= 1) has its own netns with eth0 = $NODE_NET.<n+1>, plugged into the host
# bridge. Node n's Pods get $POD_CIDR_PREFIX.<n>.0/24.

PAUSE_IMAGE=registry.k8s.io/pause:3.10
# Host directories the nodes mount over; created if missing, removed by `down`.
NODE_MOUNTPOINTS=(/var/lib/kubelet /var/lib/containerd /etc/containerd /etc/cni/net.d /var/log/pods /var/log/containers)
# Registries whose images come from the local registry (never from outside).
MIRRORED_REGISTRIES=(_default quay.io registry.k8s.io docker.io registry:5000 "localhost:$REGISTRY_PORT"
    "127.0.0.1:$REGISTRY_PORT" "$REGISTRY_ADDRESS" ghcr.io gcr.io k8s.gcr.io)

node_dir() { echo "$STATE/nodes/$1"; }
node_names() {
    local d
    for d in "$STATE"/nodes/*/node.env; do [[ -e $d ]] && basename "$(dirname "$d")"; done
    return 0
}
# load_node NAME: sets NODE_INDEX, NODE_IP, NODE_OWN_NETNS, NODE_KVM (1: a KVM node, an L1 VM;
# lib/kvm-node.sh).
load_node() {
    [[ -e "$(node_dir "$1")/node.env" ]] || die "no node named $1"
    NODE_KVM=0
    # shellcheck disable=SC1090
    source "$(node_dir "$1")/node.env"
}
holder_pid() { cat "$(node_dir "$1")/holder.ready" 2>/dev/null || true; }
holder_running() { daemon_running "$1-holder" && [[ "$(holder_pid "$1")" == "$(daemon_pid "$1-holder")" ]]; }

# in_node NAME COMMAND...: run COMMAND inside node NAME's namespaces.
in_node() {
    local name=$1 pid
    shift
    load_node "$name"
    ((NODE_KVM == 0)) || die "node $name is a KVM node (a VM): it has no namespaces on this host"
    pid=$(holder_pid "$name")
    if ((NODE_OWN_NETNS)); then
        nsenter -t "$pid" -m -n -- "$@"
    else
        nsenter -t "$pid" -m -- "$@"
    fi
}

prepare_mountpoints() {
    local p
    touch "$STATE/created-mountpoints"
    for p in "${NODE_MOUNTPOINTS[@]}"; do
        # Record every directory made, parents too, so `down` removes them all.
        mkdir -pv "$p" | sed -n "s/^mkdir: created directory '\(.*\)'$/\1/p" >>"$STATE/created-mountpoints"
    done
}

remove_created_mountpoints() {
    [[ -e "$STATE/created-mountpoints" ]] || return 0
    local p
    sort -ru "$STATE/created-mountpoints" | while read -r p; do
        if [[ -n $p ]]; then rmdir "$p" 2>/dev/null || true; fi
    done
    rm -f "$STATE/created-mountpoints"
}

# register_node NAME INDEX OWN_NETNS [KVM]
register_node() {
    local name=$1 index=$2 own=$3 kvm=${4:-0} dir
    dir=$(node_dir "$name")
    mkdir -p "$dir"
    write_file "$dir/node.env" <<EOF
NODE_INDEX=$index
NODE_IP=$NODE_NET.$((index + 1))
NODE_OWN_NETNS=$own
NODE_KVM=$kvm
EOF
}

write_node_config() {
    local name=$1 dir
    dir=$(node_dir "$name")
    load_node "$name"
    mkdir -p "$dir/etc-containerd/certs.d" "$dir/cni" "$dir/kubelet" "$dir/containerd" "$dir/log/pods" "$dir/log/containers"

    write_file "$dir/etc-containerd/config.toml" <<EOF
# Written by tests/cluster/lib/nodes.sh for node $name.
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  enable_selinux = false
  # These machines lack CAP_SYS_RESOURCE, so no process may lower its OOM score
  # below 0 (the kubelet asks -998 for sandboxes): clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
EOF
    # Every registry resolves to the local one, and only to it: no fallback upstream.
    local reg
    for reg in "${MIRRORED_REGISTRIES[@]}"; do
        mkdir -p "$dir/etc-containerd/certs.d/$reg"
        write_file "$dir/etc-containerd/certs.d/$reg/hosts.toml" <<EOF
server = "http://$REGISTRY_ADDRESS"

[host."http://$REGISTRY_ADDRESS"]
  capabilities = ["pull", "resolve"]
EOF
    done

    local subnet=$POD_CIDR_PREFIX.$NODE_INDEX
    write_file "$dir/cni/10-ferrovirt.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "ferrovirt",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam",
        "ranges": [[{"subnet": "$subnet.0/24", "gateway": "$subnet.1"}]],
        "routes": [
          {"dst": "$POD_CIDR", "gw": "$subnet.1"},
          {"dst": "$SERVICE_CIDR", "gw": "$subnet.1"},
          {"dst": "$NODE_CIDR", "gw": "$subnet.1"}
        ]
      }
    }
  ]
}
EOF
    # No CoreDNS: nothing here needs names. Pods get a resolver address on
    # their own loopback, so no lookup ever leaves the machine.
    write_file "$dir/resolv.conf" <<EOF
nameserver 127.0.0.1
options ndots:1
EOF
    write_file "$dir/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-$name-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-$name-serving.key
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: /$CG_ROOT/$name
cgroupsPerQOS: true
failSwapOn: false
resolvConf: $dir/resolv.conf
clusterDomain: $CLUSTER_DOMAIN
hairpinMode: none
serializeImagePulls: false
# The nodes share the host's disk with builds and caches, and ext4 keeps a reserve for root
# that the kubelet counts as used: percentages would evict Pods (virt-handler among them) and
# delete images while gigabytes are free. hack/preflight.sh asks for 10 GiB free before a run.
imageMinimumGCAge: 10m
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  imagefs.available: 1Gi
  nodefs.inodesFree: 2%
maxPods: 110
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
nodeStatusReportFrequency: 1m
syncFrequency: 10s
fileCheckFrequency: 10s
shutdownGracePeriod: 0s
EOF
    write_file "$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $KCFG/kube-proxy.kubeconfig
mode: iptables
oomScoreAdj: 0
hostnameOverride: $name
bindAddress: $NODE_IP
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables:
  localhostNodePorts: false
  syncPeriod: 30s
  minSyncPeriod: 1s
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

start_node_holder() {
    local name=$1 dir
    dir=$(node_dir "$name")
    load_node "$name"
    holder_running "$name" && return 0
    # A node whose holder died has lost its mounts and netns: restart it whole.
    cg_destroy "$name"
    prepare_mountpoints
    rm -f "$dir/holder.ready"
    local unshare=(unshare --mount --propagation slave)
    ((NODE_OWN_NETNS)) && unshare+=(--net)
    start_daemon "$name-holder" "$name/system" "${unshare[@]}" bash "$HERE/lib/node-holder.sh" "$dir" "$NODE_OWN_NETNS"
    wait_for "node $name's namespaces" 20 test -s "$dir/holder.ready" ||
        die "node $name's holder did not start (log: $LOGS/$name-holder.log)"
    ((NODE_OWN_NETNS)) && plug_node_network "$name"
    return 0
}

# Connects worker node NAME's netns to the host bridge.
plug_node_network() {
    local name=$1 pid veth
    pid=$(holder_pid "$name")
    load_node "$name"
    veth=fvv$NODE_INDEX
    ip link del "$veth" 2>/dev/null || true
    ip link add "$veth" type veth peer name eth0 netns "$pid"
    ip link set "$veth" master "$BRIDGE" up
    nsenter -t "$pid" -n ip addr add "$NODE_IP/24" dev eth0
    nsenter -t "$pid" -n ip link set eth0 up
    nsenter -t "$pid" -n ip route add "$POD_CIDR" via "$NODE_NET.1"
    nsenter -t "$pid" -n ip route add "$SERVICE_CIDR" via "$NODE_NET.1"
    nsenter -t "$pid" -n sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward
        [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] && echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables; true'
    ip route replace "$POD_CIDR_PREFIX.$NODE_INDEX.0/24" via "$NODE_IP"
}

start_node() {
    local name=$1 dir
    dir=$(node_dir "$name")
    load_node "$name"
    if ((NODE_KVM)); then
        start_kvm_node "$name"
        return
    fi
    make_node_pki "$name" "$NODE_IP"
    write_node_config "$name"
    start_node_holder "$name"
    local pid
    pid=$(holder_pid "$name")
    local enter=(nsenter -t "$pid" -m)
    ((NODE_OWN_NETNS)) && enter+=(-n)
    if ! daemon_running "$name-containerd"; then
        local log=$LOGS/$name-containerd.log offset
        offset=$(($(stat -c %s "$log" 2>/dev/null || echo 0) + 1))
        start_daemon "$name-containerd" "$name/system" "${enter[@]}" -- /usr/bin/containerd --config /etc/containerd/config.toml
        # The socket comes first; the CRI service answers "server is not initialized
        # yet" until it has recovered its state (seconds under load), and a kubelet
        # started before that exits at once. containerd logs this line just before.
        wait_for "containerd's CRI service on $name" 120 containerd_cri_started "$log" "$offset" ||
            die "containerd on $name did not start (log: $log)"
    fi
    # A restarted kubelet must renew its lease before its node counts as Ready again.
    daemon_running "$name-kubelet" || date +%s >"$dir/kubelet.started"
    start_kubelet "$name"
    local proxy=("$name-kube-proxy" "$name/system" "${enter[@]}" -- "$KUBE_BIN/kube-proxy" --config "$dir/kube-proxy.yaml")
    start_daemon "${proxy[@]}"
    # A kube-proxy that stopped syncing leaves Services half-programmed on its node (as seen
    # once after an hour of tests): one whose rules are not in sync is restarted.
    if ! wait_for "kube-proxy on $name in sync" 60 kube_proxy_live "$name"; then
        log "kube-proxy on $name: not in sync after 60s, restarting it"
        stop_daemon "$name-kube-proxy"
        start_daemon "${proxy[@]}"
        wait_for "kube-proxy on $name in sync" 60 kube_proxy_live "$name" ||
            die "kube-proxy on $name does not sync its rules (log: $LOGS/$name-kube-proxy.log)"
    fi
}

# kube_proxy_live NAME: node NAME's kube-proxy runs and says its rules are in sync.
kube_proxy_live() {
    local name=$1 enter=()
    daemon_running "$name-kube-proxy" || return 1
    load_node "$name"
    ((NODE_OWN_NETNS)) && enter=(nsenter -t "$(holder_pid "$name")" -n)
    "${enter[@]}" curl -fsS -m 3 http://127.0.0.1:10256/livez | grep -q '"healthy":true'
}

# containerd_cri_started LOG OFFSET: containerd's log, from byte OFFSET on, says
# its CRI service has started serving.
containerd_cri_started() {
    tail -c +"$2" "$1" 2>/dev/null | grep -q 'Start streaming server'
}

# start_kubelet NAME: starts the node's kubelet (no-op if it runs).
start_kubelet() {
    local name=$1 dir pid
    dir=$(node_dir "$name")
    load_node "$name"
    pid=$(holder_pid "$name")
    local enter=(nsenter -t "$pid" -m)
    ((NODE_OWN_NETNS)) && enter+=(-n)
    # A kubelet started before its configuration changed is restarted with the new one (its
    # Pods keep running).
    if daemon_running "$name-kubelet" && [[ $dir/kubelet-config.yaml -nt $RUN/$name-kubelet.pid ]]; then
        log "kubelet on $name: its configuration changed, restarting it"
        stop_daemon "$name-kubelet"
    fi
    start_daemon "$name-kubelet" "$name/system" "${enter[@]}" -- "$KUBE_BIN/kubelet" \
        --config "$dir/kubelet-config.yaml" \
        --kubeconfig "$KCFG/kubelet-$name.kubeconfig" \
        --hostname-override "$name" \
        --node-ip "$NODE_IP" \
        --oom-score-adj 0
}

# node_ready NAME [SINCE]: Ready, and (with SINCE, epoch seconds) its kubelet
# renewed the node's lease since then, so a Ready left over from before a
# restart does not count.
node_ready() {
    local name=$1 since=${2:-0} ready renew
    ready=$(kubectl_admin get node "$name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)
    [[ $ready == True ]] || return 1
    ((since == 0)) && return 0
    renew=$(kubectl_admin -n kube-node-lease get lease "$name" -o jsonpath='{.spec.renewTime}' 2>/dev/null)
    [[ -n $renew ]] && (($(date -d "$renew" +%s) >= since))
}

# node_ready_timeout NAME: how long `up` waits for NAME (a KVM node boots under emulation).
node_ready_timeout() {
    load_node "$1"
    if ((NODE_KVM)); then echo 900; else echo 180; fi
}

# wait_node_ready NAME SECONDS: Ready, with a lease renewed since its kubelet started.
# A kubelet that exits on its own while we wait (it does when its runtime or the
# API server is not answering yet) is started again, up to three times.
wait_node_ready() {
    local since
    since=$(cat "$(node_dir "$1")/kubelet.started" 2>/dev/null || echo 0)
    load_node "$1"
    if ((NODE_KVM)); then
        wait_kvm_node_ready "$1" "$since" "${2:-120}"
        return
    fi
    KUBELET_RESTARTS=0
    # wait_for silences its command; fd 4 keeps the restart notes visible.
    wait_for "node $1 Ready" "${2:-120}" node_ready_or_restart "$1" "$since" 4>&2 ||
        die "node $1 is not Ready (logs: $LOGS/$1-kubelet.log, $LOGS/$1-containerd.log)"
}

node_ready_or_restart() {
    node_ready "$1" "$2" && return 0
    if ! daemon_running "$1-kubelet" && ((KUBELET_RESTARTS < 3)); then
        KUBELET_RESTARTS=$((KUBELET_RESTARTS + 1))
        log "the kubelet of $1 exited ($(tail -n 1 "$LOGS/$1-kubelet.log" | cut -c1-200)); starting it again" 2>&4
        start_kubelet "$1"
    fi
    return 1
}

# add_node NAME [KVM]: registers a worker node (next free index; KVM 1: a KVM node, see
# lib/kvm-node.sh) and starts it.
add_node() {
    local name=$1 kvm=${2:-0}
    [[ $name =~ ^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$ ]] || die "bad node name: $name"
    if [[ ! -e "$(node_dir "$name")/node.env" ]]; then
        local index=1 n
        while :; do
            local used=0
            for n in $(node_names); do
                load_node "$n"
                ((NODE_INDEX == index)) && used=1
            done
            ((used)) || break
            index=$((index + 1))
        done
        ((index < 250)) || die "too many nodes"
        register_node "$name" "$index" 1 "$kvm"
    fi
    load_node "$name"
    ((NODE_KVM == kvm)) || die "node $name exists with another kind (KVM node: $NODE_KVM); remove-node it first"
    start_node "$name"
}

# remove_node NAME: stops a worker node, deletes its Node object and its state.
remove_node() {
    local name=$1
    [[ $name != "$CONTROL_NODE" ]] || die "the control node cannot be removed; use down"
    load_node "$name"
    cg_destroy "$name"
    ip link del "fvv$NODE_INDEX" 2>/dev/null || true
    remove_kvm_node_network "$NODE_INDEX"
    ip route del "$POD_CIDR_PREFIX.$NODE_INDEX.0/24" 2>/dev/null || true
    rm -f "$RUN/$name-"*.pid
    kubectl_admin delete node "$name" --ignore-not-found >/dev/null 2>&1 || true
    rm -rf "$(node_dir "$name")"
    # Its serving certificate names its address: a node added again under this
    # name may get another one.
    rm -f "$PKI/kubelet-$name".* "$PKI/kubelet-$name-serving".* "$KCFG/kubelet-$name.kubeconfig"
}
