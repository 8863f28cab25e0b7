#!/usr/bin/env bash
# Runs as the first process of a node's mount namespace (and, for worker nodes,
# network namespace), made by `unshare`; cluster.sh starts it. It lays out the
# node's private view of the file system, then sleeps, holding the namespaces
# for the node's containerd, kubelet and kube-proxy (which join with nsenter).
#
# Inside a node, the usual paths are the node's own, so manifests that mount
# /var/lib/kubelet/... or /run/containerd/... from the host work unchanged on
# every node:
#   /run                 a tmpfs (containerd's state, Pod netns files, CNI IPAM)
#   /var/lib/kubelet     -> $NODE_DIR/kubelet
#   /var/lib/containerd  -> $NODE_DIR/containerd
#   /etc/containerd      -> $NODE_DIR/etc-containerd
#   /etc/cni/net.d       -> $NODE_DIR/cni
#   /var/log/pods        -> $NODE_DIR/log/pods
#   /var/log/containers  -> $NODE_DIR/log/containers
#   /sys                 remounted for the node's own netns (worker nodes)
# Mounts here propagate to no other namespace (slave of the host), so they all
# vanish when the node's processes are gone.
set -euo pipefail
NODE_DIR=$1
OWN_NETNS=$2   # 1 when the node has its own network namespace

rm -f "$NODE_DIR/holder.ready"
mount -t tmpfs -o mode=755,size=256m ferrovirt-run /run

if [[ $OWN_NETNS == 1 ]]; then
    # sysfs shows the network devices of the netns that mounted it: mount a new
    # one, keeping the cgroup mounts underneath.
    mkdir -p /run/.cgroup
    mount --rbind /sys/fs/cgroup /run/.cgroup
    umount -l /sys
    mount -t sysfs sysfs /sys
    mount --move /run/.cgroup /sys/fs/cgroup
    rmdir /run/.cgroup
    ip link set lo up
fi

bind() {
    mkdir -p "$1"
    mount --bind "$1" "$2"
}
bind "$NODE_DIR/kubelet" /var/lib/kubelet
bind "$NODE_DIR/containerd" /var/lib/containerd
bind "$NODE_DIR/etc-containerd" /etc/containerd
bind "$NODE_DIR/cni" /etc/cni/net.d
bind "$NODE_DIR/log/pods" /var/log/pods
bind "$NODE_DIR/log/containers" /var/log/containers

# Pod volumes with mount propagation need shared mounts inside the node.
mount --make-rshared /

echo $$ >"$NODE_DIR/holder.ready"
exec sleep infinity
