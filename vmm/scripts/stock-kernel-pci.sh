#!/usr/bin/env bash
# Boots Debian's stock cloud kernel on this VMM's PCI machine (virtio-pci, MSI-X, ACPI) with real
# KVM: inside an L1 VM with nested KVM (hack/kvm-host.sh), since this project's /dev/kvm is PVM.
# Not part of `cargo test`.
#
# The guest is guest-images' stock kernel with its initramfs plus an overlay: the virtio-pci,
# ACPI button and evdev modules, and a check (/sbin/ferrovirt-pci-check, run once by init) that
# logs to the kernel log what the guest found (PCI functions, drivers, interrupts, iomem), writes
# and reads back the virtio-blk disk, reads the virtio-rng, then waits for the ACPI power button
# and powers off (or reboots, with ferrovirt.check=reboot on the command line). Three boots:
#   msix:   MSI-X; the VMM's SIGTERM presses the power button; the guest enters S5;
#   reboot: the guest reboots through the FADT reset register;
#   intx:   pci=nomsi, INTx (level-triggered, resampled irqfds); power button and S5 again.
# Each must end with the VMM's exit status 0 and its log naming S5, the reset register or the
# power button; the whole console of each boot is printed.
#
# Usage: vmm/scripts/stock-kernel-pci.sh
#   KVM_HOST=path/to/kvm-host.sh (default: hack/kvm-host.sh of this tree)
#   FERROVIRT_GUEST_IMAGES_CACHE (default /var/cache/ferrovirt/guest-images)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kvm_host=${KVM_HOST:-$root/hack/kvm-host.sh}
cache=${FERROVIRT_GUEST_IMAGES_CACHE:-/var/cache/ferrovirt/guest-images}/current/stock
[[ -x $kvm_host ]] || { echo "stock-kernel-pci: $kvm_host is missing (the nested-KVM harness)" >&2; exit 1; }
[[ -e $cache/vmlinuz ]] || { echo "stock-kernel-pci: $cache/vmlinuz is missing: run guest-images/build.sh" >&2; exit 1; }
release=$(cat "$cache/kernelrelease")
# The modules of that kernel from its package, extracted (never installed on this host).
kernel_tree=$("$root/hack/debian-kernel.sh" | tail -n 1)
modules=$kernel_tree/lib/modules/$release
[[ -f $modules/modules.dep ]] ||
    { echo "stock-kernel-pci: $modules is missing: guest-images has $release, apt has another; rerun guest-images/build.sh" >&2; exit 1; }

(cd "$root" && cargo build -p vmm --release --quiet)
vmm=${CARGO_TARGET_DIR:-$root/target}/release/vmm

work=$(mktemp -d /tmp/stock-kernel-pci.XXXXXX)
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$tree/sbin" "$tree/etc" "$tree/lib/modules/$release" "$work/base"
zcat "$cache/initramfs.cpio.gz" | (cd "$work/base" && cpio -idm --quiet 2>/dev/null)
order=$tree/lib/modules/$release/ferrovirt-load-order
for module in virtio_pci button evdev; do
    modprobe -d "$kernel_tree" -S "$release" --show-depends "$module" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r path; do
    relative=${path#"$modules/"}
    mkdir -p "$tree/lib/modules/$release/$(dirname "$relative")"
    cp "$path" "$tree/lib/modules/$release/$relative"
    echo "$relative"
done >"$work/extra-modules"
# virtio and the PCI transport first, then the image's own order, then button and evdev.
{
    grep -E 'virtio/virtio(_ring|_pci.*)?\.ko$' "$work/extra-modules"
    grep -vE '/virtio(_ring)?\.ko$' "$work/base/lib/modules/$release/ferrovirt-load-order"
    grep -E '/(button|evdev)\.ko$' "$work/extra-modules"
} >"$order"
sed 's|^::sysinit:/etc/init.d/rcS$|&\n::once:/sbin/ferrovirt-pci-check|' \
    "$work/base/etc/inittab" >"$tree/etc/inittab"
cat >"$tree/sbin/ferrovirt-pci-check" <<'EOF'
#!/bin/sh
log() { echo "fv-check: $*" >/dev/kmsg; }
log "PCI devices:"
for d in /sys/bus/pci/devices/*; do
    driver=$(basename "$(readlink "$d/driver" 2>/dev/null)" 2>/dev/null)
    log "  ${d##*/} $(cat "$d/vendor"):$(cat "$d/device") class $(cat "$d/class") irq $(cat "$d/irq") driver $driver"
done
grep -iE "PCI|ACPI" /proc/iomem | while read -r line; do log "  iomem: $line"; done
if [ -b /dev/vda ]; then
    dd if=/dev/urandom of=/tmp/pattern bs=4096 count=64 2>/dev/null
    dd if=/tmp/pattern of=/dev/vda bs=4096 count=64 conv=fsync 2>/dev/null
    echo 3 >/proc/sys/vm/drop_caches
    a=$(md5sum </tmp/pattern)
    b=$(dd if=/dev/vda bs=4096 count=64 2>/dev/null | md5sum)
    if [ "$a" = "$b" ]; then log "  virtio-blk: 256 KiB written and read back ok"; else log "  virtio-blk: MISMATCH"; fi
fi
[ -e /dev/hwrng ] && log "  virtio-rng: $(head -c 8 /dev/hwrng | od -An -tx1 | tr -d ' \n')"
[ -e /dev/vsock ] && log "  vsock: /dev/vsock present"
grep -E "PCI-MSI|IO-APIC" /proc/interrupts | while read -r line; do log "  irq: $line"; done
case " $(cat /proc/cmdline) " in
*" ferrovirt.check=reboot "*) log "rebooting"; reboot; exit 0 ;;
esac
dev=
for e in /sys/class/input/event*; do
    [ "$(cat "$e/device/name" 2>/dev/null)" = "Power Button" ] && dev=/dev/input/${e##*/}
done
log "FV-CHECK-READY power button device ${dev:-none}"
[ -n "$dev" ] || exit 0
head -c 24 "$dev" >/dev/null
log "power button pressed: powering off"
poweroff
EOF
chmod 755 "$tree/sbin/ferrovirt-pci-check"
(cd "$tree" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -9) >"$work/overlay.cpio.gz"
cat "$cache/initramfs.cpio.gz" "$work/overlay.cpio.gz" >"$work/initrd.cpio.gz"
truncate -s 16M "$work/disk.img"

cat >"$work/run.sh" <<'EOF'
#!/bin/sh
run() { # NAME EXTRA_CMDLINE MODE(term: SIGTERM once the check is ready | exit: wait)
    name=$1 extra=$2 mode=$3
    echo "===== run $name: extra cmdline '$extra'"
    rm -f /tmp/serial.log /tmp/v.sock*
    cp /fv/disk.img /tmp/disk.img
    start=$(date +%s)
    RUST_LOG=vmm=info /fv/vmm --kernel /fv/vmlinuz --initramfs /fv/initrd.cpio.gz \
        --cmdline "console=ttyS0 root=ram panic=-1 $extra" --memory 512 --cpus 2 \
        --disk /tmp/disk.img --rng --vsock 3,/tmp/v.sock --transport pci \
        --serial file:/tmp/serial.log --shutdown-grace 300 2>/tmp/vmm.err &
    pid=$!
    n=0
    while kill -0 $pid 2>/dev/null; do
        if [ "$mode" = term ] && grep -q FV-CHECK-READY /tmp/serial.log 2>/dev/null; then
            echo "run $name: guest ready after $(($(date +%s) - start)) s: SIGTERM to the vmm"
            kill -TERM $pid
            break
        fi
        n=$((n + 1))
        [ $n -gt 900 ] && { echo "run $name: deadline: SIGINT"; kill -INT $pid; break; }
        sleep 1
    done
    wait $pid
    echo "run $name: vmm exit status $? after $(($(date +%s) - start)) s"
    echo "----- run $name: vmm stderr"
    cat /tmp/vmm.err
    echo "----- run $name: serial log"
    cat /tmp/serial.log
    echo "----- run $name: end"
}
run msix "" term
run reboot "ferrovirt.check=reboot" exit
run intx "pci=nomsi" term
EOF

out=$work/l1.out
"$kvm_host" --timeout 3000 --file "$vmm:/fv/vmm" --file "$cache/vmlinuz:/fv/vmlinuz" \
    --file "$work/initrd.cpio.gz:/fv/initrd.cpio.gz" --file "$work/disk.img:/fv/disk.img" \
    --file "$work/run.sh:/fv/run.sh" -- sh /fv/run.sh | tee "$out"

failed=0
expect() { # WHAT PATTERN
    if grep -qE "$2" "$out"; then echo "stock-kernel-pci: ok: $1"; else echo "stock-kernel-pci: FAILED: $1"; failed=1; fi
}
expect "msix boot exits 0" "run msix: vmm exit status 0"
expect "reboot boot exits 0" "run reboot: vmm exit status 0"
expect "intx boot exits 0" "run intx: vmm exit status 0"
expect "the power button was pressed" "shutdown: pressed the ACPI power button"
expect "the guest entered S5" "acpi: the guest entered S5"
expect "the guest reset through the reset register" "reset the machine through the reset register"
expect "virtio-blk over PCI" "virtio-blk: 256 KiB written and read back ok"
expect "MSI-X vectors" "PCI-MSI.*virtio0-req"
expect "INTx lines" "IO-APIC +1[6-9]-fasteoi +virtio0"
exit $failed
