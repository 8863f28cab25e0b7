#!/usr/bin/env bash
# Linux boot on Ferrovirt's VMM against QEMU microvm with KVM, side by side in one L1 with
# nested KVM (hack/kvm-host.sh): our kernel and the tiny initramfs of guest-images, 256 MiB,
# 1 vCPU, start -> ready marker and peak RSS, medians and the ratio, and a per-phase table from
# the guest's own timestamps (guest-images/src/bin/nested-boot.rs). Nested timings are slow (TCG
# below the L1): compare the two columns with each other, never with figures from elsewhere.
#
# Usage: guest-images/bench-nested-boot.sh [--runs N]     (as root; guest-images/build.sh must have run)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=5
[[ ${1:-} == --runs ]] && runs=$2
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/ferrovirt/cargo-target}
images=${FERROVIRT_GUEST_IMAGES_CACHE:-/var/cache/ferrovirt/guest-images}/current
for f in vmlinux initramfs.cpio.gz; do
  [[ -e $images/$f ]] || { echo "bench-nested-boot: $images/$f is missing: run guest-images/build.sh" >&2; exit 1; }
done
cargo build --release --quiet -p vmm --bin vmm -p guest-images --bin nested-boot
bin=$CARGO_TARGET_DIR/release
qemu=$(command -v qemu-system-x86_64) || { echo "bench-nested-boot: qemu-system-x86_64 is missing (apt-get install qemu-system-x86)" >&2; exit 1; }
# QEMU's microvm firmware (qboot) and option ROMs live in /usr/share/qemu, some as links to
# /usr/share/seabios.
exec hack/kvm-host.sh --timeout 1800 \
  --file "$bin/vmm" --file "$bin/nested-boot" --file "$qemu" \
  --file /usr/share/qemu --file /usr/share/seabios \
  --file "$images/vmlinux" --file "$images/initramfs.cpio.gz" \
  -- "$bin/nested-boot" --vmm "$bin/vmm" --qemu "$qemu" \
  --kernel "$images/vmlinux" --initramfs "$images/initramfs.cpio.gz" --runs "$runs"
