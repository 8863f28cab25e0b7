#!/usr/bin/env bash
# Runs every Ferrovirt test on this machine, installing what the tests need first:
#   1. the Debian packages and the guest images (cached under /var/cache/ferrovirt);
#   2. the KVM test guests on QEMU TCG, then format and lint checks (rustfmt, clippy and
#      hack/shellcheck.sh);
#   2b. the nested-KVM tier: real Linux guests on the VMM inside an L1 VM with nested SVM
#      (hack/kvm-host.sh; vmm/tests/nested*.rs and vmm/launcher/tests/nested_launcher.rs, the
#      `nested` feature of both packages);
#   3. the local cluster with Ferrovirt installed, a worker node for migration and a VM running
#      (hack/up.sh);
#   4. cargo test for the whole workspace: unit, integration and end-to-end tests, but for the
#      operator's package;
#   5. the operator's tests alone and one at a time (they uninstall, reinstall, reconfigure and
#      upgrade Ferrovirt and read back the one KubeVirt CR, so nothing else may run beside
#      them, not even each other; they end with Ferrovirt installed as hack/up.sh leaves it);
#   4b. KubeVirt's own functional test suite on the listed specs (tests/kubevirt-suite/run.sh),
#      when its prebuilt binaries are there (FERROVIRT_KUBEVIRT_SUITE, or ../shared/kubevirt);
#   6. the local cluster's own checks (tests/cluster/test.sh, which ends with down and up).
# Steps 1 and 3 set up what the others need: when one fails, the run stops there. Every test
# step runs whatever an earlier one did; the summary at the end lists each step with its time
# and result, and the script exits non-zero if any step failed.
# Usage: hack/test.sh            (as root)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
((EUID == 0)) || {
  echo "hack/test.sh runs as root (it starts a local cluster and VMs)" >&2
  exit 1
}

started=$(date +%s)
summary=()
failed=0

# step NAME COMMAND...: runs COMMAND and records how it went.
step() {
  local name=$1 t0 rc
  shift
  printf '\n== %s (%s)\n' "$name" "$(date -u +%H:%M:%S)"
  t0=$(date +%s)
  "$@"
  rc=$?
  local took=$(($(date +%s) - t0))
  if ((rc == 0)); then
    summary+=("$(printf 'ok      %5ss  %s' "$took" "$name")")
  else
    summary+=("$(printf 'FAILED  %5ss  %s (exit %s)' "$took" "$name" "$rc")")
    failed=$((failed + 1))
  fi
  return $rc
}

# setup NAME COMMAND...: a step the rest depends on; the run ends when it fails.
setup() { step "$@" || finish; }

finish() {
  printf '\n== summary\n'
  printf '  %s\n' "${summary[@]}"
  printf '\nall tests done in %ss: %s step(s) failed\n' "$(($(date +%s) - started))" "$failed"
  ((failed == 0))
  exit
}

cargo_tests() {
  # Some integration tests run other packages' binaries (virt-api's cluster test runs virtctl).
  cargo build --workspace --bins --locked &&
    cargo test --workspace --locked --no-fail-fast --exclude operator
}

setup "installing build and test packages" hack/install-deps.sh
setup "building guest images (cached)" guest-images/build.sh
step "test guests on QEMU TCG (independent of Ferrovirt's VMM)" \
  guest-images/test-guests/run-qemu.sh /var/cache/ferrovirt/guest-images/current/test-guests
step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
step "shellcheck" hack/shellcheck.sh
# The launcher's nested tests run one at a time: two L1s side by side, one of them booting
# Debian's kernel, lost an L1 before its exit status (twice on 2026-12-01; one at a time, never).
nested_tier() {
  cargo test -p vmm --features nested --test nested --test nested_lifecycle --locked -- --nocapture &&
    cargo test -p launcher --features nested --test nested_launcher --locked -- --nocapture --test-threads=1
}
step "nested-KVM tier: Linux on the VMM and the launcher's KVM backend in an L1 with real KVM" \
  nested_tier
setup "local cluster with Ferrovirt and a worker node" hack/up.sh
step "cargo test" cargo_tests
# KubeVirt's own functional suite and virtctl, prebuilt (tests/kubevirt-suite/README.md): from
# $FERROVIRT_KUBEVIRT_SUITE, else ../shared/kubevirt beside the clone when it is there. Without
# them the step is reported as not run, never as passed.
kubevirt_suite=${FERROVIRT_KUBEVIRT_SUITE:-}
[[ -z $kubevirt_suite && -d ../shared/kubevirt ]] && kubevirt_suite=../shared/kubevirt
if [[ -n $kubevirt_suite ]]; then
  step "KubeVirt's functional suite: the specs of tests/kubevirt-suite/specs.txt" \
    tests/kubevirt-suite/run.sh "$kubevirt_suite"
else
  summary+=("NOT RUN        KubeVirt's functional suite: no suite (set FERROVIRT_KUBEVIRT_SUITE=DIR with KubeVirt's tests.test and virtctl)")
fi
step "virt-operator: install, keep in shape, uninstall, reinstall, configuration, certificate rotation, upgrade (alone)" \
  cargo test -p operator --locked --no-fail-fast -- --test-threads=1
step "local cluster checks" tests/cluster/test.sh
finish
