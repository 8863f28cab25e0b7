#!/usr/bin/env bash
# Runs every fuzz target of the project for a bounded time: the image parsers of bootdisk/fuzz
# (partition tables, ext4, vfat, qcow2, grub.cfg, BLS, extlinux) and the guest-facing input of
# vmm/fuzz (virtio-blk requests, virtio-net frames, vsock packets, PCI configuration space and
# BARs, the migration stream, the QEMU guest agent's replies to virt-launcher), each from its
# committed corpus or seeds. Prints the executions and the time per target; fails if any
# target finds a crash.
# Installs cargo-fuzz into /var/cache/ferrovirt/cargo-fuzz when it is missing; needs the
# nightly toolchain (`rustup toolchain install nightly`). The fuzz builds share
# /var/cache/ferrovirt/fuzz-target.
# Usage: hack/fuzz.sh [SECONDS_PER_TARGET]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
cache=/var/cache/ferrovirt
export PATH=$cache/cargo-fuzz/bin:$PATH
export CARGO_TARGET_DIR=$cache/fuzz-target
rustup run nightly rustc --version >/dev/null 2>&1 || {
  echo "fuzz: the nightly toolchain is missing (rustup toolchain install nightly)" >&2
  exit 1
}
if ! command -v cargo-fuzz >/dev/null; then
  echo "fuzz: installing cargo-fuzz into $cache/cargo-fuzz"
  cargo install --locked --root "$cache/cargo-fuzz" cargo-fuzz
fi
rc=0
for dir in bootdisk/fuzz vmm/fuzz; do
  t0=$(date +%s)
  "$dir/run.sh" "$seconds" || rc=1
  echo "fuzz: $dir done in $(($(date +%s) - t0)) s (${seconds} s per target)"
done
exit $rc
