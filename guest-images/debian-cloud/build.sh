#!/bin/bash
# Builds a Debian 12 (bookworm) cloud image from Debian packages, as a user's
# debian-12-genericcloud image is made: systemd, cloud-init (NoCloud), Debian's cloud kernel and
# the initramfs that Debian's initramfs-tools generates for it inside the image, grub.cfg
# written by grub-mkconfig. One command, as root:
#
#   guest-images/debian-cloud/build.sh
#
# The disk is raw and sparse: GPT, partition 1 an ext4 root (mkfs.ext4 -d from the tree that
# mmdebstrap writes, no loop devices), UUID $root_uuid, /etc/fstab by UUID, kernel command line
# root=UUID=$root_uuid ro console=tty0 console=ttyS0,115200 (Debian's cloud images' options).
# Firmware boots it too, as Debian's genericcloud image: partition 14 is a BIOS boot partition
# (EF02) holding grub's i386-pc core image, whose first sector grub's boot.img in the MBR loads
# (SeaBIOS); partition 15 an EFI system partition (EF00, vfat made with mkfs.vfat and mtools,
# no mount) holding grub's x86_64-efi image as EFI/BOOT/BOOTX64.EFI (OVMF, Secure Boot off).
# Both images carry a small config that finds the root by its UUID and sets the prefix to its
# /boot/grub, where grub's modules are (as grub-install puts them) beside the grub.cfg that
# grub-mkconfig wrote; the launcher's direct kernel boot reads that same grub.cfg.
#
# Output, in a cache keyed by a hash of this script and of the versions the host's apt lists
# give for the packages below (run `apt-get update` to pick up newer ones):
#
#   $FERROVIRT_GUEST_IMAGES_CACHE/debian-cloud (default /var/cache/ferrovirt/guest-images/...)
#     <key>/disk.img        the image
#     <key>/packages.txt    every package in it, with its version
#     <key>/info.txt        key, root UUID, kernel release, sizes, build time
#     current -> <key>      the last successful build
#
# A second run with the same inputs is a cache hit: it only repoints `current`.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${FERROVIRT_GUEST_IMAGES_CACHE:-/var/cache/ferrovirt/guest-images}/debian-cloud
suite=bookworm
mirror=${FERROVIRT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${FERROVIRT_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
root_uuid=0d1e2b3c-4a5f-4e6d-9c7b-8a9f0e1d2c3b
part_uuid=6b1f8d2e-0c3a-4e5b-9f7d-1a2b3c4d5e6f
bios_part_uuid=7c2a9e3f-1d4b-4f6c-8a0e-2b3c4d5e6f70
esp_part_uuid=8d3b0f4a-2e5c-4a7d-9b1f-3c4d5e6f7081
disk_uuid=4c2d7e9a-1b3f-4a6c-8d5e-9f0a1b2c3d4e
export SOURCE_DATE_EPOCH=0

# What the image holds (their dependencies come along; no Recommends).
image_packages=(
    linux-image-cloud-amd64 initramfs-tools zstd
    systemd-sysv udev dbus login passwd sudo
    cloud-init ifupdown isc-dhcp-client
    grub-common
    procps iproute2 ca-certificates
    qemu-guest-agent openssh-server
)
# What this script runs on the host.
host_packages=(mmdebstrap e2fsprogs fdisk grub-pc-bin grub-efi-amd64-bin dosfstools mtools)

log() { echo "debian-cloud: $*"; }
fail() {
    echo "debian-cloud: $*" >&2
    exit 1
}

ensure_host_packages() {
    local missing=() installed
    installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${host_packages[@]}" 2>/dev/null |
        awk '$NF == "installed" { print $1 }') || true
    for package in "${host_packages[@]}"; do
        grep -qx "$package" <<<"$installed" || missing+=("$package")
    done
    [ "${#missing[@]}" = 0 ] && return 0
    [ "$(id -u)" = 0 ] || fail "installing ${missing[*]} needs root (apt-get)"
    log "installing Debian packages: ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The versions apt would install for the image's packages (the host is bookworm with the same
# archive), one `package:version` a line.
candidate_versions() {
    apt-cache policy "${image_packages[@]}" |
        awk '/^[^ ]/ { package = $1 } /^  Candidate: / { print package $2 }'
}

started=$EPOCHREALTIME
ensure_host_packages
[ "$(id -u)" = 0 ] || fail "mmdebstrap needs root here (it builds in root mode)"

key=$( (
    sha256sum <"$here/build.sh"
    candidate_versions
    dpkg-query -W -f='${Package}=${Version}\n' "${host_packages[@]}"
) | sha256sum | cut -c1-16)

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

out=$cache/$key
elapsed() { awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
if [ -f "$out/.complete" ]; then
    ln -sfn "$key" "$cache/current.new" && mv -T "$cache/current.new" "$cache/current"
    log "cache hit: $cache/current -> $key (nothing to build, $(elapsed) s)"
    exit 0
fi
log "building $key into $out"
rm -rf "$out" "$out.tmp"
mkdir -p "$out.tmp"
work=$(mktemp -d "$cache/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/tree

# 1. The root filesystem tree (mmdebstrap, root mode). The customize hooks run in this order,
#    inside the finished tree ($1), before mmdebstrap unmounts /proc, /sys and /dev.
hooks=$work/hooks
mkdir -p "$hooks"

cat >"$hooks/configure.sh" <<EOF
#!/bin/sh
# Configuration as Debian's cloud images have it.
set -eu
root=\$1
printf 'UUID=$root_uuid / ext4 rw,discard,errors=remount-ro,x-systemd.growfs 0 1\n' >"\$root/etc/fstab"
# NoCloud first: the launcher's cidata seed, without waiting on network metadata services.
printf 'datasource_list: [ NoCloud, None ]\n' >"\$root/etc/cloud/cloud.cfg.d/90_dpkg.cfg"
# The network: ifupdown, loopback here, cloud-init writes interfaces.d/50-cloud-init.
cat >"\$root/etc/network/interfaces" <<'IFACES'
# interfaces(5) file used by ifup(8) and ifdown(8)
auto lo
iface lo inet loopback

source /etc/network/interfaces.d/*
IFACES
mkdir -p "\$root/etc/network/interfaces.d"
# grub's defaults, and the kernel options of Debian's cloud images.
cat >"\$root/etc/default/grub" <<'GRUB'
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=\`lsb_release -i -s 2> /dev/null || echo Debian\`
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="console=tty0 console=ttyS0,115200 earlyprintk=ttyS0,115200 consoleblank=0"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --speed=115200"
GRUB_DISABLE_OS_PROBER=true
GRUB
# The locale Debian's images generate (debconf's locales/default_environment_locale), so that
# cloud-init's locale module finds it set.
sed -i 's/^# *\(en_US.UTF-8 UTF-8\)/\1/' "\$root/etc/locale.gen"
chroot "\$root" locale-gen
chroot "\$root" update-locale LANG=en_US.UTF-8
# No swap to resume from.
printf 'RESUME=none\n' >"\$root/etc/initramfs-tools/conf.d/resume"
# Per-instance identity: systemd makes a machine id at first boot, cloud-init the hostname.
: >"\$root/etc/machine-id"
rm -f "\$root/var/lib/dbus/machine-id" "\$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"\$root/etc/hosts"
EOF

cat >"$hooks/initramfs.sh" <<'EOF'
#!/bin/sh
# The initramfs, generated by Debian's initramfs-tools in the image with its configuration.
set -eu
root=$1
for kernel in "$root"/boot/vmlinuz-*; do
    release=${kernel##*/vmlinuz-}
    if [ -e "$root/boot/initrd.img-$release" ]; then
        chroot "$root" update-initramfs -u -k "$release"
    else
        chroot "$root" update-initramfs -c -k "$release"
    fi
done
EOF

# grub-mkconfig (what update-grub runs) asks grub-probe and grub-mkrelpath about the device
# that holds / and /boot. The chroot has none (the image's ext4 is made from the tree later), so
# for this one run they answer what they would say of the image's partition 1, /dev/vda1.
cat >"$hooks/grub.sh" <<EOF
#!/bin/sh
set -eu
root=\$1
probe=\$root/usr/sbin/grub-probe
relpath=\$root/usr/bin/grub-mkrelpath
mv "\$probe" "\$probe.real"
mv "\$relpath" "\$relpath.real"
cat >"\$probe" <<'PROBE'
#!/bin/sh
target=
for arg in "\$@"; do
    case \$arg in --target=*) target=\${arg#--target=} ;; esac
done
case \$target in
device) echo /dev/vda1 ;;
fs) echo ext2 ;;
fs_uuid) echo $root_uuid ;;
fs_label) echo root ;;
partmap) echo gpt ;;
abstraction) ;;
drive) echo '(hd0,gpt1)' ;;
compatibility_hint) echo hd0,gpt1 ;;
hints_string) echo '--hint-bios=hd0,gpt1 --hint-efi=hd0,gpt1 --hint-baremetal=ahci0,gpt1' ;;
disk) echo /dev/vda ;;
partuuid) echo $part_uuid ;;
*) echo "grub-probe (image build): target '\$target' unknown (\$*)" >&2; exit 1 ;;
esac
PROBE
printf '#!/bin/sh\nfor a in "\$@"; do path=\$a; done\necho "\$path"\n' >"\$relpath"
chmod 0755 "\$probe" "\$relpath"
mkdir -p "\$root/boot/grub"
# 10_linux writes root=UUID= only when /dev/disk/by-uuid/<UUID> exists (any file will do). The tree's /dev is
# its own directory (device nodes bound one by one), never the host's /dev.
if mountpoint -q "\$root/dev"; then
    echo "grub.sh: \$root/dev is a mount point, not the tree's own /dev" >&2
    exit 1
fi
mkdir -p "\$root/dev/disk/by-uuid"
: >"\$root/dev/disk/by-uuid/$root_uuid"
status=0
chroot "\$root" grub-mkconfig -o /boot/grub/grub.cfg || status=\$?
mv "\$probe.real" "\$probe"
mv "\$relpath.real" "\$relpath"
rm -rf "\$root/dev/disk"
[ "\$status" = 0 ]
grep -q 'root=UUID=$root_uuid' "\$root/boot/grub/grub.cfg" || {
    echo "grub.sh: grub-mkconfig did not write root=UUID=$root_uuid:" >&2
    cat "\$root/boot/grub/grub.cfg" >&2
    exit 1
}
EOF

cat >"$hooks/clean.sh" <<'EOF'
#!/bin/sh
# What a cloud image does not need: apt's lists and caches, logs of the build.
set -eu
root=$1
chroot "$root" dpkg-query -W -f='${Package}=${Version}\n' >"$root/../packages.txt"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
rm -rf "$root"/var/log/* "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
find "$root/var/lib/cloud" -mindepth 1 -exec rm -rf {} + 2>/dev/null || true
EOF

log "mmdebstrap $suite (this downloads and installs about 200 packages)"
mmdebstrap --mode=root --variant=minbase --format=directory \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --include="$(
        IFS=,
        echo "${image_packages[*]}"
    )" \
    --customize-hook="sh $hooks/configure.sh \"\$1\"" \
    --customize-hook="sh $hooks/initramfs.sh \"\$1\"" \
    --customize-hook="sh $hooks/grub.sh \"\$1\"" \
    --customize-hook="sh $hooks/clean.sh \"\$1\"" \
    "$suite" "$tree" \
    "deb $mirror $suite main" \
    "deb $mirror $suite-updates main" \
    "deb $security_mirror $suite-security main"

release=$(find "$tree/boot" -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | head -n 1)
[ -n "$release" ] || fail "no kernel in $tree/boot"
[ -s "$tree/boot/initrd.img-$release" ] || fail "update-initramfs wrote no /boot/initrd.img-$release"

# grub's modules in the root's /boot/grub, where the firmware-booted grub loads them from (what
# grub-install copies there), from the host's grub-pc-bin and grub-efi-amd64-bin (the same
# bookworm grub as the image's grub-common).
for platform in i386-pc x86_64-efi; do
    mkdir -p "$tree/boot/grub/$platform"
    cp /usr/lib/grub/"$platform"/*.mod /usr/lib/grub/"$platform"/*.lst "$tree/boot/grub/$platform/"
done

# 2. The ext4 root, sized to its content plus room, then the GPT disk around it (sparse), laid
#    out as Debian's genericcloud image: the BIOS boot partition (14) and the EFI system
#    partition (15) first on the disk, the root (1) after them.
used_mib=$(du -sm --apparent-size "$tree" | cut -f1)
part_mib=$(((used_mib * 3 / 2 + 128 + 63) / 64 * 64))
mkfs.ext4 -q -F -U "$root_uuid" -L root -E root_owner=0:0 -d "$tree" "$work/root.ext4" "${part_mib}M"
disk=$out.tmp/disk.img
bios_boot_lba=2048 # 3 MiB
esp_lba=8192       # 32 MiB
esp_mib=32
root_mib=40 # where the root starts
disk_mib=$((root_mib + part_mib + 1))
truncate -s "${disk_mib}M" "$disk"
sfdisk --no-reread --no-tell-kernel -q "$disk" <<EOF
label: gpt
label-id: $disk_uuid
first-lba: 2048
start=$((root_mib * 2048)), size=$((part_mib * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8E47DE4, uuid=$part_uuid, name=root
${disk}14 : start=$bios_boot_lba, size=$((esp_lba - bios_boot_lba)), type=21686148-6449-6E6F-744E-656564454649, uuid=$bios_part_uuid, name=bios
${disk}15 : start=$esp_lba, size=$((esp_mib * 2048)), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid=$esp_part_uuid, name=esp
EOF
dd if="$work/root.ext4" of="$disk" bs=1M seek="$root_mib" conv=notrunc,sparse status=none

# 3. The boot loaders. Their embedded config: the root by UUID, the prefix its /boot/grub; grub
#    then loads normal.mod from there, which reads /boot/grub/grub.cfg.
cat >"$work/load.cfg" <<EOF
search --no-floppy --fs-uuid --set=root $root_uuid
set prefix=(\$root)/boot/grub
EOF
core_modules=(part_gpt ext2 search search_fs_uuid normal)
# BIOS: core.img (diskboot.img, then the compressed kernel and modules) at the start of the
# BIOS boot partition; boot.img's code in the MBR, keeping the protective MBR's partition table
# (0x1b8-0x1ff). What grub-bios-setup would patch: boot.img's kernel sector (0x5c, LBA of
# core.img's first sector), its drive check (0x66, a jump: NOPs, the BIOS's drive is used), and
# diskboot.img's block list (0x1f4, LBA of the rest of core.img, contiguous here; grub-mkimage
# already wrote its length).
grub-mkimage -O i386-pc -d /usr/lib/grub/i386-pc -c "$work/load.cfg" -p /boot/grub \
    -o "$work/core.img" biosdisk "${core_modules[@]}"
core_bytes=$(stat -c %s "$work/core.img")
[ "$core_bytes" -le $(((esp_lba - bios_boot_lba) * 512)) ] || fail "core.img ($core_bytes bytes) does not fit the BIOS boot partition"
le64() { # a number as 8 little-endian bytes
    local n=$1 i out=
    for i in 0 1 2 3 4 5 6 7; do
        out+=$(printf '\\x%02x' $(((n >> (8 * i)) & 255)))
    done
    printf '%b' "$out"
}
patch() { # file offset bytes...
    printf '%b' "$3" | dd of="$1" bs=1 seek="$(($2))" conv=notrunc status=none
}
le64 $((bios_boot_lba + 1)) | dd of="$work/core.img" bs=1 seek=$((0x1f4)) conv=notrunc status=none
dd if="$work/core.img" of="$disk" bs=512 seek="$bios_boot_lba" conv=notrunc status=none
cp /usr/lib/grub/i386-pc/boot.img "$work/mbr.img"
le64 "$bios_boot_lba" | dd of="$work/mbr.img" bs=1 seek=$((0x5c)) conv=notrunc status=none
patch "$work/mbr.img" 0x66 '\x90\x90'
dd if="$disk" of="$work/mbr.img" bs=1 skip=$((0x1b8)) seek=$((0x1b8)) count=$((0x200 - 0x1b8)) conv=notrunc status=none
dd if="$work/mbr.img" of="$disk" bs=512 count=1 conv=notrunc status=none
# UEFI: the removable-media path EFI/BOOT/BOOTX64.EFI on a FAT16 ESP (too small for FAT32).
grub-mkimage -O x86_64-efi -d /usr/lib/grub/x86_64-efi -c "$work/load.cfg" -p /boot/grub \
    -o "$work/BOOTX64.EFI" "${core_modules[@]}"
mkfs.vfat -F 16 -n ESP -i 0E5F0E5F -C "$work/esp.img" $((esp_mib * 1024)) >/dev/null
mmd -i "$work/esp.img" ::/EFI ::/EFI/BOOT
mcopy -i "$work/esp.img" "$work/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
dd if="$work/esp.img" of="$disk" bs=512 seek="$esp_lba" conv=notrunc,sparse status=none

mv "$work/packages.txt" "$out.tmp/packages.txt"
took=$(elapsed)
{
    echo "key=$key"
    echo "root_uuid=$root_uuid"
    echo "kernel_release=$release"
    echo "tree_mib=$used_mib"
    echo "disk_mib=$disk_mib"
    echo "disk_allocated_mib=$(du -sm "$disk" | cut -f1)"
    echo "build_seconds=$took"
} >"$out.tmp/info.txt"
mv "$out.tmp" "$out"
touch "$out/.complete"
ln -sfn "$key" "$cache/current.new" && mv -T "$cache/current.new" "$cache/current"

# Keep the two newest images.
find "$cache" -mindepth 1 -maxdepth 1 -type d -not -name 'work.*' -printf '%T@ %p\n' | sort -rn |
    tail -n +3 | cut -d' ' -f2- | while read -r old; do
    [ "$old" = "$out" ] || rm -rf "$old"
done
log "done in $took s: $cache/current -> $key ($disk_mib MiB disk, $(du -sm "$out/disk.img" | cut -f1) MiB allocated, kernel $release)"
