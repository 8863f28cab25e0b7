#!/bin/bash
# Builds Ferrovirt's stand-in for KubeVirt's alpine-container-disk-demo, the image KubeVirt's
# functional suite and documentation boot most: none of KubeVirt's demo images can be pulled
# here, and the stand-in is built like the original, a partitioned disk that carries its own
# kernel and boot files, so a VM of it takes the boot path a user's image takes:
#
#   standins/build.sh SET_DIR          (guest-images/build.sh runs it after tiny/build-tiny.sh)
#
# From what build-tiny.sh left in SET_DIR: Debian's stock cloud kernel and its initramfs
# (stock/), the tiny guest's busybox system with that kernel's virtio modules. The disk, as
# Alpine's "virt" disk images are laid out: an MBR, one bootable ext4 partition from 1 MiB holding the root
# with /boot/vmlinuz-virt, /boot/initramfs-virt and /boot/extlinux.conf (Alpine's
# update-extlinux layout: a hidden menu whose MENU DEFAULT entry boots root=UUID=...). The
# initramfs does what Alpine's mkinitfs does here: loads the modules, mounts root= and
# switch_roots to its /sbin/init; when the root cannot be mounted it says so and powers off,
# it never starts a system of its own. The console behaves as the original's: `localhost login: `,
# root without a password, the prompt `localhost:~# ` (KubeVirt's console.LoginToAlpine).
# No bootloader is installed in the MBR: firmware (SeaBIOS, OVMF) cannot boot this stand-in.
#
# SET_DIR receives:
#   standins/alpine/disk.qcow2        the disk (qcow2, compressed)
#   standins/alpine/info.txt          root UUID, kernel release, sizes
#   oci/alpine-containerdisk          the containerDisk (/disk/disk.qcow2, owner 107:107)
set -euo pipefail

set_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
epoch=${SOURCE_DATE_EPOCH:-0}
export SOURCE_DATE_EPOCH=$epoch E2FSPROGS_FAKE_TIME=$((epoch > 0 ? epoch : 1))
root_uuid=5a1f1e2d-3c4b-4a59-8e7f-a1b2c3d4e5f6
disk_mib=128
release=$(cat "$set_dir/stock/kernelrelease")

log() { echo "standins: $*"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$tree"
# The stock kernel's initramfs: the tiny guest's system and that kernel's modules.
(cd "$tree" && gzip -dc "$set_dir/stock/initramfs.cpio.gz" | cpio -idm --quiet --no-absolute-filenames)
[ -s "$tree/lib/modules/$release/ferrovirt-load-order" ] ||
    { echo "standins: no modules for $release in $set_dir/stock/initramfs.cpio.gz" >&2; exit 1; }

log "alpine: the root tree (the tiny guest's busybox system, as Alpine's console has it)"
rm -f "$tree/init"
rm -rf "$tree/home/cirros"
cat >"$tree/etc/passwd" <<'PASSWD'
root::0:0:root:/root:/bin/sh
PASSWD
rm -f "$tree/etc/shadow"
cat >"$tree/etc/group" <<'GROUP'
root:x:0:root
tty:x:5:
wheel:x:10:root
GROUP
echo localhost >"$tree/etc/hostname"
printf '127.0.0.1\tlocalhost localhost.localdomain\n::1\t\tlocalhost localhost.localdomain\n' >"$tree/etc/hosts"
cat >"$tree/etc/issue" <<'ISSUE'
Welcome to Alpine Linux (Ferrovirt's stand-in for KubeVirt's alpine-container-disk-demo)
Kernel \r on an \m (\l)

ISSUE
cat >"$tree/etc/profile" <<'PROFILE'
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# Alpine's prompt, \h:\w\$ , with the home directory as ~ (busybox's \w shows /root there).
export PS1='\h:$(d=$PWD; [ "$d" = "$HOME" ] && d="~"; echo "$d")\$ '
cd "$HOME" 2>/dev/null
PROFILE
cat >"$tree/etc/fstab" <<FSTAB
UUID=$root_uuid / ext4 rw,relatime 0 1
FSTAB

log "alpine: /boot (Debian's stock kernel $release, an initramfs, extlinux.conf)"
mkdir -p "$tree/boot"
cp "$set_dir/stock/vmlinuz" "$tree/boot/vmlinuz-virt"
initrd=$work/initrd
mkdir -p "$initrd"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$tree/bin/busybox" "$initrd/bin/busybox"
for applet in sh mount umount insmod findfs switch_root sleep cat echo mkdir uname poweroff; do
    ln -s busybox "$initrd/bin/$applet"
done
cp -a "$tree/lib/modules/$release" "$initrd/lib/modules/"
install -m 0755 "$here/alpine-init" "$initrd/init"
find "$initrd" -exec touch -h -d "@$epoch" {} +
(cd "$initrd" && find . -print0 | LC_ALL=C sort -z |
    cpio --quiet --null --reproducible -o -H newc -R 0:0) | gzip -n -9 >"$tree/boot/initramfs-virt"
cat >"$tree/boot/extlinux.conf" <<EXTLINUX
# Generated as Alpine's update-extlinux writes it.
DEFAULT menu.c32
PROMPT 0
MENU TITLE Alpine/Linux Boot Menu
MENU HIDDEN
MENU AUTOBOOT Alpine will be booted automatically in # seconds.
TIMEOUT 10
LABEL virt
  MENU DEFAULT
  MENU LABEL Linux virt
  LINUX vmlinuz-virt
  INITRD initramfs-virt
  APPEND root=UUID=$root_uuid modules=sd-mod,usb-storage,ext4 quiet rootfstype=ext4 console=ttyS0,115200

MENU SEPARATOR
EXTLINUX

log "alpine: the disk (MBR, ext4 root at 1 MiB, $disk_mib MiB)"
find "$tree" -exec touch -h -d "@$epoch" {} +
part_mib=$((disk_mib - 1))
mkfs.ext4 -q -F -L alpine-root -U "$root_uuid" -E "root_owner=0:0,hash_seed=$root_uuid" \
    -d "$tree" "$work/root.ext4" "${part_mib}M"
truncate -s "${disk_mib}M" "$work/disk.img"
sfdisk --no-reread --no-tell-kernel -q "$work/disk.img" <<SFDISK
label: dos
label-id: 0x5a1f1e2d
start=2048, type=83, bootable
SFDISK
dd if="$work/root.ext4" of="$work/disk.img" bs=1M seek=1 conv=notrunc,sparse status=none
out=$set_dir/standins/alpine
mkdir -p "$out"
qemu-img convert -q -c -f raw -O qcow2 "$work/disk.img" "$out/disk.qcow2"
{
    echo "image=alpine-container-disk-demo"
    echo "root_uuid=$root_uuid"
    echo "kernel_release=$release"
    echo "disk_mib=$disk_mib"
    echo "qcow2_bytes=$(stat -c %s "$out/disk.qcow2")"
} >"$out/info.txt"

staging=$work/staging
mkdir -p "$staging/disk"
cp "$out/disk.qcow2" "$staging/disk/disk.qcow2"
chmod 0755 "$staging/disk" && chmod 0644 "$staging/disk/disk.qcow2"
"$here/../oci/make-oci-image.sh" "$set_dir/oci/alpine-containerdisk" "$staging" latest
log "alpine: done ($(du -k "$out/disk.qcow2" | cut -f1) KiB qcow2)"
