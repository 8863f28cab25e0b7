#!/bin/bash
# Builds Ferrovirt's stand-ins for the demo images KubeVirt's documentation and functional suite
# boot most, alpine-container-disk-demo, cirros-container-disk-demo,
# fedora-with-test-tooling-container-disk and alpine-with-test-tooling-container-disk: none of
# KubeVirt's demo images can be pulled here, and each stand-in is built like its original, a disk
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
# fedora (as Fedora Cloud's disk image is laid out, for KubeVirt's
# fedora-with-test-tooling-container-disk): GPT with a BIOS boot partition, an EFI system
# partition whose EFI/fedora/grub.cfg searches /boot by UUID and hands over to its
# grub2/grub.cfg, an ext4 /boot whose grub.cfg loads grubenv (saved_entry) and runs blscfg over
# loader/entries/<machine-id>-<release>.conf (the BLS entry with the kernel, initramfs and
# root=UUID=), and an ext4 root (Fedora's is btrfs; the stand-in's kernel reads ext4). The
# console behaves as the original's: `<hostname> login: ` (fedora, or the VMI's name from DHCP),
# fedora/fedora in group wheel, the prompt `[fedora@<hostname> ~]$ `, `sudo su` to
# `[root@<hostname> fedora]# ` (KubeVirt's console.LoginToFedora); cloud-init's `password:` sets
# fedora's password. No guest agent and none of the original's test tools beyond busybox's.
#
# alpine-test-tooling (for KubeVirt's alpine-with-test-tooling-container-disk, which kubevirtci
# makes with alpine-make-vm-image and cloud-init): as alpine-make-vm-image lays a disk out, no
# partition table, one ext4 filesystem (label root, no 64bit feature, as syslinux needs) on the
# whole 200 MiB disk holding the root with /boot/vmlinuz-virt, /boot/initramfs-virt and
# /boot/extlinux.conf (update-extlinux's, with the serial console, root=UUID=...). The console
# behaves as the alpine stand-in's, except that cloud-init's meta-data `local-hostname` (the
# VMI's name, which KubeVirt's NoCloud gives) names the host, as the original's cloud-init does:
# `<hostname> login: `, root without a password, `<hostname>:~# ` (LoginToAlpine accepts
# localhost or the VMI's name). Its test tool beyond the alpine stand-in's is Alpine's busybox
# nc: Debian's busybox-static has the small nc (no -s, no -k, -e takes one word), Alpine's
# busybox the full one (CONFIG_NC_110_COMPAT), which KubeVirt's vmnetserver runs as
# `nc -s ADDR -klp PORT -e sh -c "..."`. Debian's static busybox runs its own applets before
# anything on PATH (FEATURE_SH_STANDALONE), so an nc beside it would never be run by its shell:
# /bin/busybox is busybox-static rebuilt from Debian's source package of it (the same version,
# its patches and its static configuration) with CONFIG_NC_110_COMPAT added, the only change
# (see busybox_full_nc; the source is fetched once by `apt-get source`, the binary cached). No
# guest agent, no python3.
#
# SET_DIR receives, for NAME in alpine, cirros, fedora and alpine-test-tooling:
#   standins/NAME/disk.qcow2        the disk (qcow2, compressed)
#   standins/NAME/info.txt          root UUID, kernel release, sizes
#   oci/NAME-containerdisk          the containerDisk (/disk/disk.qcow2)
# and the Debian source it builds from stays in $FERROVIRT_GUEST_IMAGES_CACHE/src (default
# /var/cache/ferrovirt/guest-images/src): busybox_<version>/ (the .dsc and its tarballs) and apt/
# (the deb-src lists apt-get source reads).
set -euo pipefail

set_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
epoch=${SOURCE_DATE_EPOCH:-0}
export SOURCE_DATE_EPOCH=$epoch E2FSPROGS_FAKE_TIME=$((epoch > 0 ? epoch : 1))
release=$(cat "$set_dir/stock/kernelrelease")
src_cache=${FERROVIRT_GUEST_IMAGES_CACHE:-/var/cache/ferrovirt/guest-images}/src

log() { echo "standins: $*"; }
die() {
    echo "standins: $*" >&2
    exit 1
}

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
    local raw=$work/$name.img root=$work/$name.root
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
    publish_disk "$name" "$raw" "image=$name-container-disk-demo" "root_uuid=$uuid" \
        "root_fstype=$fstype" "disk_mib=$disk_mib"
}

# publish_disk NAME RAW INFO_LINE...: the raw disk RAW as standins/NAME/disk.qcow2 (compressed),
# its info.txt (the INFO_LINEs, the kernel release, the qcow2 size) and the containerDisk
# oci/NAME-containerdisk (/disk/disk.qcow2).
publish_disk() {
    local name=$1 raw=$2 out=$set_dir/standins/$1 staging=$work/$1.staging
    shift 2
    mkdir -p "$out"
    qemu-img convert -q -c -f raw -O qcow2 "$raw" "$out/disk.qcow2"
    {
        printf '%s\n' "$@"
        echo "kernel_release=$release"
        echo "qcow2_bytes=$(stat -c %s "$out/disk.qcow2")"
    } >"$out/info.txt"
    mkdir -p "$staging/disk"
    cp "$out/disk.qcow2" "$staging/disk/disk.qcow2"
    chmod 0755 "$staging/disk" && chmod 0644 "$staging/disk/disk.qcow2"
    "$here/../oci/make-oci-image.sh" "$set_dir/oci/$name-containerdisk" "$staging" latest
    log "$name: done ($(du -k "$out/disk.qcow2" | cut -f1) KiB qcow2)"
}

# alpine_tree TREE ROOT_UUID IMAGE: the tiny guest's busybox system in TREE as Alpine's console
# has it (root without a password, host name localhost, the prompt \h:\w\$ ), its /etc/issue
# naming the KubeVirt IMAGE it stands in for, its fstab mounting ROOT_UUID.
alpine_tree() {
    local tree=$1 root_uuid=$2 image=$3
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
    cat >"$tree/etc/issue" <<ISSUE
Welcome to Alpine Linux (Ferrovirt's stand-in for KubeVirt's $image)
Kernel \\r on an \\m (\\l)

ISSUE
    cat >"$tree/etc/profile" <<'PROFILE'
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# Alpine's prompt, \h:\w\$ , with the home directory as ~ (busybox's \w shows /root there).
export PS1='\h:$(d=$PWD; [ "$d" = "$HOME" ] && d="~"; echo "$d")\$ '
cd "$HOME" 2>/dev/null
PROFILE
    # Alpine's hostname is its own: the DHCP lease's does not replace it (cloud-init's
    # local-hostname does).
    touch "$tree/etc/ferrovirt-keep-hostname"
    cat >"$tree/etc/fstab" <<FSTAB
UUID=$root_uuid / ext4 rw,relatime 0 1
FSTAB
}

# alpine_boot TREE ROOT_UUID SERIAL APPEND: Alpine's /boot in TREE, Debian's stock kernel as
# vmlinuz-virt, an initramfs as initramfs-virt, and extlinux.conf as update-extlinux writes it
# (SERIAL: its SERIAL line, or empty; APPEND: the kernel arguments after root=UUID=ROOT_UUID).
alpine_boot() {
    local tree=$1 root_uuid=$2 serial=$3 append=$4
    mkdir -p "$tree/boot"
    cp "$set_dir/stock/vmlinuz" "$tree/boot/vmlinuz-virt"
    boot_initramfs "$tree" "$tree/boot/initramfs-virt"
    {
        cat <<'EXTLINUX'
# Generated as Alpine's update-extlinux writes it.
DEFAULT menu.c32
PROMPT 0
MENU TITLE Alpine/Linux Boot Menu
MENU HIDDEN
MENU AUTOBOOT Alpine will be booted automatically in # seconds.
TIMEOUT 10
EXTLINUX
        [ -z "$serial" ] || echo "$serial"
        cat <<EXTLINUX
LABEL virt
  MENU DEFAULT
  MENU LABEL Linux virt
  LINUX vmlinuz-virt
  INITRD initramfs-virt
  APPEND root=UUID=$root_uuid $append

MENU SEPARATOR
EXTLINUX
    } >"$tree/boot/extlinux.conf"
}

build_alpine() {
    local tree=$work/alpine root_uuid=5a1f1e2d-3c4b-4a59-8e7f-a1b2c3d4e5f6
    log "alpine: the root tree (the tiny guest's busybox system, as Alpine's console has it)"
    alpine_tree "$tree" "$root_uuid" alpine-container-disk-demo
    log "alpine: /boot (Debian's stock kernel $release, an initramfs, extlinux.conf)"
    alpine_boot "$tree" "$root_uuid" "" \
        "modules=sd-mod,usb-storage,ext4 quiet rootfstype=ext4 console=ttyS0,115200"
    mbr_disk alpine "$tree" ext4 "$root_uuid" alpine-root 128 0x5a1f1e2d
}

# deb_src_stanza STANZA: a deb822 stanza of the host's APT sources as deb-src, when it is an
# enabled entry of a Debian archive (a URI ending in /debian or /debian-security).
deb_src_stanza() {
    grep -qE '^Types:.*[[:space:]]deb([[:space:]]|$)' <<<"$1" || return 0
    grep -qE '^URIs:.*/debian(-security)?/?([[:space:]]|$)' <<<"$1" || return 0
    ! grep -qiE '^Enabled:[[:space:]]*no' <<<"$1" || return 0
    sed -E 's/^Types:.*/Types: deb-src/' <<<"$1"
}

# deb_src_sources DIR: this host's Debian archives as deb-src entries in DIR, its deb822 sources
# in debian-src.sources and its one-line entries in debian-src.list.
deb_src_sources() {
    local dir=$1 file line stanza
    for file in /etc/apt/sources.list.d/*.sources; do
        [ -f "$file" ] || continue
        stanza=
        while IFS= read -r line || [ -n "$line" ]; do
            if [ -n "${line//[[:space:]]/}" ]; then
                stanza+=$line$'\n'
            elif [ -n "$stanza" ]; then
                deb_src_stanza "$stanza"
                stanza=
            fi
        done <"$file"
        [ -z "$stanza" ] || deb_src_stanza "$stanza"
    done >"$dir/debian-src.sources"
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$file" ] || continue
        { grep -E '^deb[[:space:]]' "$file" || true; } |
            { grep -E '/debian(-security)?/?[[:space:]]' || true; } |
            sed -E 's/^deb[[:space:]]/deb-src /'
    done >"$dir/debian-src.list"
    [ -s "$dir/debian-src.list" ] || rm "$dir/debian-src.list"
    [ -s "$dir/debian-src.sources" ] || rm "$dir/debian-src.sources"
    [ -e "$dir/debian-src.sources" ] || [ -e "$dir/debian-src.list" ] ||
        die "no Debian archive in this host's APT sources to fetch a source package from"
}

# busybox_source: the path of the .dsc of Debian's source package that busybox-static was built
# from (its very version), fetched once into $src_cache by apt-get source, from a deb-src list of
# this host's Debian archives kept apart from the host's own APT lists (apt checks the .dsc
# against the signed Sources index; dpkg-source -x checks the tarballs against the .dsc).
busybox_source() {
    local package version dir apt_dir opts
    read -r package version < <(dpkg-query -W -f='${source:Package} ${source:Version}\n' busybox-static)
    [ -n "$version" ] || die "busybox-static is not installed"
    dir=$src_cache/${package}_${version#*:}
    if [ ! -f "$dir/.complete" ]; then
        log "alpine-test-tooling: Debian's source of $package $version (apt-get source, once)" >&2
        apt_dir=$src_cache/apt
        rm -rf "$dir" "$apt_dir"
        mkdir -p "$dir" "$apt_dir/sources" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
        deb_src_sources "$apt_dir/sources"
        opts=(-q -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/sources"
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
            -o APT::Sandbox::User=root)
        apt-get "${opts[@]}" update >"$apt_dir/update.log" 2>&1 ||
            { cat "$apt_dir/update.log" >&2; die "apt-get update of the deb-src lists failed"; }
        (cd "$dir" && apt-get "${opts[@]}" source --download-only "$package=$version") \
            >"$apt_dir/source.log" 2>&1 ||
            { cat "$apt_dir/source.log" >&2; die "apt-get source $package=$version failed"; }
        touch "$dir/.complete"
    fi
    echo "$dir/${package}_${version#*:}.dsc"
}

# busybox_full_nc OUT: Debian's busybox-static as its source package builds it (its patches, its
# debian/config/pkg/static, -Os, static) with CONFIG_NC_110_COMPAT=y added, so that its nc is
# Alpine's full one (-l -k -p -s -e PROG ARGS..., -u, -w, -v). Reproducible (SOURCE_DATE_EPOCH,
# no timestamp in its configuration); built once per source version and configuration, and kept
# beside the source in $src_cache.
busybox_full_nc() {
    local out=$1 dsc version src build key cached
    dsc=$(busybox_source)
    version=$(dpkg-query -W -f='${source:Version}' busybox-static)
    src=$work/busybox-src
    dpkg-source -x "$dsc" "$src" >"$work/dpkg-source.log" 2>&1 ||
        { cat "$work/dpkg-source.log" >&2; die "dpkg-source -x $dsc failed"; }
    build=$work/busybox-build
    mkdir -p "$build"
    cat "$src/debian/config/os/linux" "$src/debian/config/pkg/static" >"$build/.config"
    grep -qx '# CONFIG_NC_110_COMPAT is not set' "$build/.config" ||
        die "Debian's static busybox configuration does not leave out CONFIG_NC_110_COMPAT"
    sed -i 's/^# CONFIG_NC_110_COMPAT is not set$/CONFIG_NC_110_COMPAT=y/' "$build/.config"
    key=$( (
        cat "$dsc" "$build/.config"
        declare -f busybox_full_nc
    ) | sha256sum | cut -c1-16)
    cached=$(dirname "$dsc")/busybox-nc110-$key
    if [ ! -f "$cached" ]; then
        log "alpine-test-tooling: building busybox $version (Debian's static configuration and CONFIG_NC_110_COMPAT)"
        (
            export KCONFIG_NOTIMESTAMP=1
            { yes "" || true; } | make -s -C "$build" -f "$src/Makefile" KBUILD_SRC="$src" silentoldconfig \
                >"$work/busybox-config.log" 2>&1 ||
                { cat "$work/busybox-config.log" >&2; die "busybox's silentoldconfig failed"; }
            for option in STATIC NC NC_SERVER NC_EXTRA NC_110_COMPAT FEATURE_SH_STANDALONE; do
                grep -qx "CONFIG_$option=y" "$build/.config" ||
                    die "busybox's .config has no CONFIG_$option=y"
            done
            make -s -C "$build" -j"$(nproc)" busybox \
                BB_EXTRA_VERSION="Debian $version with CONFIG_NC_110_COMPAT" \
                >"$work/busybox-make.log" 2>&1 ||
                { cat "$work/busybox-make.log" >&2; die "building busybox failed"; }
        )
        diff <("$build/busybox" --list) <(/bin/busybox --list) >&2 ||
            die "the rebuilt busybox's applets are not busybox-static's"
        install -m 0755 "$build/busybox" "$cached.tmp" && mv "$cached.tmp" "$cached"
    fi
    install -m 0755 "$cached" "$out"
}

build_alpine_test_tooling() {
    local name=alpine-test-tooling tree=$work/alpine-test-tooling raw=$work/alpine-test-tooling.img
    local root_uuid=a1e57d00-7e57-4a11-8c0d-15c0ffee0001 disk_mib=200
    log "$name: the root tree (the alpine stand-in's system, cloud-init's host name, Alpine's nc)"
    alpine_tree "$tree" "$root_uuid" alpine-with-test-tooling-container-disk
    busybox_full_nc "$tree/bin/busybox"
    log "$name: /boot (Debian's stock kernel $release, an initramfs, extlinux.conf with the serial console)"
    alpine_boot "$tree" "$root_uuid" "SERIAL 0 115200" \
        "modules=sd-mod,usb-storage,ext4 console=ttyS0 rootfstype=ext4"
    log "$name: the disk (ext4 on the whole disk, no partition table, $disk_mib MiB)"
    find "$tree" -exec touch -h -d "@$epoch" {} +
    mkfs.ext4 -q -F -L root -U "$root_uuid" -O ^64bit \
        -E "root_owner=0:0,hash_seed=$root_uuid" -d "$tree" "$raw" "${disk_mib}M"
    publish_disk "$name" "$raw" "image=alpine-with-test-tooling-container-disk" \
        "root_uuid=$root_uuid" "root_fstype=ext4" "partition_table=none" "disk_mib=$disk_mib" \
        "busybox=$(dpkg-query -W -f='${source:Version}' busybox-static) static, CONFIG_NC_110_COMPAT=y"
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
    # CirrOS's init announces its first boot script on the console; KubeVirt's boot-order spec
    # waits for that line. The stand-in's rc.sysinit says it, then runs the tiny guest's rcS.
    cat >"$tree/etc/init.d/rc.sysinit" <<'SYSINIT'
#!/bin/sh
up=$(cut -d' ' -f1 /proc/uptime 2>/dev/null)
echo "info: /etc/init.d/rc.sysinit: up at ${up:-0}"
exec /etc/init.d/rcS
SYSINIT
    chmod 0755 "$tree/etc/init.d/rc.sysinit"
    sed -i 's|^::sysinit:/etc/init.d/rcS$|::sysinit:/etc/init.d/rc.sysinit|' "$tree/etc/inittab"
    grep -qx '::sysinit:/etc/init.d/rc.sysinit' "$tree/etc/inittab" ||
        { echo "standins: the tiny guest's inittab has no rcS sysinit line" >&2; exit 1; }

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

# fedora_issue: /etc/issue as Fedora's, naming what it stands in for.
fedora_issue() {
    cat <<'ISSUE'
Fedora Linux 39 (Cloud Edition) (Ferrovirt's stand-in for KubeVirt's fedora-with-test-tooling-container-disk)
Kernel \r on an \m (\l)

ISSUE
}

build_fedora() {
    local tree=$work/fedora boot=$work/fedora-boot esp=$work/fedora-esp.img raw=$work/fedora.img
    local root_uuid=f3d0a9e1-7c2b-4e5d-9a8f-1b2c3d4e5f60 boot_uuid=f3d0b007-6a5b-4c3d-8e2f-0a1b2c3d4e5f
    local esp_id=F3D0 machine_id=5f3d0a1c2b3e4d5f8a6b7c8d9e0f1a2b entry hash env
    entry=$machine_id-$release
    log "fedora: the root tree (the tiny guest's busybox system, as Fedora Cloud's console has it)"
    stock_tree "$tree"
    rm -rf "$tree/home/cirros"
    mkdir -p "$tree/home/fedora" "$tree/boot/efi"
    hash=$(/bin/busybox mkpasswd -m sha512 fedora ferrovirt.fedora)
    cat >"$tree/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
fedora:x:1000:1000:fedora Cloud User:/home/fedora:/bin/sh
PASSWD
    printf 'root:!:0:0:99999:7:::\nfedora:%s:0:0:99999:7:::\n' "$hash" >"$tree/etc/shadow"
    chmod 600 "$tree/etc/shadow"
    cat >"$tree/etc/group" <<'GROUP'
root:x:0:
tty:x:5:
wheel:x:10:fedora
fedora:x:1000:
GROUP
    chown -R 1000:1000 "$tree/home/fedora"
    install -m 4755 -o 0 -g 0 "$work/sudo" "$tree/usr/bin/sudo"
    # cloud-init's `password:` sets the password of Fedora's default user.
    echo fedora >"$tree/etc/ferrovirt-default-user"
    echo fedora >"$tree/etc/hostname"
    printf '127.0.0.1\tlocalhost\n' >"$tree/etc/hosts"
    fedora_issue >"$tree/etc/issue"
    cat >"$tree/etc/profile" <<'PROFILE'
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# Fedora's bash prompt, [\u@\h \W]\$ (the working directory's last component).
export PS1='[\u@\h \W]\$ '
cd "$HOME" 2>/dev/null
PROFILE
    cat >"$tree/etc/fstab" <<FSTAB
UUID=$root_uuid / ext4 defaults 1 1
UUID=$boot_uuid /boot ext4 defaults 1 2
UUID=$esp_id-0001 /boot/efi vfat umask=0077,shortname=winnt 0 2
FSTAB
    echo "$machine_id" >"$tree/etc/machine-id"

    log "fedora: /boot (Debian's stock kernel $release, an initramfs, BLS entry, grub2 with blscfg)"
    mkdir -p "$boot/loader/entries" "$boot/grub2"
    cp "$set_dir/stock/vmlinuz" "$boot/vmlinuz-$release"
    boot_initramfs "$tree" "$boot/initramfs-$release.img"
    cat >"$boot/loader/entries/$entry.conf" <<BLS
title Fedora Linux ($release) 39 (Cloud Edition)
version $release
linux /vmlinuz-$release
initrd /initramfs-$release.img
options root=UUID=$root_uuid ro rootfstype=ext4 no_timer_check net.ifnames=0 console=tty1 console=ttyS0,115200n8
grub_users \$grub_users
grub_arg --unrestricted
grub_class fedora
BLS
    # As grub2-mkconfig writes it on Fedora: grubenv picks the entry, blscfg reads the entries.
    cat >"$boot/grub2/grub.cfg" <<GRUB
#
# DO NOT EDIT THIS FILE
#
# It is automatically generated by grub2-mkconfig using templates
# from /etc/grub.d and settings from /etc/default/grub
#

### BEGIN /etc/grub.d/00_header ###
set pager=1

if [ -f \${config_directory}/grubenv ]; then
  load_env -f \${config_directory}/grubenv
elif [ -s \$prefix/grubenv ]; then
  load_env
fi
if [ "\${next_entry}" ] ; then
   set default="\${next_entry}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="\${saved_entry}"
fi
serial --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=1
### END /etc/grub.d/00_header ###

### BEGIN /etc/grub.d/10_linux ###
insmod part_gpt
insmod ext2
search --no-floppy --fs-uuid --set=root $boot_uuid
insmod blscfg
blscfg
### END /etc/grub.d/10_linux ###
GRUB
    # grubenv: exactly 1024 bytes, padded with '#'.
    env=$(printf '# GRUB Environment Block\nsaved_entry=%s\nboot_success=0\n' "$entry")
    {
        printf '%s\n' "$env"
        head -c $((1024 - ${#env} - 1)) /dev/zero | tr '\0' '#'
    } >"$boot/grub2/grubenv"

    log "fedora: the ESP (vfat, EFI/fedora/grub.cfg that hands over to /boot/grub2/grub.cfg)"
    mkdir -p "$work/fedora-efi/EFI/fedora"
    cat >"$work/fedora-efi/EFI/fedora/grub.cfg" <<GRUB
search --no-floppy --fs-uuid --set=dev $boot_uuid
set prefix=(\$dev)/grub2
export \$prefix
configfile \$prefix/grub.cfg
GRUB
    find "$work/fedora-efi" -exec touch -h -d "@$epoch" {} +
    mkfs.vfat -C -i "${esp_id}0001" -n EFI --invariant "$esp" 32768 >/dev/null
    mmd -i "$esp" ::/EFI ::/EFI/fedora
    mcopy -m -i "$esp" "$work/fedora-efi/EFI/fedora/grub.cfg" ::/EFI/fedora/grub.cfg

    log "fedora: the disk (GPT: BIOS boot, ESP, /boot ext4, root ext4; 164 MiB)"
    find "$tree" "$boot" -exec touch -h -d "@$epoch" {} +
    mkfs.ext4 -q -F -L boot -U "$boot_uuid" -E "root_owner=0:0,hash_seed=$boot_uuid" \
        -d "$boot" "$work/fedora-boot.ext4" 64M
    mkfs.ext4 -q -F -L fedora -U "$root_uuid" -E "root_owner=0:0,hash_seed=$root_uuid" \
        -d "$tree" "$work/fedora-root.ext4" 64M
    truncate -s 164M "$raw"
    sfdisk --no-reread --no-tell-kernel -q "$raw" <<SFDISK
label: gpt
label-id: F3D0D15C-0000-4000-8000-000000000001
start=1MiB, size=1MiB, type=21686148-6449-6E6F-744E-656564454649, name="p.legacy"
start=2MiB, size=32MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="p.UEFI"
start=34MiB, size=64MiB, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="p.lxboot"
start=98MiB, size=64MiB, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="p.lxroot"
SFDISK
    dd if="$esp" of="$raw" bs=1M seek=2 conv=notrunc,sparse status=none
    dd if="$work/fedora-boot.ext4" of="$raw" bs=1M seek=34 conv=notrunc,sparse status=none
    dd if="$work/fedora-root.ext4" of="$raw" bs=1M seek=98 conv=notrunc,sparse status=none
    publish_disk fedora "$raw" "image=fedora-with-test-tooling-container-disk" \
        "root_uuid=$root_uuid" "boot_uuid=$boot_uuid" "bls_entry=$entry" "disk_mib=164"
}

gcc -static -Os -Wall -Wextra -Werror -s -o "$work/sudo" "$here/sudo.c"
build_alpine
build_cirros
build_fedora
build_alpine_test_tooling
