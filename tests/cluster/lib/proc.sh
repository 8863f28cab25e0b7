# shellcheck shell=bash
# Daemons and the cgroups that hold them. Sourced by cluster.sh after common.sh.
#
# Every process of the cluster lives in a cgroup under /ferrovirt (cgroup v1:
# the same path in every mounted hierarchy):
#   /ferrovirt/control-plane         etcd, the API server, controller-manager,
#                                    scheduler, the registry
#   /ferrovirt/<node>/system         the node's holder, containerd (and its
#                                    shims), kubelet, kube-proxy
#   /ferrovirt/<node>/kubepods/...   the node's Pods (kubelet's cgroupRoot)
# `down` freezes each subtree, kills every task in it and removes it, so no
# process escapes, whatever it forked.

CG_ROOT=ferrovirt

cg_hierarchies() {
    local d
    for d in /sys/fs/cgroup/*; do
        [[ -e "$d/cgroup.procs" ]] && echo "$d"
    done
}

# cg_create PATH: make PATH (relative to /ferrovirt) in every hierarchy.
cg_create() {
    local parts h cur part
    IFS=/ read -ra parts <<<"$CG_ROOT/$1"
    for h in $(cg_hierarchies); do
        cur=$h
        for part in "${parts[@]}"; do
            cur=$cur/$part
            if [[ ! -d $cur ]]; then
                mkdir "$cur"
                # cpuset children start empty in cgroup v1: inherit the parent's.
                if [[ -e $cur/cpuset.cpus ]]; then
                    cat "$(dirname "$cur")/cpuset.cpus" >"$cur/cpuset.cpus"
                    cat "$(dirname "$cur")/cpuset.mems" >"$cur/cpuset.mems"
                fi
            fi
        done
    done
}

# cg_pids PATH: every task in the PATH subtree (the pids hierarchy sees them all).
cg_pids() {
    local base=/sys/fs/cgroup/pids/$CG_ROOT${1:+/$1}
    [[ -d $base ]] || return 0
    find "$base" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un
}

# cg_destroy PATH: kill every task in the PATH subtree and remove it everywhere.
cg_destroy() {
    local rel=${1:+/$1} h
    local freezer=/sys/fs/cgroup/freezer/$CG_ROOT$rel
    if [[ -d $freezer ]]; then
        echo FROZEN >"$freezer/freezer.state" 2>/dev/null || true
        local deadline=$((SECONDS + 10))
        while [[ "$(cat "$freezer/freezer.state" 2>/dev/null)" == FREEZING ]] && ((SECONDS < deadline)); do
            sleep 0.1
        done
    fi
    local pid killed
    killed=$(cg_pids "$1")
    for pid in $killed; do kill -9 "$pid" 2>/dev/null || true; done
    if [[ -d $freezer ]]; then echo THAWED >"$freezer/freezer.state" 2>/dev/null || true; fi
    local deadline=$((SECONDS + 30))
    while [[ -n "$(cg_pids "$1")" ]]; do
        ((SECONDS >= deadline)) && { log "tasks still alive in /$CG_ROOT$rel: $(cg_pids "$1" | tr '\n' ' ')"; break; }
        for pid in $(cg_pids "$1"); do kill -9 "$pid" 2>/dev/null || true; done
        sleep 0.2
    done
    # A killed task leaves its cgroup before it is gone: wait until it is reaped.
    for pid in $killed; do
        while [[ -e /proc/$pid ]] && ((SECONDS < deadline)); do sleep 0.1; done
    done
    for h in $(cg_hierarchies); do
        if [[ -d $h/$CG_ROOT$rel ]]; then
            find "$h/$CG_ROOT$rel" -depth -type d -exec rmdir {} + 2>/dev/null ||
                log "could not remove cgroup $h/$CG_ROOT$rel"
        fi
    done
    return 0
}

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null && [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]; }

daemon_pid() { cat "$RUN/$1.pid" 2>/dev/null || true; }
# Running, and still ours: a pid file left by a killed cluster may name a
# process that reused the number, which would not sit in our cgroups.
daemon_running() {
    local pid
    pid=$(daemon_pid "$1")
    pid_alive "$pid" && grep -q ":pids:/$CG_ROOT/" "/proc/$pid/cgroup" 2>/dev/null
}

# start_daemon NAME CGROUP COMMAND...: run COMMAND in the background, in CGROUP,
# in its own session, logging to $LOGS/NAME.log. No-op if it already runs.
start_daemon() {
    local name=$1 cg=$2
    shift 2
    daemon_running "$name" && return 0
    cg_create "$cg"
    mkdir -p "$RUN" "$LOGS"
    local procs=() h
    for h in $(cg_hierarchies); do procs+=("$h/$CG_ROOT/$cg/cgroup.procs"); done
    # The child moves itself into the cgroup before exec, so all it forks stays there.
    setsid bash -c 'for f in "${@:2:$1}"; do echo $$ >"$f" 2>/dev/null; done; shift $(($1 + 1)); exec "$@"' \
        _ "${#procs[@]}" "${procs[@]}" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 9>&- &
    echo $! >"$RUN/$name.pid"
}

stop_daemon() {
    local name=$1 pid
    pid=$(daemon_pid "$name")
    if pid_alive "$pid"; then
        kill "$pid" 2>/dev/null || true
        local deadline=$((SECONDS + 10))
        while pid_alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
        pid_alive "$pid" && kill -9 "$pid" 2>/dev/null
    fi
    rm -f "$RUN/$name.pid"
}
