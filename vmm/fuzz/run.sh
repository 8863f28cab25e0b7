#!/bin/sh
# Runs each fuzz target (the virtio-blk, virtio-net and vsock request parsers, PCI accesses, the
# migration stream, the guest agent's replies) for a bounded time (default 30 s each) from its
# corpus in corpus/ (committed: what earlier runs found, minimized with `cargo fuzz cmin`) and
# fails if any finds a crash.
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Usage: vmm/fuzz/run.sh [SECONDS_PER_TARGET]
set -eu
seconds=${1:-30}
cd "$(dirname "$0")"
command -v cargo-fuzz >/dev/null || {
    echo "cargo-fuzz missing: cargo install cargo-fuzz" >&2
    exit 1
}
rustup run nightly rustc --version >/dev/null 2>&1 || {
    echo "nightly toolchain missing: rustup toolchain install nightly" >&2
    exit 1
}
passed=0
failed=0
for target in blk_request net_tx net_rx vsock_tx pci_access migration_stream agent_reply console_control; do
    mkdir -p "corpus/$target"
    # No sanitizer: the code under test is safe Rust; libFuzzer still finds panics and hangs.
    if cargo +nightly fuzz run --sanitizer none "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 >"fuzz-$target.log" 2>&1; then
        echo "fuzz $target: ok ($(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "fuzz-$target.log" | tail -1), corpus of $(find "corpus/$target" -type f | wc -l) inputs)"
        passed=$((passed + 1))
    else
        echo "fuzz $target: FAILED"
        tail -40 "fuzz-$target.log"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
