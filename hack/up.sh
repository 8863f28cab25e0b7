#!/usr/bin/env bash
# Brings up the local cluster with Ferrovirt installed and a VM running:
#   1. installs the Debian packages, builds the guest images (cached in /var/cache/ferrovirt);
#   2. starts the local Kubernetes cluster (tests/cluster/cluster.sh up; builds Kubernetes once);
#   3. builds and pushes Ferrovirt's images and the containerDisks (hack/images.sh);
#   4. installs Ferrovirt (CRDs, RBAC, virt-controller, virt-handler) and waits for it;
#   5. creates examples/vm-cirros.yaml and waits until its VMI is Running.
# Usage: hack/up.sh                (as root, from anywhere)
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
log() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

log "packages and guest images"
hack/install-deps.sh
guest-images/build.sh

log "local cluster"
tests/cluster/cluster.sh up
export KUBECONFIG
KUBECONFIG=$(tests/cluster/cluster.sh kubeconfig)
kubectl() { tests/cluster/cluster.sh kubectl "$@"; }

log "images"
hack/images.sh devel

log "installing Ferrovirt"
cargo run --release --locked -q -p operator --bin ferrovirt-manifests |
  kubectl apply --server-side --force-conflicts -f -
kubectl wait --for condition=Established --timeout=60s crd --all >/dev/null
kubectl -n kubevirt rollout status deployment/virt-controller --timeout=180s
kubectl -n kubevirt rollout status daemonset/virt-handler --timeout=180s

log "starting the example VM"
kubectl apply -f examples/vm-cirros.yaml
kubectl wait --for=jsonpath='{.status.phase}'=Running vmi/vm-cirros --timeout=300s
kubectl get vms,vmis -o wide
printf '\nFerrovirt is up in %ss. export KUBECONFIG=%s\n' "$(( $(date +%s) - started ))" "$KUBECONFIG"
