#!/bin/sh
# Linux boot test on KVM through Ferrovirt's VMM, for hosts WITH hardware virtualization.
#
# Boots our guest kernel and the tiny initramfs (guest-images), waits for the ready marker on
# the serial console, then sends SIGTERM (graceful shutdown: ctrl-alt-del through the i8042,
# the VM is stopped after the grace period if the guest does not go down) and checks the VMM
# exits. On a PVM host (this project's development machines) the VMM refuses at once with
# "needs hardware virtualization: this /dev/kvm is PVM" and this script fails with that message:
# a stock Linux kernel cannot boot on PVM. Not part of `cargo test`.
#
# Usage: vmm/scripts/linux-boot-test.sh [KERNEL [INITRAMFS [READY_MARKER]]]
#   defaults: $FERROVIRT_GUEST_IMAGES_CACHE/current/vmlinux, .../initramfs.cpio.gz,
#             FERROVIRT-GUEST-READY
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${FERROVIRT_GUEST_IMAGES_CACHE:-/var/cache/ferrovirt/guest-images}
kernel=${1:-$cache/current/vmlinux}
initramfs=${2:-$cache/current/initramfs.cpio.gz}
marker=${3:-FERROVIRT-GUEST-READY}
deadline=${LINUX_BOOT_DEADLINE:-120}

(cd "$root" && cargo build -p vmm --release --quiet)
vmm=$root/target/release/vmm
for f in "$kernel" "$initramfs"; do
    [ -e "$f" ] || { echo "missing $f: build it with guest-images/build.sh" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
start=$(date +%s%N)
"$vmm" --require-hardware-virt --kernel "$kernel" --initramfs "$initramfs" \
    --cmdline "console=ttyS0 reboot=k panic=-1" --memory 256 --transport mmio \
    --serial "file:$tmp/serial.log" --shutdown-grace 20 2>"$tmp/vmm.err" &
pid=$!
while ! grep -q "$marker" "$tmp/serial.log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" || true
        echo "linux boot: the VMM exited before the ready marker:" >&2
        cat "$tmp/vmm.err" >&2
        tail -20 "$tmp/serial.log" 2>/dev/null >&2 || true
        exit 1
    fi
    if [ $(( ($(date +%s%N) - start) / 1000000000 )) -ge "$deadline" ]; then
        echo "linux boot: no ready marker within ${deadline}s; serial tail:" >&2
        tail -20 "$tmp/serial.log" >&2
        exit 1
    fi
    sleep 0.05
done
ready_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "linux boot: ready marker after ${ready_ms} ms"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
cat "$tmp/vmm.err"
echo "linux boot: VMM exit status $status"
[ "$status" -eq 0 ] || [ "$status" -eq 3 ]
