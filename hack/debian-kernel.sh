#!/usr/bin/env bash
# Debian's stock cloud kernel, taken from its package with `dpkg-deb -x` and never installed on
# this host: the package that linux-image-cloud-amd64 depends on (e.g.
# linux-image-6.1.0-57-cloud-amd64), downloaded with `apt-get download`, extracted into a cache
# with a modules.dep made by `depmod -b` (the package's postinst would make it on install).
#
# Usage: hack/debian-kernel.sh --which   prints "PACKAGE VERSION RELEASE" (no download)
#        hack/debian-kernel.sh           also extracts, and prints the tree's directory last:
#                                        TREE/boot/vmlinuz-RELEASE, TREE/lib/modules/RELEASE
# Cache: $FERROVIRT_DEBIAN_KERNEL_CACHE (default /var/cache/ferrovirt/debian-kernel)/PACKAGE_VERSION
set -euo pipefail
cache=${FERROVIRT_DEBIAN_KERNEL_CACHE:-/var/cache/ferrovirt/debian-kernel}

die() {
    echo "debian-kernel: $*" >&2
    exit 1
}

depends() { apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }

package=$(depends)
if [[ -z $package ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    package=$(depends)
fi
[[ -n $package ]] || die "cannot tell which kernel linux-image-cloud-amd64 depends on (apt-cache depends)"
version=$(apt-cache policy "$package" | awk '/Candidate:/ {print $2}')
[[ -n $version && $version != "(none)" ]] || die "apt has no version of $package"
release=${package#linux-image-}
if [[ ${1:-} == --which ]]; then
    echo "$package $version $release"
    exit 0
fi
(($# == 0)) || die "unknown argument $1 (usage: hack/debian-kernel.sh [--which])"

tree=$cache/${package}_$version
if [[ ! -f $tree/.complete ]]; then
    mkdir -p "$cache"
    exec {lock}>"$cache/.lock"
    flock "$lock"
    if [[ ! -f $tree/.complete ]]; then
        echo "debian-kernel: extracting $package $version into $tree" >&2
        rm -rf "$tree" "$tree.tmp"
        mkdir -p "$tree.tmp/deb"
        (cd "$tree.tmp/deb" && apt-get download -q -o APT::Sandbox::User=root "$package=$version" >&2) ||
            die "apt-get download $package=$version failed"
        dpkg-deb -x "$tree.tmp/deb"/*.deb "$tree.tmp"
        rm -rf "$tree.tmp/deb"
        [[ -f $tree.tmp/boot/vmlinuz-$release ]] || die "$package has no /boot/vmlinuz-$release"
        depmod -b "$tree.tmp" "$release" || die "depmod for $package failed"
        [[ -f $tree.tmp/lib/modules/$release/modules.dep ]] || die "depmod wrote no modules.dep for $package"
        touch "$tree.tmp/.complete"
        mv "$tree.tmp" "$tree"
    fi
fi
echo "$package $version $release"
echo "$tree"
