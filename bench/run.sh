#!/usr/bin/env bash
# Every Ferrovirt benchmark, one after another, printing figures (never asserting on time):
#   1. the VMM against QEMU microvm on this host's /dev/kvm (vmm/bench/run.sh);
#   2. guest kernel boot to the ready marker under QEMU TCG, ours vs Debian's
#      (guest-images/bench-boot.sh);
#   3. per-VM launcher memory overhead, KVM backend (test guest) and QEMU TCG backend
#      (bench launcher-overhead, a cgroup standing for the Pod's);
#   4. on the local cluster, holding the cluster lock: the launcher overhead of a real launcher
#      Pod as virt-handler's kubevirt_vmi_launcher_memory_overhead_bytes reports it, then
#      KubeVirt's density test (bench density), with its Pod floor;
#   5. the density test on a KVM worker node (an L1 with nested KVM), the VMM against QEMU TCG
#      on the same node (bench/density-kvm.sh); then KubeVirt's own density spec, 101 VMIs, with
#      its Prometheus audit (bench/kubevirt-density.sh, on nodes it adds);
#   6. Linux on the VMM against QEMU microvm with KVM, side by side in one L1 with nested KVM
#      (guest-images/bench-nested-boot.sh).
# The machine's load is printed before and after each part.
#
# Usage: bench/run.sh        (as root; hack/up.sh must have run)
#   DENSITY_N=35    VMIs in the density test        RUNS=11  runs of the VMM benchmark
#   BOOT_RUNS=5     runs of the boot benchmark      OVERHEAD_RUNS=3  runs of the overhead bench
#   NESTED_RUNS=5   runs of the nested boot benchmark
#   DENSITY_KVM_N=10  VMIs in the density test on the KVM node
#   KUBEVIRT_DIR=PATH  KubeVirt's prebuilt tests.test and virtctl, for KubeVirt's density spec
#                      (part 5c fails, saying so, without it)
#   SKIP="vmm boot overhead cluster density density-kvm kubevirt-density nested" parts to leave out
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/ferrovirt/cargo-target}
export KUBECONFIG=${KUBECONFIG:-/var/lib/ferrovirt-cluster/kubeconfig/admin.kubeconfig}
# KubeVirt's suite uses 100. Each launcher Pod requests 100m CPU per vCPU (KubeVirt's
# cpuAllocationRatio 10), so this machine's two 2-CPU nodes hold about 37 density VMIs.
DENSITY_N=${DENSITY_N:-35}
RUNS=${RUNS:-11}
BOOT_RUNS=${BOOT_RUNS:-5}
OVERHEAD_RUNS=${OVERHEAD_RUNS:-3}
NESTED_RUNS=${NESTED_RUNS:-5}
DENSITY_KVM_N=${DENSITY_KVM_N:-10}
SKIP=${SKIP:-}
LOCK=/tmp/ferrovirt-cluster.lock
status=0

kvm_kind() {
  if [[ ! -e /dev/kvm ]]; then echo missing
  elif grep -qwE 'vmx|svm' /proc/cpuinfo; then echo "hardware virtualization"
  else echo "PVM (no vmx/svm: Linux guests run on QEMU TCG)"; fi
}
# The largest resident mappings of a process, from its smaps: "name size, ...".
smaps_top() {
  awk '/^[0-9a-f]+-[0-9a-f]+ / {name = (NF >= 6 ? $6 : "[anon:" $2 "]"); n = split(name, p, "/"); name = p[n]; next}
       /^Rss:/ {rss[name] += $2}
       END {for (k in rss) printf "%d %s\n", rss[k], k}' "/proc/$1/smaps" |
    sort -rn | head -"${2:-8}" | awk '{printf "%s%s %.0f KiB", sep, $2, $1; sep = ", "}'
  echo
}
load() { echo "[load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S) UTC]"; }
skip() { [[ " $SKIP " == *" $1 "* ]]; }
part() { echo; echo "== $1"; load; }
failed() { echo "!! $1 failed (exit status $2)"; status=1; }

echo "Ferrovirt benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), \
$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), \
/dev/kvm: $(kvm_kind)"
load

cargo build --release --quiet -p ferrovirt-bench -p launcher -p vmm || exit 1
bin=$CARGO_TARGET_DIR/release

if ! skip vmm; then
  part "1. VMM vs QEMU microvm, same test guest, this host's /dev/kvm (vmm/bench/run.sh --runs $RUNS)"
  vmm/bench/run.sh --runs "$RUNS" || failed "vmm/bench/run.sh" $?
  # Where the VMM's own memory goes: the counter guest runs until killed.
  guests=${FERROVIRT_TEST_GUESTS:-/var/cache/ferrovirt/guest-images/current/test-guests}
  "$bin/vmm" --kernel "$guests/counter.elf" --memory 64 --serial tty >/dev/null 2>&1 &
  vmm_pid=$!
  sleep 2
  if [[ -r /proc/$vmm_pid/smaps ]]; then
    echo "VMM profile (counter guest, 64 MiB, 2 s in): Rss $(awk '/^Rss:/ {print $2, $3}' /proc/$vmm_pid/smaps_rollup), \
Pss $(awk '/^Pss:/ {print $2, $3}' /proc/$vmm_pid/smaps_rollup), anonymous $(awk '/^Anonymous:/ {print $2, $3}' /proc/$vmm_pid/smaps_rollup)"
    echo "  largest mappings: $(smaps_top $vmm_pid)"
  fi
  kill "$vmm_pid" 2>/dev/null; wait "$vmm_pid" 2>/dev/null
fi

if ! skip boot; then
  part "2. guest kernel boot to the ready marker under QEMU TCG (guest-images/bench-boot.sh --runs $BOOT_RUNS)"
  guest-images/bench-boot.sh --runs "$BOOT_RUNS" || failed "guest-images/bench-boot.sh" $?
fi

if ! skip overhead; then
  for backend in kvm qemu; do
    part "3. launcher memory overhead, $backend backend (bench launcher-overhead --backend $backend)"
    "$bin/launcher-overhead" --backend "$backend" --runs "$OVERHEAD_RUNS" \
      --launcher "$bin/virt-launcher" || failed "launcher-overhead --backend $backend" $?
  done
fi

if ! skip cluster; then
  part "4. launcher Pod overhead on the cluster (virt-handler's kubevirt_vmi_launcher_memory_overhead_bytes)"
  flock "$LOCK" bench/cluster-overhead.sh || failed "bench/cluster-overhead.sh" $?
fi

if ! skip density; then
  part "5. density: $DENSITY_N of KubeVirt's density VMIs created 100 ms apart (bench density)"
  flock "$LOCK" "$bin/density" --count "$DENSITY_N" || failed "density" $?
fi
if ! skip density-kvm; then
  part "5b. density on a KVM worker node: $DENSITY_KVM_N VMIs on the VMM, then on QEMU TCG (bench/density-kvm.sh)"
  flock "$LOCK" bench/density-kvm.sh "$bin/density" "$DENSITY_KVM_N" || failed "bench/density-kvm.sh" $?
fi
if ! skip kubevirt-density; then
  part "5c. KubeVirt's density spec (tests/performance/density.go), 101 VMIs, audited by Prometheus (bench/kubevirt-density.sh)"
  if [[ -z ${KUBEVIRT_DIR:-} ]]; then
    failed "KubeVirt's density spec: KUBEVIRT_DIR is not set (the directory of KubeVirt's tests.test and virtctl)" 2
  else
    flock "$LOCK" bench/kubevirt-density.sh "$KUBEVIRT_DIR" || failed "bench/kubevirt-density.sh" $?
  fi
fi
if ! skip nested; then
  part "6. Linux boot on the VMM vs QEMU microvm -accel kvm, one L1 with nested KVM (guest-images/bench-nested-boot.sh --runs $NESTED_RUNS)"
  guest-images/bench-nested-boot.sh --runs "$NESTED_RUNS" | grep -v '^\[ *[0-9]' || failed "guest-images/bench-nested-boot.sh" $?
fi
echo
load
exit $status
