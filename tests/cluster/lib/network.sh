# shellcheck shell=bash
# The host side of the cluster network. Sourced by cluster.sh.
#
#   host netns
#     fvbr0 10.231.0.1/24      the node network: API server, registry, and one
#       |                      veth per worker node
#       +-- fvv<n> ==veth== eth0 10.231.0.<n+1> in worker n's netns
#     fvcni0 10.244.0.1/24     the control node's Pods (CNI bridge)
#   worker n's netns
#     fvcni0 10.244.<n>.1/24   worker n's Pods
#
# No interface of the cluster has a default route: Pods route only to the Pod,
# Service and node networks, and the FERROVIRT-FORWARD chain drops anything
# forwarded from them elsewhere, so all traffic stays on this machine.

POD_CIDR=$POD_CIDR_PREFIX.0.0/16
NODE_CIDR=$NODE_NET.0/24
GUARD_CHAIN=FERROVIRT-FORWARD

setup_host_network() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
    fi
    ip addr replace "$BRIDGE_CIDR" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    # Locally sent packets to a Service IP need a route before kube-proxy's DNAT
    # rewrites them; this one keeps them on the bridge, never towards eth0.
    ip route replace "$SERVICE_CIDR" dev "$BRIDGE"

    if [[ ! -e "$STATE/ip_forward.orig" ]]; then
        cat /proc/sys/net/ipv4/ip_forward >"$STATE/ip_forward.orig"
    fi
    echo 1 >/proc/sys/net/ipv4/ip_forward
    [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] && echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables

    iptables -w -N "$GUARD_CHAIN" 2>/dev/null || iptables -w -F "$GUARD_CHAIN"
    local dst
    for dst in "$POD_CIDR" "$NODE_CIDR" "$SERVICE_CIDR"; do
        iptables -w -A "$GUARD_CHAIN" -d "$dst" -j RETURN
    done
    iptables -w -A "$GUARD_CHAIN" -s "$POD_CIDR" -j DROP
    iptables -w -A "$GUARD_CHAIN" -s "$NODE_CIDR" -j DROP
    iptables -w -C FORWARD -j "$GUARD_CHAIN" 2>/dev/null || iptables -w -I FORWARD 1 -j "$GUARD_CHAIN"
    # The host's FORWARD policy may be DROP: let the cluster's own traffic through.
    iptables -w -C FORWARD -s "$POD_CIDR" -d "$POD_CIDR" -j ACCEPT 2>/dev/null ||
        iptables -w -A FORWARD -s "$POD_CIDR" -d "$POD_CIDR" -j ACCEPT -m comment --comment ferrovirt
}

# Removes every chain and rule the cluster (kube-proxy, kubelet, CNI, us) left
# in the host's tables.
clean_host_iptables() {
    local ipt table chain
    for ipt in iptables ip6tables; do
        command -v $ipt >/dev/null || continue
        for table in filter nat mangle; do
            # Rules in built-in chains that jump to our chains or carry our comment.
            $ipt -w -t $table -S 2>/dev/null |
                grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*(-j (KUBE-|CNI-|'"$GUARD_CHAIN"')|--comment "?(ferrovirt|kubernetes|kube|cni))' |
                while read -r rule; do
                    # shellcheck disable=SC2086 # the rule is iptables' own word list
                    eval "$ipt -w -t $table ${rule/-A /-D }" 2>/dev/null || true
                done || true
            for chain in $($ipt -w -t $table -S 2>/dev/null | awk '/^-N (KUBE-|CNI-|'"$GUARD_CHAIN"')/ {print $2}'); do
                $ipt -w -t $table -F "$chain" 2>/dev/null || true
            done
            for chain in $($ipt -w -t $table -S 2>/dev/null | awk '/^-N (KUBE-|CNI-|'"$GUARD_CHAIN"')/ {print $2}'); do
                $ipt -w -t $table -X "$chain" 2>/dev/null || true
            done
        done
    done
}

teardown_host_network() {
    clean_host_iptables
    ip route del "$SERVICE_CIDR" dev "$BRIDGE" 2>/dev/null || true
    local link
    for link in $(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^(fvv[0-9]+|fvk[0-9]+|fvcni0|'"$BRIDGE"')$'); do
        ip link del "$link" 2>/dev/null || true
    done
    # Pod veths of the control node go with their netns; remove any stragglers
    # still enslaved to the CNI bridge (already gone above).
    if [[ -e "$STATE/ip_forward.orig" ]]; then
        cat "$STATE/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward
        rm -f "$STATE/ip_forward.orig"
    fi
}
