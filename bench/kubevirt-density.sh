#!/usr/bin/env bash
# KubeVirt's own density spec against Ferrovirt on the local cluster: tests/performance/density.go
# of KubeVirt's functional suite ("create a batch of 100 VMIs": one primer VMI, then 100 cirros
# VMIs of 100m CPU and 90Mi created 100 ms apart, all Running within 5 minutes, then its
# perfscale audit, read from Prometheus at 127.0.0.1:30007).
#   1. measures what one such VMI's launcher Pod requests of CPU (one VMI of the spec's shape,
#      deleted after), and adds network-namespace worker nodes until the schedulable nodes'
#      free CPU holds the 101 launcher Pods (the nodes are removed at the end);
#   2. starts Prometheus (Debian's package, unpacked into the cache, not installed) on
#      127.0.0.1:30007, scraping the `metrics` port of virt-controller and virt-handler every
#      30 s (the interval the spec assumes), with the `pod` label the audit's queries select on;
#      the targets come from a file this script keeps up to date (Debian's Prometheus has no
#      Kubernetes service discovery);
#   3. runs the spec through tests/kubevirt-suite/run.sh with KUBEVIRT_E2E_PERF_TEST=true;
#   4. prints the audit KubeVirt's spec wrote, against the thresholds of density.go (the spec
#      itself only prints them; this script says which are exceeded, as figures, and fails only
#      when the spec failed or its audit lacks one of the four figures: a metric Prometheus did
#      not have).
#
# Usage: bench/kubevirt-density.sh KUBEVIRT_DIR   (as root; hack/up.sh must have run; the
#        directory holds KubeVirt's tests.test and virtctl, as for tests/kubevirt-suite/run.sh)
# Environment: KUBEVIRT_DENSITY_OUT (default /var/tmp/ferrovirt-kubevirt-density) keeps the
# suite's log, the audit and Prometheus' log.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../tests/cluster/lib/common.sh
source "$here/../tests/cluster/lib/common.sh"
kv_dir=${1:?usage: bench/kubevirt-density.sh KUBEVIRT_DIR}
out=${KUBEVIRT_DENSITY_OUT:-/var/tmp/ferrovirt-kubevirt-density}
cluster=$here/../tests/cluster/cluster.sh
# The spec's VMIs: the primer and 100.
VMIS=101
PROMETHEUS_ADDR=127.0.0.1:30007
[[ -r $ADMIN_KUBECONFIG ]] || die "no local cluster ($ADMIN_KUBECONFIG is missing): run hack/up.sh first"

rm -rf "$out"
mkdir -p "$out"
added=()
prometheus_pid=
targets_pid=
sampler_pid=
cleanup() {
  [[ -z $targets_pid ]] || kill "$targets_pid" 2>/dev/null
  [[ -z $sampler_pid ]] || kill "$sampler_pid" 2>/dev/null
  [[ -z $prometheus_pid ]] || { kill "$prometheus_pid" 2>/dev/null; wait "$prometheus_pid" 2>/dev/null; }
  kubectl_admin delete namespace --ignore-not-found --wait=false ferrovirt-density-probe >/dev/null 2>&1
  local node
  for node in "${added[@]}"; do
    "$cluster" remove-node "$node" >/dev/null 2>&1 || echo "kubevirt-density: removing node $node failed" >&2
  done
}
trap cleanup EXIT

# 1. One launcher Pod's CPU request, from a VMI of the spec's shape (createVMISpecWithResources).
kubectl_admin create namespace ferrovirt-density-probe >/dev/null 2>&1
kubectl_admin -n ferrovirt-density-probe apply -f - >/dev/null <<'YAML' || die "cannot create the probe VMI"
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: probe
spec:
  domain:
    resources:
      requests: {cpu: 100m, memory: 90Mi}
      limits: {cpu: 100m, memory: 90Mi}
    devices:
      disks: [{name: containerdisk, disk: {bus: virtio}}]
      interfaces: [{name: default, masquerade: {}}]
  networks: [{name: default, pod: {}}]
  volumes:
  - name: containerdisk
    containerDisk: {image: registry:5000/kubevirt/cirros-container-disk-demo:latest}
YAML
# virt-controller names the launcher Pod in the VMI's status.activePods once it has created it.
pod_request_m=
if kubectl_admin -n ferrovirt-density-probe wait vmi/probe --for=jsonpath='{.status.activePods}' \
  --timeout=60s >/dev/null; then
  pod_request_m=$(kubectl_admin -n ferrovirt-density-probe get pods -l kubevirt.io=virt-launcher -o json |
    python3 -c '
import json, sys
from decimal import Decimal
def milli(q):
    return int(Decimal(q[:-1])) if q.endswith("m") else int(Decimal(q) * 1000)
pods = json.load(sys.stdin)["items"]
if pods:
    spec = pods[0]["spec"]
    run = sum(milli(c.get("resources", {}).get("requests", {}).get("cpu", "0")) for c in spec["containers"])
    init = max([milli(c.get("resources", {}).get("requests", {}).get("cpu", "0")) for c in spec.get("initContainers", [])] or [0])
    print(max(run, init) + milli(spec.get("overhead", {}).get("cpu", "0")))')
fi
kubectl_admin delete namespace ferrovirt-density-probe --wait=true --timeout=180s >/dev/null 2>&1
[[ -n $pod_request_m ]] || die "the probe VMI got no launcher Pod in 60 s"
need_m=$((VMIS * pod_request_m))

# The schedulable nodes' allocatable CPU less what their Pods (not finished) request, millicores.
free_cpu_m() {
  python3 - "$ADMIN_KUBECONFIG" "$KUBE_BIN/kubectl" <<'PY'
import json, subprocess, sys
from decimal import Decimal
kubeconfig, kubectl = sys.argv[1:3]
def get(*args):
    return json.loads(subprocess.check_output([kubectl, "--kubeconfig", kubeconfig, "get", *args, "-o", "json"]))["items"]
def milli(q):
    return int(Decimal(q[:-1])) if q.endswith("m") else int(Decimal(q) * 1000)
nodes = {n["metadata"]["name"]: milli(n["status"]["allocatable"]["cpu"])
         for n in get("nodes", "-l", "kubevirt.io/schedulable=true")
         if not n["spec"].get("unschedulable")
         and any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])}
for pod in get("pods", "-A"):
    node = pod["spec"].get("nodeName")
    if node in nodes and pod["status"].get("phase") not in ("Succeeded", "Failed"):
        nodes[node] -= sum(milli(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                           for c in pod["spec"]["containers"])
print(sum(max(free, 0) for free in nodes.values()))
PY
}
free_m=$(free_cpu_m) || die "cannot read the nodes' CPU"
echo "kubevirt-density: one launcher Pod of the spec requests ${pod_request_m}m CPU; $VMIS need ${need_m}m; the schedulable nodes have ${free_m}m free"
i=0
while ((free_m < need_m)); do
  ((++i <= 8)) || die "still ${free_m}m free after adding 8 nodes"
  node=ferrovirt-density-$i
  echo "kubevirt-density: adding worker node $node"
  "$cluster" add-node "$node" >"$out/add-node-$i.log" 2>&1 || { cat "$out/add-node-$i.log"; die "cluster.sh add-node $node failed"; }
  added+=("$node")
  # Schedulable once its virt-handler has labelled it.
  kubectl_admin wait "node/$node" --for=jsonpath='{.metadata.labels.kubevirt\.io/schedulable}'=true \
    --timeout=300s >/dev/null || die "node $node is not kubevirt.io/schedulable after 300 s"
  free_m=$(free_cpu_m) || die "cannot read the nodes' CPU"
  echo "kubevirt-density: ${free_m}m free"
done
echo "kubevirt-density: memory available on this machine: $(awk '/MemAvailable/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"

# 2. Prometheus, from Debian's package, unpacked once per version into the cache.
version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
[[ -n $version && $version != "(none)" ]] || die "Debian's apt knows no prometheus package (apt-get update?)"
prom_dir=$CACHE_DIR/prometheus/$version
if [[ ! -x $prom_dir/usr/bin/prometheus ]]; then
  rm -rf "$prom_dir.tmp" && mkdir -p "$prom_dir.tmp"
  # As root into root's directory: apt's sandbox user could not write there.
  (cd "$prom_dir.tmp" && apt-get download -q -o APT::Sandbox::User=root "prometheus=$version" >/dev/null) ||
    die "apt-get download prometheus failed"
  dpkg-deb -x "$prom_dir.tmp"/prometheus_*.deb "$prom_dir.tmp" || die "cannot unpack the prometheus package"
  rm -f "$prom_dir.tmp"/prometheus_*.deb
  rm -rf "$prom_dir" && mv "$prom_dir.tmp" "$prom_dir"
fi
# Debian builds Prometheus without Kubernetes service discovery: the targets come from files
# that a loop here rewrites from the API every 10 s (Prometheus rereads them): the `metrics`
# port of each Pod of the kubevirt namespace that has one, labelled with its namespace and pod;
# and each node's kubelet, whose cAdvisor gives the components' container_cpu_usage_seconds_total
# and container_memory_rss (the audit's CPU and memory figures). The Pods of a node that is gone
# or not Ready are left out: a removed node's are deleted only later, by the Pod collector.
write_targets() {
  kubectl_admin get nodes -o json >"$out/nodes.json" &&
    kubectl_admin -n kubevirt get pods -o json >"$out/pods.json" || return 1
  python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
ready = {n["metadata"]["name"]: n for n in json.load(open(f"{out}/nodes.json"))["items"]
         if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])}
pods = []
for pod in json.load(open(f"{out}/pods.json"))["items"]:
    ip = pod["status"].get("podIP")
    if pod["spec"].get("nodeName") not in ready or not ip or pod["status"].get("phase") != "Running":
        continue
    for container in pod["spec"]["containers"]:
        for port in container.get("ports", []):
            if port.get("name") == "metrics":
                pods.append({"targets": [f"{ip}:{port['containerPort']}"],
                             "labels": {"namespace": "kubevirt", "pod": pod["metadata"]["name"]}})
kubelets = []
for name, node in ready.items():
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    for address in node["status"]["addresses"]:
        if address["type"] == "InternalIP":
            kubelets.append({"targets": [f"{address['address']}:{port}"], "labels": {"node": name}})
for name, targets in (("targets", pods), ("kubelets", kubelets)):
    with open(f"{out}/{name}.json.new", "w") as f:
        json.dump(targets, f, indent=1)
    os.replace(f"{out}/{name}.json.new", f"{out}/{name}.json")
PY
}
write_targets || die "cannot list the nodes and the Pods of the kubevirt namespace"
(while sleep 10; do write_targets 2>/dev/null; done) &
targets_pid=$!
# KubeVirt's recording rule that the audit's phase and per-VMI memory queries read, from the
# gauge virt-controller serves.
cat >"$out/rules.yml" <<'YAML'
groups:
  - name: kubevirt
    rules:
      - record: node:kubevirt_vmi_phase:sum
        expr: sum by (node, phase) (kubevirt_vmi_phase_count)
YAML
cat >"$out/prometheus.yml" <<YAML
global:
  scrape_interval: 30s
  evaluation_interval: 30s
rule_files: [$out/rules.yml]
scrape_configs:
  - job_name: kubevirt
    file_sd_configs:
      - files: [$out/targets.json]
        refresh_interval: 10s
  - job_name: cadvisor
    scheme: https
    metrics_path: /metrics/cadvisor
    tls_config: {ca_file: $PKI/ca.crt, cert_file: $PKI/admin.crt, key_file: $PKI/admin.key}
    file_sd_configs:
      - files: [$out/kubelets.json]
        refresh_interval: 10s
YAML
"$prom_dir/usr/bin/prometheus" --config.file="$out/prometheus.yml" \
  --storage.tsdb.path="$out/prometheus-data" --web.listen-address="$PROMETHEUS_ADDR" \
  >"$out/prometheus.log" 2>&1 &
prometheus_pid=$!
# Ready, and every virt-controller and virt-handler target scraped once and up.
targets_up() {
  curl -sf "http://$PROMETHEUS_ADDR/api/v1/targets" | python3 -c '
import json, sys
targets = json.load(sys.stdin)["data"]["activeTargets"]
pods = [t for t in targets if t["labels"].get("pod", "").startswith(("virt-controller", "virt-handler"))]
kubelets = [t for t in targets if t["labels"]["job"] == "cadvisor"]
sys.exit(0 if pods and kubelets and all(t["health"] == "up" for t in pods + kubelets) else 1)'
}
deadline=$((SECONDS + 120))
until targets_up 2>/dev/null; do
  kill -0 "$prometheus_pid" 2>/dev/null || {
    tail -n 5 "$out/prometheus.log"
    die "Prometheus exited; its log: $out/prometheus.log"
  }
  ((SECONDS < deadline)) || {
    curl -s "http://$PROMETHEUS_ADDR/api/v1/targets" | head -c 2000
    die "Prometheus at $PROMETHEUS_ADDR did not scrape every virt-controller, virt-handler and kubelet in 120 s"
  }
  sleep 1
done
echo "kubevirt-density: Prometheus $version on $PROMETHEUS_ADDR scraping $(curl -sf "http://$PROMETHEUS_ADDR/api/v1/targets" |
  python3 -c 'import json, sys; print(", ".join(sorted(t["labels"].get("pod") or "kubelet of " + t["labels"]["node"] for t in json.load(sys.stdin)["data"]["activeTargets"])))')"

# Where the CPUs go during the spec: every 5 s, the machine's busy CPU time (/proc/stat: user,
# nice, system, irq, softirq, steal) and the CPU time of the QEMU processes (the TCG guests)
# alive then, in clock ticks.
cpu_sampler() {
  while true; do
    echo "$SECONDS $(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat) $(cat /proc/[0-9]*/stat 2>/dev/null |
      awk '$2 == "(qemu-system-x86)" {t += $14 + $15; n++} END {print t + 0, n + 0}')"
    sleep 5
  done
}
cpu_sampler >"$out/cpu.txt" &
sampler_pid=$!

# 3. The spec, alone.
list=$out/specs.txt
printf 'tests/performance/density.go:91\tpass\t[sig-performance] Control Plane Performance Density Testing Density test [small] create a batch of 100 VMIs should successfully create all VMIS\n' >"$list"
started=$SECONDS
rc=0
KUBEVIRT_E2E_PERF_TEST=true ARTIFACTS=$out/suite/artifacts KUBEVIRT_SUITE_OUT=$out/suite \
  KUBEVIRT_SUITE_TIMEOUT=30m "$here/../tests/kubevirt-suite/run.sh" "$kv_dir" "$list" || rc=$?
echo "kubevirt-density: the suite ran for $((SECONDS - started)) s (exit status $rc)"
kill "$sampler_pid" 2>/dev/null
sampler_pid=
python3 - "$out/cpu.txt" "$(getconf CLK_TCK)" "$(nproc)" <<'PY' || true
import sys
rows = [tuple(map(float, line.split())) for line in open(sys.argv[1]) if len(line.split()) == 4]
hz, cpus = float(sys.argv[2]), int(sys.argv[3])
t0, busy0, qemu0, _ = rows[0]
# The sample where the guests had used the most, before the suite's cleanup stopped them.
t, busy, qemu, n = max(rows, key=lambda r: r[2])
print(f"CPU from the spec's start to its peak of QEMU ({t - t0:.0f} s later, {n:.0f} QEMU processes): "
      f"the machine spent {(busy - busy0) / hz:.0f} CPU-s of the {cpus * (t - t0):.0f} it had; "
      f"the QEMU processes (TCG guests) {(qemu - qemu0) / hz:.0f} CPU-s of them "
      f"({100 * (qemu - qemu0) / max(busy - busy0, 1):.0f} %)")
PY

# 4. The audit, against density.go's thresholds.
audit=$out/suite/artifacts/VMI-perf-audit-results.json
[[ -s $audit ]] || die "the spec wrote no audit ($audit); the suite's log: $out/suite/suite.log"
python3 - "$audit" <<'PY' || rc=1
import json, sys
values = {k: v["value"] for k, v in json.load(open(sys.argv[1]))["Values"].items()}
print("KubeVirt's density spec, its audit (Prometheus, over the spec's own window):")
for key in sorted(values):
    print(f"  {key:45} {values[key]:10.2f}")
pods = values.get("CREATE-pods-count", 0.0)
def per_pod(key):
    return values[key] / pods if pods and key in values else None
# The audit writes 0 for a quantile over no data: a missing figure, not a fast one.
def seconds(key):
    return values.get(key) or None
rows = [
    ("creation -> Running P50 (s)", seconds("vmiCreationToRunningSecondsP50"), 45),
    ("creation -> Running P95 (s)", seconds("vmiCreationToRunningSecondsP95"), 60),
    ("PATCH VMI per Pod created", per_pod("PATCH-virtualmachineinstances-count"), 2),
    ("UPDATE VMI per Pod created", per_pod("UPDATE-virtualmachineinstances-count"), 10),
]
print("against density.go's thresholds:")
missing = False
for name, got, limit in rows:
    if got is None:
        missing = True
        print(f"  {name:30}      n/a  threshold {limit:3}  NO DATA in Prometheus")
    else:
        print(f"  {name:30} {got:8.2f}  threshold {limit:3}  {'within' if got <= limit else 'EXCEEDED'}")
sys.exit(1 if missing else 0)
PY
exit "$rc"
