#!/bin/bash
# Builds Ferrovirt's stand-ins for the demo images KubeVirt's documentation and functional suite
# boot most, alpine-container-disk-demo and cirros-container-disk-demo: none of KubeVirt's demo
# images can be pulled here, and each stand-in is built like its original, a partitioned disk
# that carries its own kernel and boot files, so a VM of it takes the boot path a user's image
# takes:
#
#   standins/build.sh SET_DIR          (guest-images/build.sh runs it after tiny/build-tiny.sh)
#
# From what build-tiny.sh left in SET_DIR: Debian's stock cloud kernel and its initramfs
# (stock/), the tiny guest's busybox system with that kernel's virtio modules. Each disk's
# initramfs (initramfs-init) does what Alpine's mkinitfs and CirrOS's initramfs do for a disk
# install: loads the modules, mounts root= and switch_roots to its /sbin/init; when the root
# cannot be mounted it says so and powers off, it never starts a system of its own. No
# bootloader is installed in an MBR: firmware (SeaBIOS, OVMF) cannot boot these stand-ins.
#
# alpine (as Alpine's "virt" disk images are laid out): an MBR, one bootable ext4 partition from
# 1 MiB holding the root with /boot/vmlinuz-virt, /boot/initramfs-virt and /boot/extlinux.conf
# (Alpine's update-extlinux layout: a hidden menu whose MENU DEFAULT entry boots root=UUID=...).
# The console behaves as the original's: `localhost login: `, root without a password, the
# prompt `localhost:~# ` (KubeVirt's console.LoginToAlpine).
#
# cirros (as CirrOS 0.5's disk image is laid out): an MBR, one bootable ext3 partition labelled
# cirros-rootfs holding the root with /boot/vmlinuz-<release>, /boot/initrd.img-<release> and
# /boot/grub/grub.cfg (one menuentry that searches the label and boots root=LABEL=cirros-rootfs).
# The console behaves as the original's: the banner "login as 'cirros' user. default password:
# 'gocubsgo'. use 'sudo' for root." above `<hostname> login: ` (the hostname from cloud-init or
# DHCP, which is the VMI's name), user cirros with password gocubsgo in group wheel, a
# password-less `sudo` (sudo.c), the prompt ending in `$ ` (KubeVirt's console.LoginToCirros).
# Its system is the tiny guest's, so cloud-init's NoCloud user-data and the ready marker behave
# as on the tiny disk.
#
# SET_DIR receives, for NAME in alpine and cirros:
#   standins/NAME/disk.qcow2        the disk (qcow2, compressed)
#   standins/NAME/info.txt          root UUID, kernel release, sizes
#   oci/NAME-containerdisk          the containerDisk (/disk/disk.qcow2)
set -euo pipefail

set_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
epoch=${SOURCE_DATE_EPOCH:-0}
export SOURCE_DATE_EPOCH=$epoch E2FSPROGS_FAKE_TIME=$((epoch > 0 ? epoch : 1))
release=$(cat "$set_dir/stock/kernelrelease")

log() { echo "standins: $*"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# stock_tree DIR: the stock kernel's initramfs unpacked into DIR (the tiny guest's system and
# that kernel's modules), without its /init.
stock_tree() {
    mkdir -p "$1"
    (cd "$1" && gzip -dc "$set_dir/stock/initramfs.cpio.gz" |
        cpio -idm --quiet --no-absolute-filenames)
    [ -s "$1/lib/modules/$release/ferrovirt-load-order" ] ||
        { echo "standins: no modules for $release in $set_dir/stock/initramfs.cpio.gz" >&2; exit 1; }
    rm -f "$1/init"
}

# boot_initramfs TREE OUT: the initramfs that mounts root= (busybox, TREE's modules for the
# stock kernel, initramfs-init as /init), gzip-compressed into OUT.
boot_initramfs() {
    local tree=$1 out=$2 initrd applet
    initrd=$(mktemp -d -p "$work")
    mkdir -p "$initrd"/{bin,dev,proc,sys,newroot,lib/modules}
    cp "$tree/bin/busybox" "$initrd/bin/busybox"
    for applet in sh mount umount insmod findfs switch_root sleep cat echo mkdir uname poweroff; do
        ln -s busybox "$initrd/bin/$applet"
    done
    cp -a "$tree/lib/modules/$release" "$initrd/lib/modules/"
    install -m 0755 "$here/initramfs-init" "$initrd/init"
    find "$initrd" -exec touch -h -d "@$epoch" {} +
    (cd "$initrd" && find . -print0 | LC_ALL=C sort -z |
        cpio --quiet --null --reproducible -o -H newc -R 0:0) | gzip -n -9 >"$out"
}

# mbr_disk NAME TREE FSTYPE UUID LABEL DISK_MIB LABEL_ID: TREE as a FSTYPE root partition (from
# 1 MiB, bootable) of an MBR disk, written as standins/NAME/disk.qcow2 with its info.txt and as
# the containerDisk oci/NAME-containerdisk.
mbr_disk() {
    local name=$1 tree=$2 fstype=$3 uuid=$4 label=$5 disk_mib=$6 label_id=$7
    local raw=$work/$name.img root=$work/$name.root out=$set_dir/standins/$name staging
    log "$name: the disk (MBR, $fstype root at 1 MiB, $disk_mib MiB)"
    find "$tree" -exec touch -h -d "@$epoch" {} +
    "mkfs.$fstype" -q -F -L "$label" -U "$uuid" -E "root_owner=0:0,hash_seed=$uuid" \
        -d "$tree" "$root" "$((disk_mib - 1))M"
    truncate -s "${disk_mib}M" "$raw"
    sfdisk --no-reread --no-tell-kernel -q "$raw" <<SFDISK
label: dos
label-id: $label_id
start=2048, type=83, bootable
SFDISK
    dd if="$root" of="$raw" bs=1M seek=1 conv=notrunc,sparse status=none
    mkdir -p "$out"
    qemu-img convert -q -c -f raw -O qcow2 "$raw" "$out/disk.qcow2"
    {
        echo "image=$name-container-disk-demo"
        echo "root_uuid=$uuid"
        echo "root_fstype=$fstype"
        echo "kernel_release=$release"
        echo "disk_mib=$disk_mib"
        echo "qcow2_bytes=$(stat -c %s "$out/disk.qcow2")"
    } >"$out/info.txt"
    staging=$work/$name.staging
    mkdir -p "$staging/disk"
    cp "$out/disk.qcow2" "$staging/disk/disk.qcow2"
    chmod 0755 "$staging/disk" && chmod 0644 "$staging/disk/disk.qcow2"
    "$here/../oci/make-oci-image.sh" "$set_dir/oci/$name-containerdisk" "$staging" latest
    log "$name: done ($(du -k "$out/disk.qcow2" | cut -f1) KiB qcow2)"
}

build_alpine() {
    local tree=$work/alpine root_uuid=5a1f1e2d-3c4b-4a59-8e7f-a1b2c3d4e5f6
    log "alpine: the root tree (the tiny guest's busybox system, as Alpine's console has it)"
    stock_tree "$tree"
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
    printf '127.0.0.1\tlocalhost localhost.localdomain\n::1\t\tlocalhost localhost.localdomain\n' \
        >"$tree/etc/hosts"
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
    # Alpine's hostname is its own: the DHCP lease's does not replace it.
    touch "$tree/etc/ferrovirt-keep-hostname"
    cat >"$tree/etc/fstab" <<FSTAB
UUID=$root_uuid / ext4 rw,relatime 0 1
FSTAB

    log "alpine: /boot (Debian's stock kernel $release, an initramfs, extlinux.conf)"
    mkdir -p "$tree/boot"
    cp "$set_dir/stock/vmlinuz" "$tree/boot/vmlinuz-virt"
    boot_initramfs "$tree" "$tree/boot/initramfs-virt"
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
    mbr_disk alpine "$tree" ext4 "$root_uuid" alpine-root 128 0x5a1f1e2d
}

build_cirros() {
    local tree=$work/cirros root_uuid=c1e05a0b-5d2e-4c7a-9b61-0f3e2d1c4b5a
    log "cirros: the root tree (the tiny guest's busybox system, as CirrOS's console has it)"
    stock_tree "$tree"
    # The tiny guest's users (root and cirros, password gocubsgo); cirros may sudo as in CirrOS.
    install -m 4755 -o 0 -g 0 "$work/sudo" "$tree/usr/bin/sudo"
    echo cirros >"$tree/etc/hostname"
    printf '127.0.0.1\tlocalhost\n' >"$tree/etc/hosts"
    # CirrOS's getty shows this above every login prompt; KubeVirt's LoginToCirros waits for it.
    # (getty reads backslashes in it as escapes: the logo's are doubled.)
    cat >"$tree/etc/issue" <<'ISSUE'
  ____               ____  ____
 / __/ __ ____ ____ / __ \\/ __/
/ /__ / // __// __// /_/ /\\ \\
\\___//_//_/  /_/   \\____/___/
   Ferrovirt's stand-in for KubeVirt's cirros-container-disk-demo


login as 'cirros' user. default password: 'gocubsgo'. use 'sudo' for root.
ISSUE
    cat >"$tree/etc/fstab" <<'FSTAB'
LABEL=cirros-rootfs / ext3 rw,relatime 0 1
FSTAB

    log "cirros: /boot (Debian's stock kernel $release, an initramfs, grub.cfg)"
    mkdir -p "$tree/boot/grub"
    cp "$set_dir/stock/vmlinuz" "$tree/boot/vmlinuz-$release"
    boot_initramfs "$tree" "$tree/boot/initrd.img-$release"
    cat >"$tree/boot/grub/grub.cfg" <<GRUB
# As CirrOS's disk image writes it.
set default=0
set timeout=1
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
menuentry 'CirrOS' {
    search --no-floppy --set=root --label cirros-rootfs
    linux /boot/vmlinuz-$release root=LABEL=cirros-rootfs ro console=tty1 console=ttyS0 rootfstype=ext3
    initrd /boot/initrd.img-$release
}
GRUB
    mbr_disk cirros "$tree" ext3 "$root_uuid" cirros-rootfs 64 0xc1e05a0b
}

gcc -static -Os -Wall -Wextra -Werror -s -o "$work/sudo" "$here/sudo.c"
build_alpine
build_cirros
