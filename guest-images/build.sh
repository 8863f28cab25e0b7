#!/bin/bash
# Builds every Ferrovirt guest artifact from Debian packages, with one command:
#
#   guest-images/build.sh            (as root: installs its Debian packages itself)
#
# Outputs live outside the repository, in a cache keyed by a hash of the inputs (these scripts,
# the kernel config, the versions of the Debian packages used):
#
#   $FERROVIRT_GUEST_IMAGES_CACHE (default /var/cache/ferrovirt/guest-images)
#     kernel/<key>/         our kernel (reused while its own inputs are unchanged)
#     sets/<key>/           one complete set of artifacts
#     current -> sets/<key> the set of the last successful build (see README.md for its files)
#
# A second run with the same inputs is a cache hit: it only repoints `current`.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${FERROVIRT_GUEST_IMAGES_CACHE:-/var/cache/ferrovirt/guest-images}
export SOURCE_DATE_EPOCH=0

packages=(
    linux-source-6.1 build-essential bc bison flex libelf-dev libssl-dev lz4 kmod cpio xz-utils
    busybox-static e2fsprogs dosfstools mtools genisoimage fdisk qemu-utils
    qemu-system-x86 qemu-system-data dpkg-dev
)

log() { echo "guest-images: $*"; }

ensure_packages() {
    local missing=()
    for package in "${packages[@]}"; do
        dpkg-query -W -f='${Status}\n' "$package" 2>/dev/null | grep -q '^install ok installed$' ||
            missing+=("$package")
    done
    [ "${#missing[@]}" = 0 ] && return 0
    log "installing Debian packages: ${missing[*]}"
    if [ "$(id -u)" != 0 ]; then
        echo "guest-images: installing packages needs root (apt-get)" >&2
        exit 1
    fi
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"
}

# Hash of files (path and content), so renames count too.
hash_files() {
    (cd "$here" && find "$@" -type f -not -path '*/target/*' -print0 | LC_ALL=C sort -z |
        xargs -0 sha256sum) | sha256sum | cut -c1-16
}

ensure_packages
# Debian's stock cloud kernel (the package linux-image-cloud-amd64 points at), extracted from
# its package into a cache, never installed on this host.
read -r stock_package stock_version stock_release < <("$here/../hack/debian-kernel.sh" --which)
[ -n "$stock_release" ] || exit 1
package_versions=$( (
    dpkg-query -W -f='${Package}=${Version}\n' "${packages[@]}" gcc libc6-dev
    echo "$stock_package=$stock_version"
) | LC_ALL=C sort)

kernel_key=$( (
    hash_files kernel
    dpkg-query -W -f='${Version}\n' linux-source-6.1 gcc lz4
) | sha256sum | cut -c1-16)
test_guest_inputs=()
[ -d "$here/test-guests" ] && test_guest_inputs=(test-guests)
set_key=$( (
    echo "$kernel_key"
    hash_files build.sh tiny standins oci "${test_guest_inputs[@]}"
    echo "$package_versions"
) | sha256sum | cut -c1-16)

mkdir -p "$cache/kernel" "$cache/sets"
exec 9>"$cache/.lock"
flock 9

set_dir=$cache/sets/$set_key
if [ -f "$set_dir/.complete" ]; then
    ln -sfn "sets/$set_key" "$cache/current.new" && mv -T "$cache/current.new" "$cache/current"
    log "cache hit: $cache/current -> sets/$set_key (nothing to build)"
    exit 0
fi
log "building set $set_key into $set_dir"

# 1. Our kernel (minutes; kept under its own key).
kernel_dir=$cache/kernel/$kernel_key
if [ -f "$kernel_dir/.complete" ]; then
    log "kernel $kernel_key: cached"
else
    rm -rf "$kernel_dir"
    "$here/kernel/build-kernel.sh" "$kernel_dir" "$cache/work"
    touch "$kernel_dir/.complete"
fi

# 2. Tiny guest, stock kernel initramfs, containerDisks (seconds).
rm -rf "$set_dir" "$set_dir.tmp"
mkdir -p "$set_dir.tmp"
out=$set_dir.tmp
cp "$kernel_dir/vmlinux" "$kernel_dir/bzImage" "$out/"
cp "$kernel_dir/config" "$out/kernel.config"
cp "$kernel_dir/kernelrelease" "$out/kernelrelease"
stock_tree=$("$here/../hack/debian-kernel.sh" | tail -n 1)
"$here/tiny/build-tiny.sh" "$out" "$stock_release" "$stock_tree"

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/containerdisk/disk" "$staging/kernel-boot/boot"
cp "$out/rootdisk.img" "$staging/containerdisk/disk/disk.img"
cp "$out/bzImage" "$staging/kernel-boot/boot/vmlinuz"
cp "$out/vmlinux" "$staging/kernel-boot/boot/vmlinux"
cp "$out/initramfs.cpio.gz" "$staging/kernel-boot/boot/initramfs"
chmod 0755 "$staging/containerdisk/disk" "$staging/kernel-boot/boot"
chmod 0644 "$staging/containerdisk/disk/disk.img" "$staging/kernel-boot/boot/"*
"$here/oci/make-oci-image.sh" "$out/oci/containerdisk" "$staging/containerdisk" latest
"$here/oci/make-oci-image.sh" "$out/oci/kernel-boot" "$staging/kernel-boot" latest

# 2b. The stand-ins for KubeVirt's demo images (standins/build.sh; under a minute: it builds
# busybox's nc from Debian's busybox source for the alpine-with-test-tooling stand-in).
"$here/standins/build.sh" "$out"

# 3. The KVM test guests, written by their own script when it exists.
if [ -f "$here/test-guests/build.sh" ]; then
    log "test guests: test-guests/build.sh $out/test-guests"
    mkdir -p "$out/test-guests"
    bash "$here/test-guests/build.sh" "$out/test-guests"
fi

{
    echo "set=$set_key"
    echo "kernel=$kernel_key"
    echo "kernel_build_seconds=$(cat "$kernel_dir/build-seconds.txt")"
    echo "stock_kernel=$stock_release"
    echo "$package_versions"
} >"$out/inputs.txt"
(cd "$out" && find . -type f -not -name SHA256SUMS -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum >SHA256SUMS)
mv "$out" "$set_dir"
touch "$set_dir/.complete"
ln -sfn "sets/$set_key" "$cache/current.new" && mv -T "$cache/current.new" "$cache/current"

# Keep the three newest sets and the two newest kernels.
prune() { # DIR KEEP
    find "$1" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' | sort -rn |
        tail -n +"$(($2 + 1))" | cut -d' ' -f2- | while read -r old; do
        [ "$old" = "$set_dir" ] || [ "$old" = "$kernel_dir" ] || rm -rf "$old"
    done
}
prune "$cache/sets" 3
prune "$cache/kernel" 2
log "done: $cache/current -> sets/$set_key"
