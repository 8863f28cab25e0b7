#!/usr/bin/env bash
# What hack/up.sh and hack/test.sh need before they start, checked at once, each missing piece
# named with what to do: root (the cluster starts daemons, network namespaces and VMs; there is
# no need for sudo, and this machine has none), Debian's apt (packages are installed from it),
# Rust at the workspace's rust-version or newer, and Go at the version the Kubernetes release of
# the local cluster asks for (its go.mod), unless its binaries are cached already.
#
# Usage: hack/preflight.sh    (FERROVIRT_GO=PATH checks another Go; the cluster uses
#                              /usr/local/go/bin/go)
set -euo pipefail
cd "$(dirname "$0")/.."

# The Go that the go.mod of tests/cluster's Kubernetes release names (its `go` line; the release,
# v1.36.3, is tests/cluster/lib/common.sh's KUBE_VERSION).
KUBE_GO_MIN=1.26.0
GO=${FERROVIRT_GO:-/usr/local/go/bin/go}
# shellcheck disable=SC2016 # the pattern names a shell expansion literally
kube_version=$(sed -n 's/^KUBE_VERSION="${FERROVIRT_KUBE_VERSION:-\(v[0-9.]*\)}"/\1/p' tests/cluster/lib/common.sh)
kube_version=${FERROVIRT_KUBE_VERSION:-$kube_version}
cache=${FERROVIRT_CACHE_DIR:-/var/cache/ferrovirt}

problems=()
# version_at_least HAVE WANT: HAVE >= WANT (dotted versions).
version_at_least() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1) == "$2" ]]; }

((EUID == 0)) || problems+=("run as root: the local cluster starts daemons, network namespaces and VMs (no sudo is needed; where you use it: sudo $0)")

command -v apt-get >/dev/null || problems+=("apt-get is missing: the scripts install Debian packages (Debian 12 or newer)")

rust_min=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
if ! command -v cargo >/dev/null || ! command -v rustc >/dev/null; then
  problems+=("Rust is missing: install Rust $rust_min or newer (https://rustup.rs), with cargo on PATH")
else
  rust_have=$(rustc --version | awk '{print $2}')
  version_at_least "${rust_have%%-*}" "$rust_min" ||
    problems+=("Rust $rust_have is too old: the workspace needs $rust_min or newer (rustup update stable)")
fi

kube_cached=0
go_summary="Go: Kubernetes $kube_version and crane are cached"
# Go builds Kubernetes and crane (tests/cluster/lib/build.sh), both cached once built.
[[ -x $cache/kubernetes/$kube_version/bin/kubelet && -x $cache/bin/crane ]] && kube_cached=1
if [[ -x $GO ]]; then
  go_have=$("$GO" version | awk '{print $3}')
  go_have=${go_have#go}
  go_summary="Go $go_have (>= $KUBE_GO_MIN)"
  if ! version_at_least "$go_have" "$KUBE_GO_MIN"; then
    if ((kube_cached)); then
      go_summary="Go $go_have, older than $KUBE_GO_MIN, not needed: Kubernetes $kube_version and crane are cached"
    else
      problems+=("Go $go_have at $GO is too old: building Kubernetes $kube_version needs Go $KUBE_GO_MIN or newer there (https://go.dev/dl, unpacked into /usr/local/go)")
    fi
  fi
elif ((!kube_cached)); then
  problems+=("Go is missing at $GO: building Kubernetes $kube_version needs Go $KUBE_GO_MIN or newer there (https://go.dev/dl, unpacked into /usr/local/go)")
fi

# Free disk space as the kubelet counts it (blocks available to every user, without root's
# reserve): below its eviction threshold the local cluster's kubelets evict Pods, virt-handler
# among them. Builds, images and VM disks need the rest.
min_free_gib=${FERROVIRT_MIN_FREE_GIB:-10}
fs_dir=$cache
while [[ ! -d $fs_dir ]]; do fs_dir=$(dirname "$fs_dir"); done
free_gib() { echo $(($(stat -f -c '%a * %S' "$fs_dir") / 1024 / 1024 / 1024)); }
free_gib=$(free_gib)
# Short of it, cargo's incremental/ directories in the caches go first: they serve
# edit-and-rebuild loops, cargo rebuilds what it needs of them, and they are often the largest.
if ((free_gib < min_free_gib)) && [[ -d $cache ]]; then
  mapfile -t incremental < <(find "$cache" -maxdepth 4 -type d -name incremental -path '*target/*' 2>/dev/null)
  if ((${#incremental[@]})); then
    rm -rf "${incremental[@]}"
    echo "preflight: $free_gib GiB free, under $min_free_gib GiB: deleted cargo's incremental directories in $cache (${incremental[*]}); $(free_gib) GiB free now" >&2
    free_gib=$(free_gib)
  fi
fi
if ((free_gib < min_free_gib)); then
  # du fails on a pattern that matches nothing (a cache not built yet): what it measured stands.
  largest=$({ du -xsh "$cache"/* "$cache"/cargo-target/*/* 2>/dev/null || true; } | sort -h | tail -n 3 | awk '{printf "%s %s; ", $2, $1}')
  problems+=("only $free_gib GiB free for unprivileged use on the filesystem of $fs_dir; the builds, the images and the local cluster need $min_free_gib GiB (FERROVIRT_MIN_FREE_GIB). Largest caches: ${largest%; } (each is rebuilt when deleted, at the cost of the time it took)")
fi

if ((${#problems[@]})); then
  echo "preflight: this machine cannot run Ferrovirt's scripts yet:" >&2
  printf '  - %s\n' "${problems[@]}" >&2
  exit 1
fi
echo "preflight: root, apt, Rust $rust_have (>= $rust_min), $go_summary, $free_gib GiB free"
