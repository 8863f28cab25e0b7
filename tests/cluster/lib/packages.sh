# shellcheck shell=bash
# Debian packages the cluster runs on. Sourced by cluster.sh after common.sh.

DEBIAN_PACKAGES=(
    etcd-server                 # etcd, the cluster store
    containerd runc             # container runtime
    containernetworking-plugins # CNI bridge, host-local, loopback, portmap
    iptables conntrack          # kube-proxy (iptables mode)
    docker-registry             # the local OCI registry (distribution)
    openssl                     # certificates
    socat                       # 127.0.0.1:5000 -> registry, kubectl port-forward
    iproute2 util-linux procps curl
    busybox-static              # the test image's userland
    gcc libc6-dev               # the pause program, linked statically
)

packages_missing() {
    local p
    for p in "${DEBIAN_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
    done
}

install_packages() {
    local missing=()
    mapfile -t missing < <(packages_missing)
    ((${#missing[@]} == 0)) && return 0
    log "installing Debian packages: ${missing[*]}"
    # There is no init system here: keep the packages' maintainer scripts from
    # starting their own daemons (we run etcd, containerd and the registry ourselves).
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
    fi
    local stamp=/var/lib/apt/periodic/ferrovirt-apt-updated
    if [[ ! -e $stamp ]] || ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq || die "apt-get update failed"
        mkdir -p "$(dirname "$stamp")" && touch "$stamp"
    fi
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$STATE/apt.log" 2>&1; then
        tail -n 20 "$STATE/apt.log" >&2
        ((created_policy)) && rm -f "$policy"
        die "apt-get install failed (log: $STATE/apt.log)"
    fi
    ((created_policy)) && rm -f "$policy"
    return 0
}
