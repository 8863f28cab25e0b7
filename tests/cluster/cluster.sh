#!/usr/bin/env bash
# Ferrovirt's local cluster: a real Kubernetes on one machine, with one command.
# See tests/cluster/README.md. Runs as root; all state in /var/lib/ferrovirt-cluster.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/lib/common.sh"
source "$HERE/lib/build.sh"
source "$HERE/lib/packages.sh"
source "$HERE/lib/pki.sh"
source "$HERE/lib/proc.sh"
source "$HERE/lib/network.sh"
source "$HERE/lib/controlplane.sh"
source "$HERE/lib/nodes.sh"
source "$HERE/lib/kvm-node.sh"
source "$HERE/lib/images.sh"
source "$HERE/lib/binary-images.sh"

usage() {
    cat <<EOF
usage: $0 COMMAND [ARGS]

  up                     build what is missing, start the cluster (idempotent)
  down                   stop everything; keeps state (images, etcd) for the next up
  reset                  down, then delete all state under $STATE
  status                 what runs, and the nodes
  add-node NAME          start a worker node in its own network namespace
  add-node --kvm NAME    start a worker node that is a VM with real (nested) KVM, an L1 under
                         QEMU TCG -cpu max (lib/kvm-node.sh); tainted ferrovirt.io/nested-kvm
  remove-node NAME       stop a worker node and forget it
  push-image DIR REF     push an OCI image layout to the local registry as REF
  build-image ROOTFS REF [ENTRYPOINT [ARG...]]
                         build a one-layer image of ROOTFS and push it as REF
  build-binary-image REF BINARY...
                         image of BINARY(s) and their shared libraries (entrypoint: the first)
  push-guest-images      push guest-images/build.sh's containerDisk and kernel images, and the Debian cloud image
                         (as registry:5000/ferrovirt/tiny-container-disk:latest and :devel,
                         quay.io/kubevirt/cirros-container-disk-demo:latest and :devel,
                         quay.io/kubevirt/cirros-custom-container-disk-demo:latest and :devel,
                         quay.io/kubevirt/ferrovirt-kernel-boot:latest,
                         quay.io/kubevirt/alpine-container-disk-demo:latest,
                         quay.io/kubevirt/fedora-with-test-tooling-container-disk:latest and :devel,
                         quay.io/kubevirt/alpine-with-test-tooling-container-disk:latest and :devel)
  kubectl ARGS...        the cluster's kubectl (v${KUBE_VERSION#v}) as cluster-admin
  kubeconfig             print the admin kubeconfig's path
  env                    print shell exports: KUBECONFIG and PATH to kubectl
  build                  only build Kubernetes and crane

References name any registry (quay.io/..., registry:5000/..., docker.io/...):
all resolve to the local registry at $NODE_NET.1:$REGISTRY_PORT (alias 127.0.0.1:$REGISTRY_PORT).
EOF
}

require_root() { ((EUID == 0)) || die "run as root"; }

# One command that changes the cluster at a time (fd 9; start_daemon closes it
# for the daemons, so they do not hold it).
lock_cluster() {
    exec 9>/var/lock/ferrovirt-cluster.lock
    if ! flock -n 9; then
        log "another cluster.sh command is running; waiting for it"
        flock 9
    fi
}

cmd_up() {
    require_root
    local started=$SECONDS
    mkdir -p "$STATE" "$LOGS" "$RUN"
    install_packages
    build_kubernetes
    build_crane
    setup_host_network
    make_control_plane_pki
    start_control_plane
    start_registry
    ensure_pause_image
    ensure_busybox_image
    ensure_vm_killer_image
    push_guest_images
    push_debian_image
    [[ -e "$(node_dir "$CONTROL_NODE")/node.env" ]] || register_node "$CONTROL_NODE" 0 0
    local n
    for n in $(node_names); do start_node "$n"; done
    for n in $(node_names); do wait_node_ready "$n" "$(node_ready_timeout "$n")"; done
    kubectl_admin get nodes -o wide
    log "cluster up in $((SECONDS - started))s; export KUBECONFIG=$ADMIN_KUBECONFIG (kubectl: $KUBE_BIN/kubectl)"
}

cmd_down() {
    require_root
    local started=$SECONDS
    # Nodes first (Pods, kubelet, containerd), then the control plane.
    local n
    for n in $(node_names); do cg_destroy "$n"; done
    cg_destroy ""
    rm -f "$RUN"/*.pid
    for n in $(node_names); do rm -f "$(node_dir "$n")/holder.ready"; done
    teardown_host_network
    remove_created_mountpoints
    log "cluster down in $((SECONDS - started))s"
}

cmd_status() {
    local name rc=0 pid
    echo "state: $STATE   logs: $LOGS"
    for f in "$RUN"/*.pid; do
        [[ -e $f ]] || continue
        name=$(basename "$f" .pid)
        pid=$(cat "$f")
        if daemon_running "$name"; then
            printf '  %-28s running (pid %s)\n' "$name" "$pid"
        else
            printf '  %-28s STOPPED\n' "$name"
            rc=1
        fi
    done
    if [[ -z "$(ls "$RUN"/*.pid 2>/dev/null)" ]]; then
        echo "  nothing runs"
        return 1
    fi
    echo
    kubectl_admin get nodes -o wide 2>&1 || rc=1
    return $rc
}

cmd=${1:-help}
shift || true
case "$cmd" in
up | down | reset | add-node | remove-node) require_root && lock_cluster ;;
esac
case "$cmd" in
up) cmd_up ;;
down) cmd_down ;;
reset)
    cmd_down
    rm -rf "$STATE"
    log "removed $STATE"
    ;;
status) cmd_status ;;
add-node)
    kvm=0
    if [[ ${1:-} == --kvm ]]; then
        kvm=1
        shift
    fi
    (($# == 1)) || die "usage: $0 add-node [--kvm] NAME"
    require_root
    daemon_running kube-apiserver || die "the cluster is not up"
    add_node "$1" "$kvm"
    # A KVM node boots under software emulation: minutes, not seconds.
    wait_node_ready "$1" $((kvm ? 900 : 180))
    kubectl_admin get nodes -o wide
    ;;
remove-node)
    (($# == 1)) || die "usage: $0 remove-node NAME"
    require_root
    remove_node "$1"
    ;;
push-image)
    (($# == 2)) || die "usage: $0 push-image DIR REF"
    build_crane
    push_image "$1" "$2"
    ;;
build-image)
    (($# >= 2)) || die "usage: $0 build-image ROOTFS REF [ENTRYPOINT [ARG...]]"
    build_crane
    build_image "$@"
    ;;
build-binary-image)
    (($# >= 2)) || die "usage: $0 build-binary-image REF BINARY..."
    build_crane
    build_binary_image "$@"
    ;;
push-guest-images)
    build_crane
    ensure_vm_killer_image
    push_guest_images --required
    push_debian_image
    ;;
kubectl) kubectl_admin "$@" ;;
kubeconfig) echo "$ADMIN_KUBECONFIG" ;;
env)
    echo "export KUBECONFIG=$ADMIN_KUBECONFIG"
    echo "export PATH=$KUBE_BIN:$TOOLS_BIN:\$PATH"
    ;;
build)
    build_kubernetes
    build_crane
    ;;
help | -h | --help) usage ;;
*)
    usage >&2
    exit 2
    ;;
esac
