#!/usr/bin/env bash
# Installs the Debian packages that building and testing Ferrovirt need. Each component's own
# script (guest-images/build.sh, tests/cluster/cluster.sh) installs what it needs as well; this
# covers the Rust workspace itself. Idempotent: quick when everything is there.
set -euo pipefail

packages=(
  build-essential pkg-config
  qemu-system-x86 qemu-utils  # the TCG backend, qcow2 containerDisks, the QEMU side of the benchmarks
  iproute2 iptables    # launcher networking tests (netns, tap, NAT)
  e2fsprogs dosfstools mtools genisoimage xorriso  # disk images and cloud-init disks
  mmdebstrap fdisk      # guest-images/debian-cloud/build.sh: the Debian cloud image, its GPT
  grub-pc-bin grub-efi-amd64-bin  # ... and its boot loaders (BIOS core image, BOOTX64.EFI)
  ovmf                  # the launcher's UEFI firmware (firmware.bootloader.efi), tests/firmware_boot.rs
  busybox-static        # the launcher's network test (nc in the client namespace)
  socat util-linux      # the end-to-end tests read consoles from the nodes
  openssl curl          # TLS tests: certificates for virt-api and virt-handler, mutual TLS checks
  shellcheck            # hack/shellcheck.sh, a step of hack/test.sh
  python3-minimal xz-utils  # tests/kubevirt-suite: its report and the suite's .xz binaries
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "all ${#packages[@]} packages present"
fi
command -v cargo >/dev/null || { echo "cargo is missing: install Rust (rustup) first" >&2; exit 1; }
