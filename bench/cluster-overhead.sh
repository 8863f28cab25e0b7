#!/usr/bin/env bash
# The launcher Pod's memory overhead on the local cluster, as virt-handler reports it in
# kubevirt_vmi_launcher_memory_overhead_bytes: one 1 vCPU / 128 MiB VMI of the project's tiny
# guest (QEMU TCG here), scraped SETTLE seconds after Running through the API server's Pod proxy;
# then the Pod's memory cgroup per container (working set = usage - total_inactive_file, with
# the processes in it), which says where the memory goes. Deletes the VMI after.
# Usage: flock /tmp/ferrovirt-cluster.lock bench/cluster-overhead.sh     (hack/up.sh must have run)
set -euo pipefail
cd "$(dirname "$0")/.."
settle=${SETTLE:-20}
ns=bench-overhead-$$
kubectl() { tests/cluster/cluster.sh kubectl "$@"; }
kubectl create namespace "$ns" >/dev/null
trap 'kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true' EXIT
kubectl -n "$ns" apply -f - >/dev/null <<YAML
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: overhead
spec:
  domain:
    devices:
      disks:
      - name: containerdisk
        disk: {bus: virtio}
    memory:
      guest: 128Mi
  terminationGracePeriodSeconds: 0
  volumes:
  - name: containerdisk
    containerDisk:
      image: registry:5000/kubevirt/cirros-container-disk-demo:devel
YAML
phase=
for _ in $(seq 240); do
  phase=$(kubectl -n "$ns" get vmi overhead -o jsonpath='{.status.phase}' 2>/dev/null || true)
  [[ $phase == Running || $phase == Failed ]] && break
  sleep 1
done
[[ $phase == Running ]] || { echo "the VMI did not reach Running (phase: ${phase:-none})" >&2; exit 1; }
echo "VMI Running; phaseTransitionTimestamps: $(kubectl -n "$ns" get vmi overhead -o \
  jsonpath='{range .status.phaseTransitionTimestamps[*]}{.phase}={.phaseTransitionTimestamp} {end}')"
sleep "$settle"
node=$(kubectl -n "$ns" get vmi overhead -o jsonpath='{.status.nodeName}')
handler=$(kubectl -n kubevirt get pods -l kubevirt.io=virt-handler --field-selector "spec.nodeName=$node" \
  -o jsonpath='{.items[0].metadata.name}')
page=$(kubectl get --raw "/api/v1/namespaces/kubevirt/pods/$handler:8080/proxy/metrics")
value() { grep "^$1{namespace=\"$ns\",name=\"overhead\"" <<<"$page" | awk '{print $2}'; }
overhead=$(value kubevirt_vmi_launcher_memory_overhead_bytes)
ws=$(value ferrovirt_vmi_launcher_memory_working_set_bytes)
guest=$(value ferrovirt_vmi_guest_memory_resident_bytes)
[[ -n $overhead ]] || { echo "virt-handler $handler did not report the VMI:"; echo "$page"; exit 1; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "virt-handler ($handler, $settle s after Running): launcher Pod working set $(mib "$ws"), \
guest RAM resident $(mib "$guest"), kubevirt_vmi_launcher_memory_overhead_bytes $(mib "$overhead")"

# Where it goes: the Pod's cgroup, container by container.
uid=$(kubectl -n "$ns" get pods -l kubevirt.io=virt-launcher -o jsonpath='{.items[0].metadata.uid}')
pod=$(find /sys/fs/cgroup/memory -maxdepth 6 -type d -name "pod$uid" | head -1)
if [[ -n $pod ]]; then
  echo "launcher Pod cgroup, per container (working set; processes):"
  for dir in "$pod"/*/; do
    usage=$(cat "$dir/memory.usage_in_bytes")
    inactive=$(awk '$1 == "total_inactive_file" {print $2}' "$dir/memory.stat")
    procs=$(while read -r pid; do cat "/proc/$pid/comm" 2>/dev/null; done <"$dir/cgroup.procs" | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
    echo "  $(basename "$dir" | cut -c1-12)  $(mib $((usage - inactive)))  ${procs:-(no process)}"
  done
fi
