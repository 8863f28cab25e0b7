#!/usr/bin/env bash
# Runs KubeVirt's own functional test suite (its prebuilt tests.test and virtctl) against the
# local cluster, for the specs listed in specs.txt, and prints a table of each spec's result and
# "N passed, M failed"; then compares KubeVirt's virtctl with ours (virtctl-parity.sh).
#
# Usage: tests/kubevirt-suite/run.sh KUBEVIRT_DIR [SPEC-LIST]
#   KUBEVIRT_DIR holds tests.test(.xz) and virtctl(.xz), as built from KubeVirt's source
#   (`go test -c ./tests/`, `go build ./cmd/virtctl`).
#   SPEC-LIST (default tests/kubevirt-suite/specs.txt): lines "FILE:LINE<TAB>EXPECT<TAB>TEXT<TAB>WHY"
#   with EXPECT `pass` or `fail` (WHY says why it fails on Ferrovirt); `#` starts a comment.
# Environment: KUBEVIRT_SUITE_OUT (default /var/tmp/ferrovirt-kubevirt-suite) gets the JSON
# report, the suite's log and artifacts; KUBEVIRT_SUITE_TIMEOUT (default 60m) bounds the run;
# KUBEVIRT_SUITE_EVERY=N runs only every N-th listed spec (a fixed subset, for CI).
# Exit status: 0 when every spec expected to pass passed and the virtctls agree, 1 when a spec
# expected to pass did not (or one expected to fail passed: the list is out of date) or they
# disagree, 2 when the suite could not run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../cluster/lib/common.sh
source "$here/../cluster/lib/common.sh"

kv_dir=${1:-}
list=${2:-$here/specs.txt}
out=${KUBEVIRT_SUITE_OUT:-/var/tmp/ferrovirt-kubevirt-suite}
timeout=${KUBEVIRT_SUITE_TIMEOUT:-60m}

fail() { echo "kubevirt-suite: $*" >&2; exit 2; }
[[ -n $kv_dir ]] || fail "usage: $0 KUBEVIRT_DIR [SPEC-LIST] (the directory with KubeVirt's tests.test and virtctl)"
[[ -d $kv_dir ]] || fail "$kv_dir: no such directory; it must hold KubeVirt's tests.test and virtctl (or their .xz)"
[[ -r $list ]] || fail "$list: no spec list"
[[ -r $ADMIN_KUBECONFIG ]] || fail "no local cluster ($ADMIN_KUBECONFIG is missing): run hack/up.sh first"

# unpack NAME: the binary, unpacked once per content (its .xz's SHA-256) into the cache; the
# copies unpacked from other contents of NAME are removed.
bins=$CACHE_DIR/kubevirt-suite
unpack() {
  local name=$1 src key old
  if [[ -x $kv_dir/$name ]]; then
    echo "$kv_dir/$name"
    return
  fi
  src=$kv_dir/$name.xz
  [[ -r $src ]] || fail "$kv_dir has neither $name nor $name.xz"
  key=$name-$(sha256sum "$src" | cut -c1-16)
  if [[ ! -x $bins/$key/$name ]]; then
    mkdir -p "$bins/$key"
    xz -dc "$src" >"$bins/$key/$name.tmp" || fail "cannot unpack $src"
    chmod +x "$bins/$key/$name.tmp"
    mv "$bins/$key/$name.tmp" "$bins/$key/$name"
  fi
  for old in "$bins"/*/"$name"; do
    [[ $old == "$bins/$key/$name" ]] || rm -rf "$(dirname "$old")"
  done
  echo "$bins/$key/$name"
}
suite=$(unpack tests.test)
virtctl=$(unpack virtctl)

# The suite changes the KubeVirt CR (useEmulation below; its Go client's updates of the CR
# write empty certificateRotateStrategy, customizeComponents and workloadUpdateStrategy): hold
# the lock that the tests changing cluster-wide objects hold (tests/src/cluster_lock.rs) for
# the whole run, and put the CR's whole spec back as it was when the run ends, however it ends.
# The suite and the parity check run without the lock's descriptor, so that nothing they leave
# running holds the lock after this script.
lock=/run/lock/ferrovirt-cluster-tests.lock
exec {lock_fd}>>"$lock"
if ! flock -n "$lock_fd"; then
  echo "kubevirt-suite: waiting for $lock: a test is changing the cluster" >&2
  flock "$lock_fd"
fi
spec_was=$(kubectl_admin -n kubevirt get kubevirt kubevirt -o jsonpath='{.spec}')
[[ $spec_was == '{'* ]] || fail "no KubeVirt CR kubevirt/kubevirt: run hack/up.sh first"
restore_spec() {
  kubectl_admin -n kubevirt patch kubevirt kubevirt --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/spec\",\"value\":$spec_was}]" >/dev/null ||
    echo "kubevirt-suite: could not put the KubeVirt CR's spec back to $spec_was" >&2
}
trap restore_spec EXIT
# A signal stops the suite (it cleans up on SIGTERM as on an interrupt, through timeout, which
# passes it on) and then ends the script through exit, so that the EXIT trap runs then too.
suite_pid=
on_signal() {
  if [[ -n $suite_pid ]]; then
    kill -TERM "$suite_pid" 2>/dev/null || true
    wait "$suite_pid" || true
  fi
  exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'on_signal 129' HUP

# The namespaces the suite creates must not exist yet: remove what an earlier run left.
kubectl_admin delete namespace --ignore-not-found --wait=true --timeout=180s \
  kubevirt-test-default1 kubevirt-test-alternative1 kubevirt-test-operator1 kubevirt-test-privileged1 >/dev/null

# The suite refuses to start unless every node running virt-handler offers KVM and vhost-net
# as devices, or the KubeVirt CR sets useEmulation. Without them (this machine has no
# /dev/vhost-net, and its /dev/kvm runs no ordinary guest) VMs run on QEMU TCG anyway: say so
# in the CR for the run, as a KubeVirt user on such nodes does (restore_spec puts it back).
devices_everywhere() {
  local kvm vhost
  kvm=$(kubectl_admin get nodes -l kubevirt.io/schedulable=true -o jsonpath='{range .items[*]}{.status.allocatable.devices\.kubevirt\.io/kvm}{" "}{end}')
  vhost=$(kubectl_admin get nodes -l kubevirt.io/schedulable=true -o jsonpath='{range .items[*]}{.status.allocatable.devices\.kubevirt\.io/vhost-net}{" "}{end}')
  [[ -n ${kvm// /} && -n ${vhost// /} && ! " $kvm $vhost " =~ " 0 " ]]
}
emulation_was=$(kubectl_admin -n kubevirt get kubevirt kubevirt \
  -o jsonpath='{.spec.configuration.developerConfiguration.useEmulation}')
if [[ $emulation_was != true ]] && ! devices_everywhere; then
  echo "kubevirt-suite: the nodes offer no devices.kubevirt.io/vhost-net (or kvm): running with useEmulation: true" >&2
  set_emulation() {
    kubectl_admin -n kubevirt patch kubevirt kubevirt --type=merge \
      -p "{\"spec\":{\"configuration\":{\"developerConfiguration\":{\"useEmulation\":$1}}}}" >/dev/null
  }
  set_emulation true
  kubectl_admin -n kubevirt wait kubevirt kubevirt --for=condition=Available --timeout=300s >/dev/null
fi

rm -rf "$out"
mkdir -p "$out/artifacts"
# The suite's settings: KubeVirt's tests/default-config.json names storage classes the
# storage specs use; none of the listed specs needs one.
cat >"$out/config.json" <<'JSON'
{
  "storageClassLocal": "local",
  "storageClassHostPath": "host-path",
  "storageClassBlockVolume": "block-volume",
  "storageClassHostPathSeparateDevice": "host-path-sd"
}
JSON

# The specs to run: all listed, or with KUBEVIRT_SUITE_EVERY=N the fixed subset of every N-th
# (the 1st, the N+1-th, ...), which is what CI runs to stay within its time.
every=${KUBEVIRT_SUITE_EVERY:-1}
[[ $every =~ ^[1-9][0-9]*$ ]] || fail "KUBEVIRT_SUITE_EVERY=$every is not a positive number"
grep -v -e '^#' -e '^[[:space:]]*$' "$list" | awk -v n="$every" '(NR - 1) % n == 0' >"$out/specs.txt"
# focus-file takes FILE:LINE, FILE a regexp on the spec's source path.
focus=()
while IFS=$'\t' read -r location _; do
  focus+=("--ginkgo.focus-file=$location")
done <"$out/specs.txt"
((${#focus[@]})) || fail "$list lists no spec"
((every == 1)) || echo "kubevirt-suite: KUBEVIRT_SUITE_EVERY=$every: every ${every}th spec of the list" >&2

echo "kubevirt-suite: ${#focus[@]} specs from $list; log: $out/suite.log" >&2
rc=0
timeout --kill-after=60 "$timeout" "$suite" \
  -kubeconfig="$ADMIN_KUBECONFIG" -installed-namespace=kubevirt \
  -container-prefix="registry:$REGISTRY_PORT/kubevirt" -container-tag=latest \
  -virtctl-path="$virtctl" -kubectl-path="$KUBE_BIN/kubectl" \
  -config="$out/config.json" -artifacts="$out/artifacts" \
  "${focus[@]}" --ginkgo.v --ginkgo.no-color --ginkgo.timeout="$timeout" \
  --ginkgo.json-report="$out/report.json" {lock_fd}>&- >"$out/suite.log" 2>&1 &
# In the background, so that a signal's trap runs at once instead of after the suite.
suite_pid=$!
wait "$suite_pid" || rc=$?
suite_pid=
[[ -s $out/report.json ]] || fail "the suite wrote no report (exit $rc); the end of $out/suite.log:
$(tail -n 30 "$out/suite.log")"

suite_rc=0
python3 "$here/report.py" "$out/report.json" "$out/specs.txt" | tee "$out/summary.txt" || suite_rc=$?

# The same commands through KubeVirt's virtctl and through ours, built from this checkout (a
# fresh machine has none, and an older build would compare old code).
ours=${CARGO_TARGET_DIR:-$here/../../target}/release/virtctl
echo
(cd "$here/../.." && cargo build --release --quiet --locked -p virtctl) {lock_fd}>&- ||
  fail "cargo build --release -p virtctl failed"
parity_rc=0
"$here/virtctl-parity.sh" "$virtctl" "$ours" {lock_fd}>&- || parity_rc=$?
((suite_rc == 0 && parity_rc == 0))
