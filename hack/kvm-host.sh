#!/usr/bin/env bash
# Runs a command inside an L1 VM that has real (nested) KVM: the nested-KVM test tier.
#
# This machine's /dev/kvm is PVM and cannot run a stock Linux guest. QEMU TCG with `-cpu max`
# exposes SVM and nested paging, and inside such a VM Debian's cloud kernel loads kvm_amd and
# gives a /dev/kvm that runs standard guests. This script:
#   1. builds the L1 once (cached under $FERROVIRT_KVM_HOST_CACHE, default
#      /var/cache/ferrovirt/kvm-host): Debian's cloud kernel taken from its package with
#      `dpkg-deb -x` (never installed on this host), and a small uncompressed initramfs with
#      busybox-static, the kvm modules (irqbypass, kvm, kvm-amd) and those for networking
#      (tun, bridge, veth, virtio-net) with their dependencies from modules.dep, and an /init;
#   2. packs the files named with --file (an ELF executable with its shared libraries) and the
#      command into a second cpio archive appended to the first, so the L1 needs no disk;
#   3. boots it with `qemu-system-x86_64 -M microvm -accel tcg -cpu max` under a deadline; the
#      L1's /init mounts proc, sysfs, devtmpfs and a pure cgroup2 hierarchy, loads the modules,
#      brings up lo, checks /dev/kvm, runs the command with its output on the serial console
#      (streamed to this script's stdout), prints its exit status behind a marker and powers
#      off;
#   4. exits with the command's exit status, or 124 when the deadline passed, 125 when the L1
#      ended without one (it failed before the command ran, or its kernel panicked: QEMU is
#      killed 5 s after the L1's panic line), with what it printed. The L1 is always killed.
#
# Usage: hack/kvm-host.sh [OPTIONS] -- CMD [ARG...]
#   --file SRC[:DEST]  copy SRC (file or directory, symlinks followed) into the L1 at DEST,
#                      by default at SRC's own absolute path; repeatable
#   --env NAME=VALUE   set in CMD's environment; repeatable
#   --mem MIB          L1 memory (default 3072)
#   --cpus N           L1 vCPUs (default 2)
#   --timeout SECONDS  deadline for the whole run (default 900)
#   --build            only build the cached L1 and print its directory
# The command runs as root in /, with PATH=/usr/sbin:/usr/bin:/sbin:/bin; the kernel's own
# messages (warnings and worse) are mixed into its output.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${FERROVIRT_KVM_HOST_CACHE:-/var/cache/ferrovirt/kvm-host}
EXIT_MARKER=FERROVIRT-L1-EXIT=
CMD_MARKER=FERROVIRT-L1-CMD-START

die() {
  echo "kvm-host: $*" >&2
  exit 125
}

files=() envs=() mem=3072 cpus=2 timeout=900 build_only=0
while (($#)); do
  case $1 in
  --file) files+=("$2"); shift 2 ;;
  --env) envs+=("$2"); shift 2 ;;
  --mem) mem=$2; shift 2 ;;
  --cpus) cpus=$2; shift 2 ;;
  --timeout) timeout=$2; shift 2 ;;
  --build) build_only=1; shift ;;
  --) shift; break ;;
  *) die "unknown option $1 (usage: hack/kvm-host.sh [--file SRC[:DEST]]... [--env N=V]... [--mem MIB] [--cpus N] [--timeout S] -- CMD...)" ;;
  esac
done
((build_only || $#)) || die "no command given (usage: hack/kvm-host.sh [OPTIONS] -- CMD [ARG...])"
((EUID == 0)) || die "runs as root (it installs Debian packages and downloads the kernel package)"

# --- 1. the cached L1: kernel and base initramfs -------------------------------------------

need_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return
  echo "kvm-host: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# Modules the L1 loads, in this order after their dependencies.
L1_MODULES=(irqbypass kvm kvm-amd tun bridge veth virtio_net virtio_blk virtio_mmio)

build_l1() {
  local pkg version release key dir
  read -r pkg version release < <("$here/debian-kernel.sh" --which) || die "no Debian kernel package"
  key=$(
    {
      echo "$pkg $version"
      dpkg-query -W -f='${Version}' busybox-static
      sed -n '/^L1_MODULES=/p; /^write_init()/,/^}/p' "$0"
    } | sha256sum | cut -c1-16
  )
  dir=$cache/l1-$key
  if [[ -e $dir/ready ]]; then
    echo "$dir"
    return
  fi
  # Nested tests run side by side and all start here on a fresh machine: one builds, the others
  # wait for it (the lock goes with this subshell) and then find the L1 ready.
  mkdir -p "$cache"
  local lock
  exec {lock}>"$cache/.build.lock"
  flock "$lock"
  if [[ -e $dir/ready ]]; then
    echo "$dir"
    return
  fi
  echo "kvm-host: building the L1 ($pkg $version) into $dir" >&2
  rm -rf "$dir" "$dir.tmp"
  mkdir -p "$dir.tmp/root"
  local kernel
  kernel=$("$here/debian-kernel.sh" | tail -n 1) || die "could not extract $pkg"
  cp "$kernel/boot/vmlinuz-$release" "$dir.tmp/vmlinuz"
  local mods=$kernel/lib/modules/$release root=$dir.tmp/root

  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc,payload,lib/modules/l1}
  cp /bin/busybox "$root/bin/busybox"
  "$root/bin/busybox" --list-full | while read -r applet; do
    [[ -e $root/$applet ]] || ln -s /bin/busybox "$root/$applet"
  done
  # modules.dep lines: "kernel/.../x.ko: dep1.ko dep2.ko" with dependencies of dependencies
  # listed too, deepest last; load them in reverse, then the module.
  local m line order=()
  for m in "${L1_MODULES[@]}"; do
    line=$(grep -E "/${m//_/[_-]}\.ko(\.[a-z]+)?:" "$mods/modules.dep" | head -n 1) ||
      die "module $m not in $pkg"
    local deps=() path
    read -r -a deps <<<"${line#*:}"
    for ((i = ${#deps[@]} - 1; i >= 0; i--)); do order+=("${deps[i]}"); done
    order+=("${line%%:*}")
  done
  local seen=" "
  : >"$root/lib/modules/l1/load-order"
  for path in "${order[@]}"; do
    [[ $seen == *" $path "* ]] && continue
    seen+="$path "
    case $path in
    *.ko) cp "$mods/$path" "$root/lib/modules/l1/" ;;
    *.ko.xz) xz -dc "$mods/$path" >"$root/lib/modules/l1/$(basename "${path%.xz}")" ;;
    *) die "module file of unknown kind: $path" ;;
    esac
    basename "${path%.xz}" >>"$root/lib/modules/l1/load-order"
  done
  write_init >"$root/init"
  chmod 755 "$root/init"
  echo "root:x:0:0:root:/:/bin/sh" >"$root/etc/passwd"
  echo "root:x:0:" >"$root/etc/group"
  (cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$dir.tmp/base.cpio"
  echo "$pkg $version" >"$dir.tmp/kernel-package"
  rm -rf "$dir.tmp/root"
  touch "$dir.tmp/ready"
  mv "$dir.tmp" "$dir"
  echo "$dir"
}

write_init() {
  cat <<'EOF'
#!/bin/sh
# /init of the L1 of hack/kvm-host.sh.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /sys/fs/cgroup
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o size=50% tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
while read -r m; do
    insmod "/lib/modules/l1/$m" 2>/tmp/insmod.err || { echo "l1: insmod $m: $(cat /tmp/insmod.err)"; }
done </lib/modules/l1/load-order
ip link set lo up
hostname ferrovirt-l1
if [ ! -c /dev/kvm ]; then
    echo "l1: no /dev/kvm: kvm_amd did not load (does the L0 QEMU run with -cpu max?)"
    grep -m1 -o 'svm' /proc/cpuinfo >/dev/null || echo "l1: the L1 CPU has no svm flag"
    echo "FERROVIRT-L1-EXIT=125"
    poweroff -f
fi
echo "FERROVIRT-L1-CMD-START"
cd /
sh /payload/.l1-command </dev/null 2>&1
echo "FERROVIRT-L1-EXIT=$?"
sync
poweroff -f
EOF
}

need_packages busybox-static cpio qemu-system-x86 xz-utils kmod
l1=$(build_l1)
if ((build_only)); then
  echo "$l1"
  exit 0
fi

# --- 2. the payload: files and the command -------------------------------------------------

tmp=$(mktemp -d /tmp/kvm-host.XXXXXX)
qemu_pid=
cleanup() {
  [[ -n $qemu_pid ]] && kill -9 "$qemu_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
stage=$tmp/payload
mkdir -p "$stage/payload"

# copy_in SRC DEST: SRC into the stage at DEST; ELF executables bring their libraries.
copy_in() {
  local src=$1 dest=$2
  [[ -e $src ]] || die "--file $src: no such file"
  mkdir -p "$stage$(dirname "$dest")"
  cp -rL --preserve=mode "$src" "$stage$dest"
  if [[ -f $src && -x $src ]] && head -c 4 "$src" | grep -q ELF; then
    local lib
    for lib in $(ldd "$src" 2>/dev/null | grep -oE '/[^ ]+' || true); do
      [[ -e $stage$lib ]] && continue
      mkdir -p "$stage$(dirname "$lib")"
      cp -L "$lib" "$stage$lib"
    done
  fi
}

for f in "${files[@]}"; do
  if [[ $f == *:* ]]; then
    copy_in "${f%%:*}" "${f#*:}"
  else
    copy_in "$f" "$(realpath -s "$f")"
  fi
done
{
  echo "set -e"
  for e in "${envs[@]}"; do printf 'export %q\n' "$e"; done
  echo "set +e"
  printf '%q ' "$@"
  echo
} >"$stage/payload/.l1-command"
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$tmp/payload.cpio"
cat "$l1/base.cpio" "$tmp/payload.cpio" >"$tmp/initrd.cpio"
rm -rf "$stage" "$tmp/payload.cpio"

# --- 3. boot it under a deadline, stream the serial console ---------------------------------

tsc_khz=$(awk -F: '/cpu MHz/ {printf "%d", $2 * 1000; exit}' /proc/cpuinfo)
cmdline="console=ttyS0 loglevel=4 panic=-1 rdinit=/init tsc_early_khz=$tsc_khz"
mkfifo "$tmp/serial"
qemu-system-x86_64 -M microvm,pit=on,pic=on,rtc=on -accel tcg,thread=multi -cpu max \
  -smp "$cpus" -m "$mem" -nodefaults -no-user-config -display none -no-reboot \
  -chardev "file,id=s0,path=$tmp/serial" -serial chardev:s0 \
  -kernel "$l1/vmlinuz" -initrd "$tmp/initrd.cpio" -append "$cmdline" \
  </dev/null 2>"$tmp/qemu.err" &
qemu_pid=$!
started=$SECONDS

rc='' ran=0 exited_at='' panicked_at='' buf=''
# handle LINE: one line of the serial console.
handle() {
  local line=${1%$'\r'}
  case $line in
  "$CMD_MARKER"*) ran=1 ;;
  "$EXIT_MARKER"*)
    rc=${line#"$EXIT_MARKER"}
    exited_at=$SECONDS
    ;;
  *)
    # The L1 kernel's own panic line (its console's timestamp first): panic=-1 should end
    # QEMU at once, but an L1 that overflowed its stack in KVM_RUN was seen printing it and
    # then hanging for 18 minutes, until QEMU was killed.
    if [[ -z $panicked_at && $line =~ ^\[\ *[0-9]+\.[0-9]+\]\ Kernel\ panic\ -\ not\ syncing ]]; then
      panicked_at=$SECONDS
    fi
    printf '%s\n' "$line"
    ;;
  esac
}
# The fifo's writer is QEMU: reading ends when QEMU exits or is killed. Reads time out every
# second to check the deadline, the grace after the exit status (poweroff -f ends QEMU at
# once; past 10 s it is killed) and the grace after the L1 kernel panicked (5 s, for the rest
# of its report).
while :; do
  chunk=
  if IFS= read -r -t 1 chunk; then
    handle "$buf$chunk"
    buf=
  elif (($? > 128)); then
    buf+=$chunk
    if ((SECONDS - started >= timeout)) ||
      [[ -n $exited_at && $((SECONDS - exited_at)) -ge 10 ]] ||
      [[ -n $panicked_at && $((SECONDS - panicked_at)) -ge 5 ]]; then
      kill -9 "$qemu_pid" 2>/dev/null || true
    fi
  else
    [[ -n $buf$chunk ]] && handle "$buf$chunk"
    break
  fi
done <"$tmp/serial"
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=
took=$((SECONDS - started))

if [[ -z $rc ]]; then
  if ((took >= timeout)); then
    echo "kvm-host: deadline of ${timeout}s passed (command started: $((ran == 1 ? 1 : 0)))" >&2
    exit 124
  fi
  [[ -n $panicked_at ]] && echo "kvm-host: the L1 kernel panicked; its QEMU was killed 5 s later" >&2
  echo "kvm-host: the L1 ended after ${took}s without an exit status; QEMU said:" >&2
  cat "$tmp/qemu.err" >&2
  exit 125
fi
((ran)) || echo "kvm-host: the L1 failed before the command ran" >&2
echo "kvm-host: exit status $rc after ${took}s" >&2
exit "$rc"
