#!/usr/bin/env bash
# Brings up the local cluster with Ferrovirt installed and a VM running:
#   1. installs the Debian packages, builds the guest images (cached in /var/cache/ferrovirt);
#   2. starts the local Kubernetes cluster (tests/cluster/cluster.sh up; builds Kubernetes once)
#      with the worker nodes named in FERROVIRT_WORKERS (default: ferrovirt-worker1, the second
#      node that live migration needs; FERROVIRT_WORKERS= for the control node alone);
#   3. builds and pushes Ferrovirt's images and the containerDisks (hack/images.sh);
#   4. installs Ferrovirt as a user would: `kubectl create -f ferrovirt-operator.yaml` and
#      `kubectl create -f kubevirt-cr.yaml` (generated into /var/lib/ferrovirt-cluster/release),
#      then waits for the KubeVirt CR's Available condition and this build's version; on a
#      cluster installed before, it applies the new operator manifest instead (an upgrade);
#   5. creates examples/vm-cirros.yaml and waits until its VMI is Running.
# Usage: hack/up.sh                (as root, from anywhere)
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
# `flock /tmp/ferrovirt-cluster.lock hack/up.sh` hands its lock's file descriptor to this script;
# a daemon that cluster.sh starts would inherit it and hold the lock for as long as it lives.
# flock itself keeps the lock until this script exits, so our copy can go.
for fd in /proc/$$/fd/*; do
  if [[ $(readlink "$fd" 2>/dev/null) == */ferrovirt-cluster.lock && ${fd##*/} -gt 2 ]]; then
    eval "exec ${fd##*/}>&-"
  fi
done
log() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

log "preflight"
hack/preflight.sh

log "packages and guest images"
hack/install-deps.sh
guest-images/build.sh

log "local cluster"
tests/cluster/cluster.sh up
# add-node is idempotent: a node added before is started again (up already did) and kept.
for worker in ${FERROVIRT_WORKERS-ferrovirt-worker1}; do
  tests/cluster/cluster.sh add-node "$worker" >/dev/null
done
export KUBECONFIG
KUBECONFIG=$(tests/cluster/cluster.sh kubeconfig)
kubectl() { tests/cluster/cluster.sh kubectl "$@"; }

log "images"
tag=$(hack/images.sh | tail -n 1)

log "installing Ferrovirt with virt-operator"
# As a user installs KubeVirt: the operator's manifest, then the KubeVirt CR; the operator
# installs the components with the certificates it generates. The release manifests are
# generated for this build's tag (ferrovirt-release) and kept with the cluster's state.
release=${CARGO_TARGET_DIR:-$PWD/target}/release
manifests=/var/lib/ferrovirt-cluster/release
"$release/ferrovirt-release" --tag "$tag" --output-dir "$manifests" >/dev/null
if kubectl get namespace kubevirt >/dev/null 2>&1; then
  # Installed before: update in place, as KubeVirt's upgrade does (the new operator image
  # rolls every component to the new tag).
  kubectl apply --server-side --force-conflicts -f "$manifests/ferrovirt-operator.yaml"
else
  kubectl create -f "$manifests/ferrovirt-operator.yaml"
fi
kubectl wait --for condition=Established --timeout=60s crd/kubevirts.kubevirt.io >/dev/null
if [[ -n $(kubectl -n kubevirt get kv kubevirt -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null) ]]; then
  log "waiting for the KubeVirt CR being deleted to go"
  kubectl -n kubevirt wait --for=delete kv/kubevirt --timeout=300s
fi
if ! kubectl -n kubevirt get kv kubevirt >/dev/null 2>&1; then
  kubectl create -f "$manifests/kubevirt-cr.yaml"
fi
kubectl -n kubevirt wait kv kubevirt --for condition=Available --timeout=300s
# Available stays true while an upgrade rolls; wait for this build's version too.
kubectl -n kubevirt wait kv kubevirt --for=jsonpath='{.status.observedKubeVirtVersion}'="$tag" \
  --timeout=300s
kubectl -n kubevirt wait kv kubevirt --for=jsonpath='{.status.phase}'=Deployed --timeout=60s

log "starting the example VM"
kubectl apply -f examples/vm-cirros.yaml
for _ in $(seq 300); do
  [[ $(kubectl get vmi vm-cirros -o jsonpath='{.status.phase}' 2>/dev/null) == Running ]] && break
  sleep 1
done
kubectl wait --for=jsonpath='{.status.phase}'=Running vmi/vm-cirros --timeout=10s
kubectl get vms,vmis -o wide
printf '\nFerrovirt is up in %ss. export KUBECONFIG=%s\n' "$(( $(date +%s) - started ))" "$KUBECONFIG"
