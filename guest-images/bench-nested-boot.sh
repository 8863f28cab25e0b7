#!/usr/bin/env bash
# Linux boot on Ferrovirt's VMM against QEMU with KVM, side by side in one L1 with nested KVM
# (hack/kvm-host.sh), alternately, 1 vCPU; medians of start -> marker and peak RSS, the ratios,
# and per-phase tables (guest-images/src/bin/nested-boot.rs). Nested timings are slow (TCG below
# the L1): compare the columns with each other, never with figures from elsewhere.
#
# Usage (as root; guest-images/build.sh must have run):
#   guest-images/bench-nested-boot.sh [--runs N]
#       our kernel and the tiny initramfs, 256 MiB: the VMM's microVM against QEMU microvm
#   guest-images/bench-nested-boot.sh [--runs N] --disk IMAGE --kernel KERNEL --initramfs INITRD
#                                     --cmdline CMDLINE [--firmware] [--memory MIB]
#       a distribution's kernel, initramfs and disk, 512 MiB by default: the VMM's PCI machine
#       against QEMU q35 with the same kernel (and with --firmware QEMU q35 booting the disk
#       through SeaBIOS and its own grub), to the login prompt
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/ferrovirt/cargo-target}
images=${FERROVIRT_GUEST_IMAGES_CACHE:-/var/cache/ferrovirt/guest-images}/current
runs=5 disk='' kernel=$images/vmlinux initramfs=$images/initramfs.cpio.gz cmdline='' memory=''
extra=()
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --disk) disk=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --initramfs) initramfs=$2; shift 2 ;;
    --cmdline) cmdline=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    --firmware) extra+=(--firmware); shift ;;
    *) echo "bench-nested-boot: unknown argument $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done
for f in "$kernel" "$initramfs" ${disk:+"$disk"}; do
  [[ -e $f ]] || { echo "bench-nested-boot: $f is missing: run guest-images/build.sh" >&2; exit 1; }
done
if [[ -n $disk ]]; then
  [[ -n $cmdline ]] || { echo "bench-nested-boot: --disk needs --cmdline (the kernel's, with its root=)" >&2; exit 2; }
  extra+=(--disk "$disk" --cmdline "$cmdline" --memory "${memory:-512}")
elif [[ -n $memory ]]; then
  extra+=(--memory "$memory")
fi
cargo build --release --quiet -p vmm --bin vmm -p guest-images --bin nested-boot
bin=$CARGO_TARGET_DIR/release
qemu=$(command -v qemu-system-x86_64) || { echo "bench-nested-boot: qemu-system-x86_64 is missing (apt-get install qemu-system-x86)" >&2; exit 1; }
# The L1 holds the disk and a copy per boot in memory.
mem=3072
[[ -n $disk ]] && mem=$((3072 + 2 * $(du -m --apparent-size "$disk" | cut -f1)))
# QEMU's firmware (qboot, SeaBIOS) and option ROMs live in /usr/share/qemu, some as links to
# /usr/share/seabios.
exec hack/kvm-host.sh --timeout 3600 --mem "$mem" \
  --file "$bin/vmm" --file "$bin/nested-boot" --file "$qemu" \
  --file /usr/share/qemu --file /usr/share/seabios \
  --file "$kernel" --file "$initramfs" ${disk:+--file "$disk"} \
  -- "$bin/nested-boot" --vmm "$bin/vmm" --qemu "$qemu" \
  --kernel "$kernel" --initramfs "$initramfs" --runs "$runs" --work /var/tmp/nested-boot "${extra[@]}"
