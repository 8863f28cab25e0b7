# shellcheck shell=bash
# KVM worker nodes: a node that is a VM with real (nested) KVM. Sourced by cluster.sh after
# nodes.sh.
#
# This machine's /dev/kvm is PVM and runs no standard guest, so every VM of the netns nodes runs
# on QEMU TCG. QEMU TCG with `-cpu max` exposes SVM and nested paging: inside such a VM (an
# "L1"), Debian's cloud kernel loads kvm_amd and offers a /dev/kvm on which Ferrovirt's own VMM
# runs Linux guests. `cluster.sh add-node --kvm NAME` starts one as a worker node:
#
#   host                                    L1 (qemu-system-x86_64 -M microvm -accel tcg -cpu max)
#     fvbr0 10.231.0.1 --- tap fvk<n> ====== eth0 10.231.0.<n+1>   (virtio-net)
#     root.qcow2 (over the cached image) === /dev/vda  ext4 root: Debian bookworm with
#                                                      containerd, runc, CNI plugins, iptables,
#                                                      the cloud kernel's modules, kubelet and
#                                                      kube-proxy of this cluster's build
#     config.img (the node's files) ======== /dev/vdb  copied over / at boot
#     serial console, 3 virtio consoles ==== the node's log and its daemons' logs:
#                                            $LOGS/<name>-{l1,containerd,kubelet,kube-proxy}.log
#
# Busybox init runs the node (kvm-node/inittab): kvm-node/node-setup mounts cgroup2 (cgroup v2
# only, as a current distribution has it), loads kvm_amd, tun, bridge and the netfilter modules
# and sets up eth0 and its routes; then containerd, kubelet and kube-proxy run with the
# arguments and files the netns nodes' daemons get, and are started again when they exit.
#
# The node is tainted `ferrovirt.io/nested-kvm=true:NoSchedule`: everything in it runs under
# software emulation, so only what tolerates that taint (virt-handler, which tolerates every
# taint, and the VMIs that ask for it) runs there. Its state is the qcow2 overlay of its root,
# kept while the node lives; `remove-node` deletes it.

KVM_NODE_DIR=$HERE/kvm-node
KVM_NODE_CACHE=$CACHE_DIR/kvm-node
KVM_NODE_TAINT=ferrovirt.io/nested-kvm=true:NoSchedule
KVM_NODE_MEM_MIB=${FERROVIRT_KVM_NODE_MEM_MIB:-4096}
KVM_NODE_CPUS=${FERROVIRT_KVM_NODE_CPUS:-2}
# What the node's root holds besides the base system (their dependencies come along).
KVM_NODE_PACKAGES=(
    linux-image-cloud-amd64 kmod busybox-static
    containerd runc containernetworking-plugins
    iptables conntrack iproute2 util-linux mount procps ca-certificates
)
# Modules the initramfs loads to reach the root disk, after their dependencies.
KVM_NODE_INITRAMFS_MODULES=(virtio_mmio virtio_blk)

# kvm_node_image: builds the node's kernel, initramfs and root image once (cached under
# $KVM_NODE_CACHE/<key>, the key a hash of these scripts, the packages' versions and the
# Kubernetes binaries), and prints the directory.
kvm_node_image() {
    local key
    key=$(
        {
            cat "$HERE/lib/kvm-node.sh" "$KVM_NODE_DIR"/*
            apt-cache policy "${KVM_NODE_PACKAGES[@]}" | awk '/^[^ ]/ { p = $1 } /Candidate:/ { print p $2 }'
            sha256sum "$KUBE_BIN/kubelet" "$KUBE_BIN/kube-proxy"
        } | sha256sum | cut -c1-16
    )
    local dir=$KVM_NODE_CACHE/$key
    if [[ -e $dir/ready ]]; then
        echo "$dir"
        return
    fi
    mkdir -p "$KVM_NODE_CACHE"
    local lock
    exec {lock}>"$KVM_NODE_CACHE/.build.lock"
    flock "$lock"
    if [[ ! -e $dir/ready ]]; then
        build_kvm_node_image "$dir" >&2
    fi
    exec {lock}>&-
    echo "$dir"
}

build_kvm_node_image() {
    local dir=$1 started=$SECONDS
    local tmp=$dir.tmp tree=$dir.tmp/tree
    log "building the KVM node image into $dir (mmdebstrap bookworm: containerd, runc, the cloud kernel)"
    command -v mmdebstrap >/dev/null || {
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2 ||
            die "cannot install mmdebstrap"
    }
    rm -rf "$dir" "$tmp"
    mkdir -p "$tmp"
    local mirror=${FERROVIRT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
    local security=${FERROVIRT_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
    # No init system runs in the chroot: the packages' maintainer scripts start no daemon.
    if ! mmdebstrap --mode=root --variant=minbase --format=directory \
        --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --include="$(
            IFS=,
            echo "${KVM_NODE_PACKAGES[*]}"
        )" \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb' \
        bookworm "$tree" "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
        "deb $security bookworm-security main" >"$tmp/mmdebstrap.log" 2>&1; then
        tail -n 30 "$tmp/mmdebstrap.log" >&2
        die "mmdebstrap of the KVM node image failed (log: $tmp/mmdebstrap.log)"
    fi
    local release
    release=$(find "$tree/boot" -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | head -n 1)
    [[ -n $release ]] || die "the KVM node image has no kernel in /boot"
    cp "$tree/boot/vmlinuz-$release" "$tmp/vmlinuz"

    # The node's own programs and configuration.
    install -m 0755 "$KUBE_BIN/kubelet" "$KUBE_BIN/kube-proxy" "$tree/usr/local/bin/"
    install -m 0755 "$KVM_NODE_DIR/node-setup" "$tree/usr/local/sbin/ferrovirt-node-setup"
    install -m 0755 "$KVM_NODE_DIR/node-run" "$tree/usr/local/sbin/ferrovirt-node-run"
    install -m 0644 "$KVM_NODE_DIR/inittab" "$tree/etc/inittab"
    : >"$tree/etc/machine-id"

    # The initramfs: busybox and the modules that reach the root disk.
    local initrd=$tmp/initrd
    mkdir -p "$initrd"/{bin,sbin,proc,sys,dev,tmp,newroot,lib/modules}
    cp "$tree/bin/busybox" "$initrd/bin/busybox"
    local applet
    for applet in sh mount umount insmod sleep switch_root poweroff cat ls mkdir; do
        ln -s busybox "$initrd/bin/$applet"
    done
    # Dependencies first, in the order modprobe would load them (as guest-images/tiny does).
    local m path
    : >"$initrd/lib/modules/load-order"
    for m in "${KVM_NODE_INITRAMFS_MODULES[@]}"; do
        modprobe -d "$tree" -S "$release" --show-depends "$m" ||
            die "module $m is not in the node's kernel $release"
    done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r path; do
        case $path in
        *.ko) cp "$path" "$initrd/lib/modules/" ;;
        *.ko.xz) xz -dc "$path" >"$initrd/lib/modules/$(basename "${path%.xz}")" ;;
        *) die "module file of unknown kind: $path" ;;
        esac
        basename "${path%.xz}" >>"$initrd/lib/modules/load-order"
    done || die "collecting the initramfs modules of the node's kernel $release failed"
    install -m 0755 "$KVM_NODE_DIR/initramfs-init" "$initrd/init"
    (cd "$initrd" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$tmp/initrd.cpio"
    rm -rf "$initrd"

    # The root: ext4 made from the tree, with room for the node's images and Pods (sparse).
    local used_mib
    used_mib=$(du -sm --apparent-size "$tree" | cut -f1)
    mkfs.ext4 -q -F -L ferrovirt-node -E root_owner=0:0 -d "$tree" "$tmp/root.img" "$((used_mib + 16384))M" ||
        die "mkfs.ext4 of the KVM node root failed"
    echo "$release" >"$tmp/kernel-release"
    rm -rf "$tree"
    touch "$tmp/ready"
    mv "$tmp" "$dir"
    log "built the KVM node image in $((SECONDS - started))s (kernel $release, root ${used_mib} MiB used)"
}

# write_kvm_node_files NAME: the node's config disk, with the files write_node_config wrote for
# it at the paths the host uses, and /etc/ferrovirt-node.env for kvm-node/node-setup and
# kvm-node/node-run.
write_kvm_node_files() {
    local name=$1 dir files
    dir=$(node_dir "$name")
    load_node "$name"
    files=$dir/config-files
    rm -rf "$files"
    mkdir -p "$files/files/$PKI" "$files/files/$KCFG" "$files/files/$dir" "$files/files/etc/containerd" \
        "$files/files/etc/cni/net.d"
    cp "$PKI/ca.crt" "$PKI/kubelet-$name-serving.crt" "$PKI/kubelet-$name-serving.key" "$files/files/$PKI/"
    cp "$KCFG/kubelet-$name.kubeconfig" "$KCFG/kube-proxy.kubeconfig" "$files/files/$KCFG/"
    # cgroup v2 in the L1 with no hierarchy of the host's: Pods under the kubelet's own root.
    # It registers with its taint, so nothing lands there before the taint is on.
    {
        sed 's#^cgroupRoot: .*#cgroupRoot: /#' "$dir/kubelet-config.yaml"
        cat <<EOF
registerWithTaints:
- key: ${KVM_NODE_TAINT%%=*}
  value: "$(cut -d= -f2 <<<"${KVM_NODE_TAINT%%:*}")"
  effect: ${KVM_NODE_TAINT##*:}
EOF
    } >"$files/files/$dir/kubelet-config.yaml"
    cp "$dir/kube-proxy.yaml" "$dir/resolv.conf" "$files/files/$dir/"
    cp -r "$dir/etc-containerd/." "$files/files/etc/containerd/"
    cp "$dir/cni/"* "$files/files/etc/cni/net.d/"
    cat >"$files/files/etc/ferrovirt-node.env" <<EOF
NODE_NAME=$name
NODE_IP=$NODE_IP
HOST_IP=$NODE_NET.1
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
KUBELET_CONFIG=$dir/kubelet-config.yaml
KUBELET_KUBECONFIG=$KCFG/kubelet-$name.kubeconfig
KUBE_PROXY_CONFIG=$dir/kube-proxy.yaml
EOF
    rm -f "$dir/config.img"
    mkfs.ext4 -q -F -L ferrovirt-config -d "$files" "$dir/config.img" 16M || die "cannot make $name's config disk"
    chmod 600 "$dir/config.img"
    rm -rf "$files"
}

kvm_node_tap() { echo "fvk$1"; }

# start_kvm_node NAME: boots the node's L1 (no-op when it runs).
start_kvm_node() {
    local name=$1 dir image tap
    dir=$(node_dir "$name")
    load_node "$name"
    daemon_running "$name-l1" && return 0
    image=$(kvm_node_image)
    make_node_pki "$name" "$NODE_IP"
    write_node_config "$name"
    write_kvm_node_files "$name"
    if [[ ! -e $dir/root.qcow2 || "$(cat "$dir/root.base" 2>/dev/null)" != "$image" ]]; then
        rm -f "$dir/root.qcow2"
        qemu-img create -q -f qcow2 -F raw -b "$image/root.img" "$dir/root.qcow2" || die "cannot make $name's root overlay"
        echo "$image" >"$dir/root.base"
    fi
    tap=$(kvm_node_tap "$NODE_INDEX")
    ip link del "$tap" 2>/dev/null || true
    ip tuntap add "$tap" mode tap
    ip link set "$tap" master "$BRIDGE" up
    ip route replace "$POD_CIDR_PREFIX.$NODE_INDEX.0/24" via "$NODE_IP"
    local tsc_khz cmdline console
    tsc_khz=$(awk -F: '/cpu MHz/ {printf "%d", $2 * 1000; exit}' /proc/cpuinfo)
    cmdline="console=ttyS0 loglevel=4 panic=-1 rdinit=/init tsc_early_khz=$tsc_khz"
    local args=(-M "microvm,pit=on,pic=on,rtc=on" -accel "tcg,thread=multi" -cpu max
        -smp "$KVM_NODE_CPUS" -m "$KVM_NODE_MEM_MIB" -nodefaults -no-user-config -display none -no-reboot
        -kernel "$image/vmlinuz" -initrd "$image/initrd.cpio" -append "$cmdline"
        -serial stdio
        -drive "file=$dir/root.qcow2,format=qcow2,if=none,id=root,cache=unsafe,discard=unmap"
        -device "virtio-blk-device,drive=root"
        -drive "file=$dir/config.img,format=raw,if=none,id=config,readonly=on"
        -device "virtio-blk-device,drive=config"
        -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no"
        -device "virtio-net-device,netdev=n0,mac=52:54:00:f7:00:$(printf %02x "$NODE_INDEX")"
        -device virtio-serial-device)
    local i=0
    for console in containerd kubelet kube-proxy; do
        args+=(-chardev "file,id=log$i,path=$LOGS/$name-$console.log,append=on" -device "virtconsole,chardev=log$i")
        i=$((i + 1))
    done
    date +%s >"$dir/kubelet.started"
    start_daemon "$name-l1" "$name/system" qemu-system-x86_64 "${args[@]}"
    log "started KVM node $name's L1 (QEMU TCG -cpu max, $KVM_NODE_CPUS vCPUs, $KVM_NODE_MEM_MIB MiB; console: $LOGS/$name-l1.log)"
}

# kvm_node_failed NAME: the node's L1 is gone, or said that it failed.
kvm_node_failed() {
    ! daemon_running "$1-l1" || grep -q FERROVIRT-KVM-NODE-FAILED "$LOGS/$1-l1.log" 2>/dev/null
}

# taint_kvm_node NAME: once its Node object exists.
taint_kvm_node() {
    kubectl_admin taint node "$1" "$KVM_NODE_TAINT" --overwrite >/dev/null
}

remove_kvm_node_network() {
    ip link del "$(kvm_node_tap "$1")" 2>/dev/null || true
}

# wait_kvm_node_ready NAME SINCE SECONDS: Ready with a lease renewed since SINCE (its L1's start),
# and tainted; fails at once when the L1 is gone or its setup failed.
wait_kvm_node_ready() {
    local name=$1 since=$2 secs=$3 deadline
    deadline=$((SECONDS + secs))
    until node_ready "$name" "$since"; do
        if kvm_node_failed "$name"; then
            tail -n 30 "$LOGS/$name-l1.log" >&2
            die "KVM node $name's L1 failed (console: $LOGS/$name-l1.log)"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 20 "$LOGS/$name-kubelet.log" >&2
            die "KVM node $name is not Ready after ${secs}s (logs: $LOGS/$name-l1.log, $LOGS/$name-kubelet.log, $LOGS/$name-containerd.log)"
        fi
        sleep 2
    done
    taint_kvm_node "$name"
}
