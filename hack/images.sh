#!/usr/bin/env bash
# Builds Ferrovirt's component images and pushes them to the local cluster's registry as
# registry:5000/ferrovirt/<component>:<tag>:
#   virt-operator, virt-controller,           the release binary and the shared libraries it uses
#   virt-handler, virt-api
#   virt-launcher                             a minimal Debian rootfs (mmdebstrap, cached) with QEMU
#                                             for the TCG fallback, ip/iptables for the pod network,
#                                             genisoimage and qemu-img for disks, a static busybox,
#                                             the default guest kernel and initramfs, and the binary
# (The guest-images containerDisks are pushed by tests/cluster/cluster.sh up.)
# The tag is `devel-` and a hash of the binaries and the launcher's base, so that nodes never run a
# stale image under a reused tag; the last line printed is the tag.
# FERROVIRT_BUILD_MARKER=TEXT makes a different build of the same binaries: TEXT goes into every
# image (/usr/bin/build-marker in the small ones, /usr/share/ferrovirt/build-marker in the
# launcher) and into the hash, so the tag differs too (the operator's upgrade test builds a
# second version this way).
# Usage: hack/images.sh                      (the local cluster must be up)
#        hack/images.sh --registry PREFIX    pushes PREFIX/<component>:<tag> instead, to any
#                                            registry (credentials: ~/.docker/config.json, as
#                                            `crane auth login` writes them); no cluster needed.
#                                            ferrovirt-release --image-prefix PREFIX --tag TAG
#                                            writes the manifests that install them.
set -euo pipefail
cd "$(dirname "$0")/.."
# Called from a test (the operator's upgrade test), this script inherits the variables cargo sets
# for a test process. Some build scripts (ring's) read CARGO_PKG_NAME, CARGO_MANIFEST_DIR and
# the like and tell cargo to rebuild when their values change, which cargo checks in its own
# environment: with them each call from a test rebuilt every release binary, and the next call
# from a shell (hack/up.sh) rebuilt them again.
unset "${!CARGO_PKG_@}" "${!CARGO_MANIFEST_@}" "${!CARGO_BIN_EXE_@}" CARGO_CRATE_NAME \
  CARGO_BIN_NAME CARGO_PRIMARY_PACKAGE CARGO_TARGET_TMPDIR CARGO_RUSTC_CURRENT_DIR OUT_DIR
CACHE=/var/cache/ferrovirt
CLUSTER=tests/cluster/cluster.sh
TARGET=${CARGO_TARGET_DIR:-$PWD/target}/release
GUEST=$CACHE/guest-images/current

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

PREFIX=registry:5000/ferrovirt
while (($#)); do
  case $1 in
    --registry)
      (($# >= 2)) && [[ -n $2 ]] || die "--registry needs a value, e.g. quay.io/yourorg/ferrovirt"
      PREFIX=${2%/}
      export FERROVIRT_IMAGE_PUSH=named
      shift 2
      ;;
    *) die "unknown argument $1 (usage: hack/images.sh [--registry PREFIX])" ;;
  esac
done

[[ -d $GUEST ]] || die "no guest images in $GUEST: run guest-images/build.sh"

log "building release binaries"
# What virt-api's version subresource reports (api/server/src/lib.rs version_info).
if git rev-parse --git-dir >/dev/null 2>&1; then
  FERROVIRT_GIT_COMMIT=$(git rev-parse HEAD)
  FERROVIRT_BUILD_DATE=$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)
  FERROVIRT_GIT_TREE_STATE=clean
  git diff --quiet HEAD -- 2>/dev/null || FERROVIRT_GIT_TREE_STATE=dirty
  export FERROVIRT_GIT_COMMIT FERROVIRT_BUILD_DATE FERROVIRT_GIT_TREE_STATE
fi
cargo build --release --locked -p controller -p handler -p launcher -p virt-api -p operator -p virtctl --bins >&2

MARKER_DIR=$(mktemp -d)
trap 'rm -rf "$MARKER_DIR"' EXIT
marker_files=()
if [[ -n ${FERROVIRT_BUILD_MARKER:-} ]]; then
  printf '%s\n' "$FERROVIRT_BUILD_MARKER" >"$MARKER_DIR/build-marker"
  marker_files=("$MARKER_DIR/build-marker")
fi

# A small image: one binary at /usr/bin/NAME with the libraries it loads (and the marker).
small_image() {
  "$CLUSTER" build-binary-image "$PREFIX/$1:$TAG" "$TARGET/$1" "${marker_files[@]}" >&2
}

# ovmf: the UEFI firmware of firmware.bootloader.efi (SeaBIOS comes with qemu-system-x86).
launcher_packages=(qemu-system-x86 ovmf qemu-utils iproute2 iptables genisoimage dosfstools mtools busybox-static e2fsprogs)
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
  mkdir -p "$root/usr/share/ferrovirt"
  cp "$TARGET/virt-launcher" "$root/usr/bin/virt-launcher"
  cp -L "$GUEST/vmlinux" "$root/usr/share/ferrovirt/vmlinux"
  if ((${#marker_files[@]})); then
    cp "${marker_files[0]}" "$root/usr/share/ferrovirt/build-marker"
  fi
  if [[ -e $GUEST/initramfs.cpio.gz ]]; then
    cp -L "$GUEST/initramfs.cpio.gz" "$root/usr/share/ferrovirt/initramfs.cpio.gz"
  fi
  "$CLUSTER" build-image "$root" "$PREFIX/virt-launcher:$TAG" /usr/bin/virt-launcher >&2
  rm -rf "$root"
}

TAG=devel-$(cat "$TARGET"/virt-{operator,controller,handler,api,launcher} "$0" "$GUEST/SHA256SUMS" \
  "${marker_files[@]}" | sha256sum | cut -c1-12)
for name in virt-operator virt-controller virt-handler virt-api; do
  small_image "$name"
done
launcher_image

log "images pushed as $PREFIX/<component>:$TAG"
echo "$TAG"
