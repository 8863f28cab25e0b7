#!/bin/bash
# Builds the Ferrovirt microVM guest kernel from Debian's linux-source-6.1.
#
#   build-kernel.sh OUT_DIR WORK_DIR
#
# OUT_DIR receives vmlinux (PVH ELF, stripped), bzImage, config and build-time.txt.
# WORK_DIR holds the extracted source tree and the object files (kept between runs).
set -euo pipefail

out_dir=$1
work_dir=$2
here=$(cd "$(dirname "$0")" && pwd)
fragment="$here/ferrovirt-microvm.config"
tarball=$(ls /usr/src/linux-source-6.1.tar.xz 2>/dev/null || ls /usr/src/linux-source-*.tar.xz | sort -V | tail -n 1)
src_name=$(basename "$tarball" .tar.xz)

mkdir -p "$work_dir" "$out_dir"
src="$work_dir/$src_name"
if [ ! -f "$src/.ferrovirt-extracted" ]; then
    echo "kernel: extracting $tarball"
    rm -rf "$src"
    tar -xJf "$tarball" -C "$work_dir"
    touch "$src/.ferrovirt-extracted"
fi

# Reproducible build metadata.
export KBUILD_BUILD_TIMESTAMP="1970-01-01 00:00:00 UTC"
export KBUILD_BUILD_USER=ferrovirt
export KBUILD_BUILD_HOST=guest-images
export KBUILD_BUILD_VERSION=1
jobs=${FERROVIRT_BUILD_JOBS:-$(nproc)}

cd "$src"
echo "kernel: configuring (tinyconfig + $(basename "$fragment"))"
make -s tinyconfig >/dev/null
./scripts/kconfig/merge_config.sh -m -O . .config "$fragment" >/dev/null
make -s olddefconfig >/dev/null

# Every option the fragment turns on must still be on after olddefconfig resolved dependencies.
missing=0
while IFS= read -r line; do
    case "$line" in
        CONFIG_*=*)
            if ! grep -qx "$line" .config; then
                echo "kernel: config option lost after olddefconfig: $line" >&2
                missing=1
            fi
            ;;
    esac
done <"$fragment"
[ "$missing" = 0 ] || exit 1

echo "kernel: make -j$jobs bzImage (nice)"
start=$(date +%s)
nice -n 10 make -j"$jobs" bzImage >"$out_dir/build.log" 2>&1 || {
    tail -n 40 "$out_dir/build.log" >&2
    exit 1
}
end=$(date +%s)
echo "$((end - start))" >"$out_dir/build-seconds.txt"
echo "kernel: built in $((end - start)) s"

strip --strip-debug -o "$out_dir/vmlinux" vmlinux
cp arch/x86/boot/bzImage "$out_dir/bzImage"
cp .config "$out_dir/config"
make -s kernelrelease >"$out_dir/kernelrelease"
