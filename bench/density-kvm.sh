#!/usr/bin/env bash
# KubeVirt's density test on one KVM worker node: a node that is an L1 under QEMU TCG -cpu max
# with nested KVM (tests/cluster/cluster.sh add-node --kvm), N density VMIs on it on
# Ferrovirt's VMM, then the same N on the same node on QEMU TCG (the KubeVirt CR's
# useEmulation), and the ratio of the two. Every figure is nested (the node's own kubelet,
# containerd and guests run under TCG): compare them with each other only.
#
# Usage: bench/density-kvm.sh DENSITY_BIN [N]   (as root, holding the cluster lock; hack/up.sh
#        must have run). N defaults to 10: the node has 2 CPUs and 4 GiB.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
density=${1:?usage: bench/density-kvm.sh DENSITY_BIN [N]}
n=${2:-10}
node=ferrovirt-kvm-bench
cluster=tests/cluster/cluster.sh
kubectl() { "$cluster" kubectl "$@"; }
out=$(mktemp -d)

emulation_was=$(kubectl -n kubevirt get kubevirt kubevirt \
  -o jsonpath='{.spec.configuration.developerConfiguration.useEmulation}')
set_emulation() {
  kubectl -n kubevirt patch kubevirt kubevirt --type=merge \
    -p "{\"spec\":{\"configuration\":{\"developerConfiguration\":{\"useEmulation\":$1}}}}" >/dev/null
}
cleanup() {
  # As it was: absent (a merge patch's null removes it), false or true.
  set_emulation "${emulation_was:-null}"
  "$cluster" remove-node "$node" >/dev/null 2>&1 || echo "density-kvm: removing node $node failed" >&2
  rm -rf "$out"
}
trap cleanup EXIT

echo "density-kvm: adding KVM node $node"
started=$SECONDS
"$cluster" add-node --kvm "$node" >"$out/add-node.log" 2>&1 || {
  cat "$out/add-node.log"
  echo "density-kvm: cluster.sh add-node --kvm $node failed" >&2
  exit 1
}
# Its virt-handler labels it once it has found real KVM there.
if ! kubectl wait "node/$node" --for=jsonpath='{.metadata.labels.ferrovirt\.io/kvm}'=hardware \
  --timeout=300s >/dev/null; then
  kubectl get node "$node" --show-labels >&2
  echo "density-kvm: node $node has no ferrovirt.io/kvm=hardware label after 300 s" >&2
  exit 1
fi
echo "density-kvm: node $node Ready with KVM after $((SECONDS - started)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# One run per backend; its P50 of creation -> Running as the bench's client saw it is kept
# (the node's clock, which stamps the Pods' and the VMIs' phases there, is the L1's own).
run() {
  local label=$1 expect=$2
  echo
  echo "-- $label: $n density VMIs on $node"
  "$density" --count "$n" --node "$node" --timeout-s 900 | tee "$out/$label.log"
  local rc=${PIPESTATUS[0]}
  ((rc == 0)) || { echo "density-kvm: the $label run failed (exit status $rc)" >&2; return 1; }
  grep -q "backends: .*$expect" "$out/$label.log" || {
    echo "density-kvm: the $label run's VMIs were not all on the expected backend ($expect)" >&2
    return 1
  }
}
p50() { awk '/^  create -> Running  / {print $5; exit}' "$out/$1.log"; }

# A fresh node has pulled no image yet: one VMI first, not counted, so that neither run pays
# for the pulls of the launcher and containerDisk images into the node's containerd.
set_emulation false
echo "density-kvm: one VMI on $node first, not counted (image pulls)"
"$density" --count 1 --node "$node" --timeout-s 900 >"$out/warm-up.log" 2>&1 || {
  cat "$out/warm-up.log"
  echo "density-kvm: the warm-up VMI did not run" >&2
  exit 1
}
run vmm "$n on the KVM VMM" || exit 1
set_emulation true
run qemu "$n on QEMU TCG" || exit 1

vmm=$(p50 vmm) qemu=$(p50 qemu)
[[ -n $vmm && -n $qemu ]] || { echo "density-kvm: no P50 in the runs' output" >&2; exit 1; }
awk -v v="$vmm" -v q="$qemu" -v n="$n" 'BEGIN {
  r = (v > 0 ? q / v : 0)
  printf "\ndensity-kvm: %d VMIs on one KVM node, create -> Running P50 (client): KVM VMM %.2f s, QEMU TCG %.2f s", n, v, q
  if (v > 0) printf " (QEMU TCG / KVM VMM = %.2f)", r
  printf "\n"
}'
