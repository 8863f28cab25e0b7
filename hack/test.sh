#!/usr/bin/env bash
# Runs every Ferrovirt test on this machine, installing what the tests need first:
#   1. the Debian packages and the guest images (cached under /var/cache/ferrovirt);
#   2. the KVM test guests on QEMU TCG, then format and lint checks;
#   3. the local cluster with Ferrovirt installed and a VM running (hack/up.sh);
#   4. cargo test for the whole workspace: unit, integration and end-to-end tests, but for the
#      operator's package;
#   5. the operator's tests alone (they uninstall, reinstall, reconfigure and upgrade Ferrovirt,
#      so nothing else may run beside them; they end with Ferrovirt installed as hack/up.sh
#      leaves it);
#   6. the local cluster's own checks (tests/cluster/test.sh, which ends with down and up).
# Usage: hack/test.sh            (as root)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
started=$(date +%s)

step "installing build and test packages"
hack/install-deps.sh

step "building guest images (cached)"
guest-images/build.sh

step "test guests on QEMU TCG (independent of Ferrovirt's VMM)"
guest-images/test-guests/run-qemu.sh /var/cache/ferrovirt/guest-images/current/test-guests

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "local cluster with Ferrovirt"
hack/up.sh

step "cargo test"
# Some integration tests run other packages' binaries (virt-api's cluster test runs virtctl).
cargo build --workspace --bins --locked
cargo test --workspace --locked --no-fail-fast --exclude operator

step "virt-operator: install, keep in shape, uninstall, reinstall, configuration, certificate rotation, upgrade (alone)"
cargo test -p operator --locked --no-fail-fast

step "local cluster checks"
tests/cluster/test.sh

printf '\nall tests done in %ss\n' "$(( $(date +%s) - started ))"
