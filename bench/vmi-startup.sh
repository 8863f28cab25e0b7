#!/usr/bin/env bash
# Creates N VMIs (default 10) of the tiny guest one after another on the local cluster, each
# once the previous one is Running, and prints each one's creation -> Running time (from its
# creationTimestamp and status.phaseTransitionTimestamps) and the median. Deletes them after.
# Usage: bench/vmi-startup.sh [N]       (hack/up.sh must have run)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
ns=bench-startup-$$
kubectl() { tests/cluster/cluster.sh kubectl "$@"; }
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
trap 'kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true' EXIT

vmi() {
  cat <<YAML
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: $1
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
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$n"); do
  vmi "startup-$i" | kubectl -n "$ns" apply -f - >/dev/null
  for _ in $(seq 600); do
    phase=$(kubectl -n "$ns" get vmi "startup-$i" -o jsonpath='{.status.phase}' 2>/dev/null || true)
    [[ $phase == Running || $phase == Failed ]] && break
    sleep 0.5
  done
  [[ $phase == Running ]] || { echo "startup-$i did not reach Running (phase: ${phase:-none})" >&2; exit 1; }
done
kubectl -n "$ns" get vmis -o json | python3 -c '
import json, sys, statistics
from datetime import datetime
def t(s): return datetime.fromisoformat(s.replace("Z", "+00:00"))
times = []
for vmi in json.load(sys.stdin)["items"]:
    created = t(vmi["metadata"]["creationTimestamp"])
    running = [p for p in vmi["status"]["phaseTransitionTimestamps"] if p["phase"] == "Running"]
    seconds = (t(running[0]["phaseTransitionTimestamp"]) - created).total_seconds()
    times.append(seconds)
    name = vmi["metadata"]["name"]
    print(f"{name}: {seconds:.0f} s")
print(f"creation -> Running over {len(times)} VMIs: median {statistics.median(times):.1f} s, "
      f"min {min(times):.0f} s, max {max(times):.0f} s (timestamps have 1 s resolution)")
'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
