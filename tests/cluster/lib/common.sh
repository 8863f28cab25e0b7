# shellcheck shell=bash
# Sourced by cluster.sh and the other lib/ files, which use these settings.
# shellcheck disable=SC2034
# Shared settings and helpers for the local cluster scripts. Sourced, never run.

KUBE_VERSION="${FERROVIRT_KUBE_VERSION:-v1.36.3}"
CRANE_VERSION="${FERROVIRT_CRANE_VERSION:-v0.22.1}"

CACHE_DIR="${FERROVIRT_CACHE_DIR:-/var/cache/ferrovirt}"
KUBE_CACHE="$CACHE_DIR/kubernetes/$KUBE_VERSION"
KUBE_BIN="$KUBE_CACHE/bin"
TOOLS_BIN="$CACHE_DIR/bin"

STATE="${FERROVIRT_CLUSTER_DIR:-/var/lib/ferrovirt-cluster}"
LOGS="$STATE/logs"
RUN="$STATE/run"
PKI="$STATE/pki"
KCFG="$STATE/kubeconfig"
ADMIN_KUBECONFIG="$KCFG/admin.kubeconfig"

# Networks. Everything lives on this machine: loopback, the host bridge and
# the network namespaces the script creates.
BRIDGE=fvbr0                 # host bridge the worker namespaces plug into
BRIDGE_CIDR=10.231.0.1/24    # host side of the node network
NODE_NET=10.231.0            # node n (control: 0) has address $NODE_NET.<n+1>
POD_CIDR_PREFIX=10.244       # node k gets 10.244.k.0/24
CNI_BRIDGE=fvcni0            # per-node bridge the Pods plug into
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
CLUSTER_DOMAIN=cluster.local
APISERVER_PORT=6443
REGISTRY_PORT=5000
CONTROL_NODE=ferrovirt-control   # name of the node that runs the control plane

GO=/usr/local/go/bin/go
export HOME=${HOME:-/root}   # Go's module and build caches live under it
export PATH="$KUBE_BIN:$TOOLS_BIN:/usr/local/go/bin:/usr/local/sbin:/usr/sbin:/sbin:$PATH"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

kubectl_admin() { "$KUBE_BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# write_file PATH: stdin becomes PATH's content, atomically (a rename) and only if it
# changed. Running daemons watch their config files: kube-proxy exits when it reads a
# different content (a half-written file is one), and containerd drops its CNI
# configuration on a file it cannot parse, until the next change.
write_file() {
    local path=$1
    cat >"$path.new" || { rm -f "$path.new"; return 1; }
    if cmp -s "$path.new" "$path"; then rm -f "$path.new"; else mv -f "$path.new" "$path"; fi
}

# wait_for DESCRIPTION SECONDS COMMAND...: run COMMAND until it succeeds or the
# deadline passes. Returns non-zero on time-out.
wait_for() {
    local what=$1 secs=$2; shift 2
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            log "timed out after ${secs}s waiting for $what"
            return 1
        fi
        sleep 0.5
    done
}
