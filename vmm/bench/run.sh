#!/bin/sh
# Builds the release VMM and the test guests, then runs the boot benchmark and the live
# migration benchmark (bench/migration.rs).
# Usage: vmm/bench/run.sh [--runs N] [--guest PATH] ...
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
guests=${FERROVIRT_TEST_GUESTS:-/var/cache/ferrovirt/guest-images/current/test-guests}
"$root/guest-images/test-guests/build.sh" "$guests" >/dev/null
(cd "$root" && cargo build -p vmm --release --quiet)
python3 "$root/vmm/bench/boot_bench.py" --vmm "${CARGO_TARGET_DIR:-$root/target}/release/vmm" \
    --guest "$guests/serial.elf" "$@"
(cd "$root" && FERROVIRT_TEST_GUESTS=$guests cargo bench -p vmm --bench migration --quiet)
