#!/bin/sh
# Runs every test guest under QEMU TCG (microvm), independent of ferrovirt's VMM, and checks
# that each reports success. Needs root for the tap device of the net guest.
# Usage: run-qemu.sh GUESTDIR   (GUESTDIR as built by build.sh)
set -eu
dir=${1:?usage: run-qemu.sh GUESTDIR}
command -v qemu-system-x86_64 >/dev/null || {
    echo "qemu-system-x86_64 missing: apt-get install -y qemu-system-x86" >&2
    exit 1
}
tmp=$(mktemp -d)
tap=fvqtest0
cleanup() {
    ip link del "$tap" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
qemu() {
    # isa-debug-exit makes the guest's power-off write exit QEMU with status 1 (code 0).
    timeout 60 qemu-system-x86_64 -M microvm -accel tcg -m 64M -nodefaults -no-user-config \
        -nographic -serial stdio -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=4 \
        -global virtio-mmio.force-legacy=false "$@" || [ $? -eq 1 ]
}
passed=0
failed=0
check() {
    name=$1
    shift
    if grep -q "^TEST $name ok" "$tmp/$name.out"; then
        echo "qemu-tcg $name: ok"
        passed=$((passed + 1))
    else
        echo "qemu-tcg $name: FAILED"
        cat "$tmp/$name.out"
        failed=$((failed + 1))
    fi
}

qemu -kernel "$dir/serial.elf" >"$tmp/serial.out"
check serial

qemu -kernel "$dir/rng.elf" -device virtio-rng-device >"$tmp/rng.out"
check rng

python3 -c "
d = bytearray(1 << 20)
d[0:18] = b'FERROVIRT-SECTOR-0'
open('$tmp/disk.img', 'wb').write(d)"
qemu -kernel "$dir/blk.elf" -drive "id=d0,file=$tmp/disk.img,format=raw,if=none" \
    -device virtio-blk-device,drive=d0,serial=qemu-disk >"$tmp/blk.out"
check blk
dd if="$tmp/disk.img" bs=1 skip=512 count=31 2>/dev/null | grep -q FERROVIRT-GUEST-WROTE-SECTOR-1 || {
    echo "qemu-tcg blk: sector 1 of the host file was not written"
    failed=$((failed + 1))
}

ip tuntap add dev "$tap" mode tap
sysctl -qw "net.ipv6.conf.$tap.disable_ipv6=1" || true
ip link set "$tap" up
# Host side: wait for the guest's 0x88b5 frame, then answer with one to the guest's MAC.
python3 - "$tap" >"$tmp/net-host.out" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # ETH_P_ALL
s.bind((sys.argv[1], 0))
s.settimeout(60)
while True:
    frame = s.recv(2048)
    if frame[12:14] == b"\x88\xb5" and frame[14:30] == b"FERROVIRT-NET-TX":
        break
print("host got guest frame from", frame[6:12].hex(":"))
reply = frame[6:12] + b"\x02\x00\x00\x00\x00\xfe" + b"\x88\xb5" + b"FERROVIRT-NET-RX"
s.send(reply.ljust(60, b"\0"))
PY
responder=$!
sleep 1 # let the responder bind before the guest sends
qemu -kernel "$dir/net.elf" -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
    -device virtio-net-device,netdev=n0,mac=02:00:00:00:00:01 >"$tmp/net.out"
wait "$responder" || true
cat "$tmp/net-host.out"
check net

qemu -kernel "$dir/counter.elf" >"$tmp/counter.out" 2>/dev/null &
sleep 3
kill $! 2>/dev/null || true
wait 2>/dev/null || true
if grep -q "^COUNT 00000002" "$tmp/counter.out"; then
    echo "qemu-tcg counter: ok"
    passed=$((passed + 1))
else
    echo "qemu-tcg counter: FAILED"
    cat "$tmp/counter.out"
    failed=$((failed + 1))
fi

# memtest runs until stopped: give it 3 seconds (timeout ends QEMU itself). With virtio-rng,
# as the migration test runs it.
timeout 3 qemu-system-x86_64 -M microvm -accel tcg -m 64M -nodefaults -no-user-config \
    -nographic -serial stdio -no-reboot -global virtio-mmio.force-legacy=false \
    -device virtio-rng-device -kernel "$dir/memtest.elf" >"$tmp/memtest.out" 2>/dev/null || true
if grep -q "^GEN 00000002 ok rng 10" "$tmp/memtest.out" && ! grep -q FAIL "$tmp/memtest.out"; then
    echo "qemu-tcg memtest: ok ($(grep -c '^GEN' "$tmp/memtest.out") generations checked)"
    passed=$((passed + 1))
else
    echo "qemu-tcg memtest: FAILED"
    tail -n 5 "$tmp/memtest.out"
    failed=$((failed + 1))
fi

# The fault guest triple-faults; with -no-reboot QEMU then exits with status 0.
if timeout 60 qemu-system-x86_64 -M microvm -accel tcg -m 64M -nodefaults -no-user-config \
    -nographic -serial stdio -no-reboot -kernel "$dir/fault.elf" >"$tmp/fault.out" &&
    grep -q "^TEST fault start" "$tmp/fault.out" && ! grep -q FAIL "$tmp/fault.out"; then
    echo "qemu-tcg fault: ok (triple fault ended the VM)"
    passed=$((passed + 1))
else
    echo "qemu-tcg fault: FAILED"
    cat "$tmp/fault.out"
    failed=$((failed + 1))
fi

# vsock.elf needs QEMU's vhost-vsock-device, i.e. /dev/vhost-vsock, which this kernel lacks.
if [ -e /dev/vhost-vsock ]; then
    echo "qemu-tcg vsock: not automated (needs a host-side vsock peer)"
else
    echo "qemu-tcg vsock: not run: QEMU needs /dev/vhost-vsock, absent here"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
