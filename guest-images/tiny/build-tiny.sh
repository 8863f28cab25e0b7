#!/bin/bash
# Builds the Ferrovirt tiny guest ("our cirros") from busybox-static:
#
#   build-tiny.sh OUT_DIR STOCK_KERNEL_RELEASE STOCK_KERNEL_TREE
#
# STOCK_KERNEL_TREE is that kernel's package extracted (hack/debian-kernel.sh).
#
# OUT_DIR receives:
#   initramfs.cpio.gz        the tiny system as an initramfs, for our kernel (no modules)
#   rootdisk.img             the same system on an ext4 raw disk labelled ferrovirt-root
#   stock/vmlinuz            Debian's stock cloud kernel (STOCK_KERNEL_RELEASE)
#   stock/initramfs.cpio.gz  the tiny initramfs plus that kernel's virtio, vsock and fs modules
# All files get fixed owners and mtimes, so the same inputs give the same bytes.
set -euo pipefail

out_dir=$1
stock_release=$2
stock_tree=$3 # the stock kernel's package, extracted (hack/debian-kernel.sh)
here=$(cd "$(dirname "$0")" && pwd)
epoch=${SOURCE_DATE_EPOCH:-0}
# e2fsprogs reads E2FSPROGS_FAKE_TIME as "now" (0 means unset, hence at least 1).
export SOURCE_DATE_EPOCH=$epoch E2FSPROGS_FAKE_TIME=$((epoch > 0 ? epoch : 1))
default_password=gocubsgo
rootdisk_mib=64

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$out_dir/stock"

echo "tiny: assembling the busybox tree"
mkdir -p "$tree"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,root,home/cirros,mnt,var/lib,lib/modules}
cp /bin/busybox "$tree/bin/busybox"
for applet in $("$tree/bin/busybox" --list-full); do
    [ -e "$tree/$applet" ] || ln -s /bin/busybox "$tree/$applet"
done
cp -a "$here/overlay/." "$tree/"
# vsock from the shell (busybox has none): static, so the tree needs no libc.
gcc -static -Os -Wall -Wextra -Werror -s -o "$tree/usr/bin/fv-vsock" "$here/fv-vsock.c"
chmod 1777 "$tree/tmp"
chmod 700 "$tree/root"

hash=$(/bin/busybox mkpasswd -m sha512 "$default_password" ferrovirt.tiny)
cat >"$tree/etc/passwd" <<PASSWD
root:x:0:0:root:/root:/bin/sh
cirros:x:1000:1000:cirros:/home/cirros:/bin/sh
PASSWD
cat >"$tree/etc/shadow" <<SHADOW
root:$hash:0:0:99999:7:::
cirros:$hash:0:0:99999:7:::
SHADOW
chmod 600 "$tree/etc/shadow"
cat >"$tree/etc/group" <<GROUP
root:x:0:
tty:x:5:
wheel:x:10:root,cirros
cirros:x:1000:
GROUP
echo /bin/sh >"$tree/etc/shells"
echo ferrovirt >"$tree/etc/hostname"
printf '127.0.0.1\tlocalhost\n' >"$tree/etc/hosts"
touch "$tree/etc/resolv.conf"
printf 'Ferrovirt tiny guest (\\n on \\l). Login: cirros or root, password %s\n\n' \
    "$default_password" >"$tree/etc/issue"
cat >"$tree/etc/profile" <<'PROFILE'
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PS1='\u@\h:\w\$ '
PROFILE
chown -R 1000:1000 "$tree/home/cirros"
mknod -m 600 "$tree/dev/console" c 5 1
mknod -m 666 "$tree/dev/null" c 1 3

# Fixed mtimes everywhere, then pack: cpio (newc) for initramfs, mkfs.ext4 -d for the disk.
pack_cpio() { # TREE OUT
    find "$1" -exec touch -h -d "@$epoch" {} +
    (cd "$1" && find . -print0 | LC_ALL=C sort -z |
        cpio --quiet --null --reproducible -o -H newc) | gzip -n -9 >"$2"
}

echo "tiny: root disk ($rootdisk_mib MiB ext4)"
find "$tree" -exec touch -h -d "@$epoch" {} +
rm -f "$out_dir/rootdisk.img"
mkfs.ext4 -q -F -L ferrovirt-root -U 3c4c5cf2-47b6-4c1f-8e0a-6f3c0d1e2a01 \
    -E root_owner=0:0,hash_seed=3c4c5cf2-47b6-4c1f-8e0a-6f3c0d1e2a01 \
    -d "$tree" "$out_dir/rootdisk.img" "${rootdisk_mib}M"
# mke2fs 1.47.0 stamps the current time on the superblock and on every inode's ctime/crtime:
# reset them with debugfs so the image is the same bytes for the same inputs.
{
    for field in mkfs_time wtime lastcheck mtime; do echo "ssv $field $epoch"; done
    for inode in '<2>' '<7>' '<8>' '<11>'; do
        for field in atime ctime mtime crtime; do echo "sif $inode $field $epoch"; done
    done
    (cd "$tree" && find . -mindepth 1) | while read -r path; do
        for field in atime ctime mtime crtime; do echo "sif \"${path#.}\" $field $epoch"; done
    done
} | debugfs -w -f - "$out_dir/rootdisk.img" >/dev/null 2>&1

echo "tiny: initramfs"
cp "$here/init" "$tree/init"
pack_cpio "$tree" "$out_dir/initramfs.cpio.gz"

echo "tiny: initramfs for Debian's stock kernel $stock_release"
modules_dir=$stock_tree/lib/modules/$stock_release
[ -f "$modules_dir/modules.dep" ] || {
    echo "tiny: $modules_dir/modules.dep is missing (hack/debian-kernel.sh extracts the package)" >&2
    exit 1
}
stock_modules="virtio_mmio virtio_pci virtio_blk virtio_net virtio_console virtio_rng
    vmw_vsock_virtio_transport isofs vfat nls_cp437 nls_iso8859_1 nls_ascii nls_utf8 ext4
    button evdev"
mkdir -p "$tree/lib/modules/$stock_release"
: >"$tree/lib/modules/$stock_release/ferrovirt-load-order"
for module in $stock_modules; do
    # Dependencies first, in the order modprobe would load them; built-in ones are skipped.
    modprobe -d "$stock_tree" -S "$stock_release" --show-depends "$module" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r path; do
    relative=${path#"$modules_dir/"}
    mkdir -p "$tree/lib/modules/$stock_release/$(dirname "$relative")"
    cp "$path" "$tree/lib/modules/$stock_release/$relative"
    echo "$relative" >>"$tree/lib/modules/$stock_release/ferrovirt-load-order"
done
pack_cpio "$tree" "$out_dir/stock/initramfs.cpio.gz"
cp "$stock_tree/boot/vmlinuz-$stock_release" "$out_dir/stock/vmlinuz"
echo "$stock_release" >"$out_dir/stock/kernelrelease"
cp "$tree/lib/modules/$stock_release/ferrovirt-load-order" "$out_dir/stock/modules.txt"
