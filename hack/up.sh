#!/usr/bin/env bash
# Brings up the local cluster with Ferrovirt installed and a VM running:
#   1. installs the Debian packages, builds the guest images (cached in /var/cache/ferrovirt);
#   2. starts the local Kubernetes cluster (tests/cluster/cluster.sh up; builds Kubernetes once);
#   3. builds and pushes Ferrovirt's images and the containerDisks (hack/images.sh);
#   4. installs Ferrovirt (CRDs, RBAC, virt-controller, virt-handler, virt-api with its webhooks
#      and the subresources API) and waits for it;
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
tag=$(hack/images.sh | tail -n 1)

log "installing Ferrovirt"
release=${CARGO_TARGET_DIR:-$PWD/target}/release
# virt-api's serving certificate (for its webhooks and the aggregated API) and the token it
# presents to virt-handler; made once, kept with the cluster's state.
certs=/var/lib/ferrovirt-cluster/ferrovirt-certs
if [[ ! -f $certs/tls.crt ]]; then
  mkdir -p "$certs"
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1)
  openssl req -x509 -new -nodes "${ec[@]}" -keyout "$certs/ca.key" -out "$certs/ca.crt" \
    -days 3650 -subj "/CN=ferrovirt-virt-api-ca" 2>/dev/null
  openssl req -new -nodes "${ec[@]}" -keyout "$certs/tls.key" -out "$certs/tls.csr" \
    -subj "/CN=virt-api.kubevirt.svc" 2>/dev/null
  printf 'subjectAltName=DNS:virt-api.kubevirt.svc,DNS:virt-api.kubevirt.svc.cluster.local,DNS:virt-api\nextendedKeyUsage=serverAuth\n' >"$certs/ext"
  openssl x509 -req -in "$certs/tls.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
    -CAcreateserial -out "$certs/tls.crt" -days 3650 -extfile "$certs/ext" 2>/dev/null
  head -c 32 /dev/urandom | base64 | tr -d '\n' >"$certs/handler-token"
fi
kubectl create namespace kubevirt --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n kubevirt create secret tls kubevirt-virt-api-certs --cert "$certs/tls.crt" \
  --key "$certs/tls.key" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n kubevirt create secret generic kubevirt-virt-handler-token \
  --from-file=token="$certs/handler-token" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
"$release/ferrovirt-manifests" --tag "$tag" | kubectl apply --server-side --force-conflicts -f -
kubectl wait --for condition=Established --timeout=60s crd --all >/dev/null
"$release/virt-api-manifests" --image "registry:5000/ferrovirt/virt-api:$tag" \
  --ca-bundle "$certs/ca.crt" | kubectl apply --server-side --force-conflicts -f -
kubectl -n kubevirt rollout status deployment/virt-controller --timeout=180s
kubectl -n kubevirt rollout status daemonset/virt-handler --timeout=180s
kubectl -n kubevirt rollout status deployment/virt-api --timeout=180s

log "starting the example VM"
kubectl apply -f examples/vm-cirros.yaml
for _ in $(seq 300); do
  [[ $(kubectl get vmi vm-cirros -o jsonpath='{.status.phase}' 2>/dev/null) == Running ]] && break
  sleep 1
done
kubectl wait --for=jsonpath='{.status.phase}'=Running vmi/vm-cirros --timeout=10s
kubectl get vms,vmis -o wide
printf '\nFerrovirt is up in %ss. export KUBECONFIG=%s\n' "$(( $(date +%s) - started ))" "$KUBECONFIG"
