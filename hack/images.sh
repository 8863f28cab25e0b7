#!/usr/bin/env bash
# Builds Ferrovirt's component images and pushes them to the local cluster's registry as
# registry:5000/ferrovirt/<component>:<tag>:
#   virt-controller, virt-handler, virt-api   the release binary and the shared libraries it uses
#   virt-launcher                             a minimal Debian rootfs (mmdebstrap, cached) with QEMU
#                                             for the TCG fallback, ip/iptables for the pod network,
#                                             genisoimage and qemu-img for disks, a static busybox,
#                                             the default guest kernel and initramfs, and the binary
# (The guest-images containerDisks are pushed by tests/cluster/cluster.sh up.)
# Usage: hack/images.sh [TAG]          (default tag: devel; the cluster must be up)
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-devel}
CACHE=/var/cache/ferrovirt
CLUSTER=tests/cluster/cluster.sh
TARGET=${CARGO_TARGET_DIR:-$PWD/target}/release
GUEST=$CACHE/guest-images/current

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ -d $GUEST ]] || die "no guest images in $GUEST: run guest-images/build.sh"

log "building release binaries"
cargo build --release --locked -p controller -p handler -p launcher --bins
virt_api=()
if cargo metadata --no-deps --format-version 1 | grep -q '"name":"virt-api"'; then
  cargo build --release --locked -p virt-api --bin virt-api
  virt_api=(virt-api)
fi

# A small image: one binary at /usr/bin/NAME with the libraries it loads.
small_image() {
  "$CLUSTER" build-binary-image "registry:5000/ferrovirt/$1:$TAG" "$TARGET/$1"
}

launcher_packages=(qemu-system-x86 qemu-utils iproute2 iptables genisoimage dosfstools mtools busybox-static e2fsprogs)
launcher_base() {
  local key dir
  key=$(printf '%s\n' "${launcher_packages[@]}" | sha256sum | cut -c1-12)
  dir=$CACHE/rootfs/launcher-base-$key
  if [[ ! -f $dir/.complete ]]; then
    command -v mmdebstrap >/dev/null || apt-get install -y -qq mmdebstrap >&2
    log "making the launcher's Debian rootfs (once; cached in $dir)"
    rm -rf "$dir" && mkdir -p "$(dirname "$dir")"
    local include
    include=$(IFS=,; echo "${launcher_packages[*]}")
    mmdebstrap --variant=minbase --include="$include" \
      --aptopt='APT::Install-Recommends "false"' \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      bookworm "$dir" http://deb.debian.org/debian >&2
    rm -rf "$dir/var/cache/apt/archives"/*.deb "$dir/var/lib/apt/lists"/*
    touch "$dir/.complete"
  fi
  echo "$dir"
}

launcher_image() {
  local base root
  base=$(launcher_base)
  root=$(mktemp -d)
  cp -a "$base/." "$root/"
  ln -sf /bin/busybox "$root/bin/busybox" 2>/dev/null || true
  mkdir -p "$root/usr/share/ferrovirt"
  cp "$TARGET/virt-launcher" "$root/usr/bin/virt-launcher"
  cp -L "$GUEST/vmlinux" "$root/usr/share/ferrovirt/vmlinux"
  if [[ -e $GUEST/initramfs.cpio.gz ]]; then
    cp -L "$GUEST/initramfs.cpio.gz" "$root/usr/share/ferrovirt/initramfs.cpio.gz"
  fi
  "$CLUSTER" build-image "$root" "registry:5000/ferrovirt/virt-launcher:$TAG" /usr/bin/virt-launcher
  rm -rf "$root"
}

for name in virt-controller virt-handler "${virt_api[@]}"; do
  small_image "$name"
done
launcher_image

log "images pushed with tag $TAG"
