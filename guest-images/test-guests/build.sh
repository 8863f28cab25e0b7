#!/bin/sh
# Builds the Ferrovirt test guests (freestanding x86-64 ELF kernels) with GNU as and ld.
# Usage: build.sh OUTDIR   -> OUTDIR/{serial,blk,net,rng,counter,memtest,vsock,fault}.elf
set -eu
out=${1:?usage: build.sh OUTDIR}
src=$(cd "$(dirname "$0")" && pwd)
if ! command -v as >/dev/null || ! command -v ld >/dev/null; then
    echo "build.sh: GNU as/ld missing: apt-get install -y binutils" >&2
    exit 1
fi
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for guest in serial blk net rng counter memtest vsock fault; do
    as --64 -I "$src" -o "$tmp/$guest.o" "$src/$guest.s"
    ld -m elf_x86_64 -nostdlib -static -z max-page-size=4096 --build-id=none --no-warn-rwx-segments \
        -T "$src/link.ld" -o "$tmp/$guest.elf" "$tmp/$guest.o"
    mv "$tmp/$guest.elf" "$out/$guest.elf"
done
echo "test guests built in $out"
