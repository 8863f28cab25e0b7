# shellcheck shell=bash
# Images without Docker: crane pushes OCI image layouts and builds images from
# layer tarballs into the local registry. Sourced by cluster.sh.
#
# Every image reference maps to one repository of the local registry,
# whatever registry it names, the way containerd's mirror config resolves it:
#   quay.io/kubevirt/virt-api:v1      -> kubevirt/virt-api:v1
#   registry:5000/kubevirt/x:devel    -> kubevirt/x:devel
#   busybox (docker.io/library/...)   -> library/busybox:latest
#   registry.k8s.io/pause:3.10        -> pause:3.10

PUSH_REGISTRY=127.0.0.1:$REGISTRY_PORT

# FERROVIRT_IMAGE_PUSH=named: build-image, build-binary-image and push-image push to the
# registry REF names, with the credentials of ~/.docker/config.json and verified TLS (plain
# HTTP only for localhost and 127.0.0.1): what hack/images.sh --registry uses for someone
# else's cluster. Otherwise every REF goes to the local registry.
push_named() { [[ ${FERROVIRT_IMAGE_PUSH:-} == named ]]; }

crane_() {
    if push_named; then "$TOOLS_BIN/crane" "$@"; else "$TOOLS_BIN/crane" --insecure "$@"; fi
}

# local_ref REF: the reference of REF's image in the local registry (REF itself with
# FERROVIRT_IMAGE_PUSH=named).
local_ref() {
    local ref=$1 first rest
    push_named && { echo "$ref"; return; }
    first=${ref%%/*}
    if [[ $ref == */* && ($first == *.* || $first == *:* || $first == localhost || $first == registry) ]]; then
        rest=${ref#*/}
    else
        # No registry named: Docker Hub, where one-word names live under library/.
        [[ $ref == */* ]] && rest=$ref || rest=library/$ref
    fi
    [[ $rest == *:* || $rest == *@* ]] || rest=$rest:latest
    echo "$PUSH_REGISTRY/$rest"
}

registry_has() { crane_ digest "$(local_ref "$1")" >/dev/null 2>&1; }

# push_image DIR REF: push an OCI image layout (a single image or an index).
push_image() {
    local dir=$1 ref=$2 target
    [[ -f "$dir/index.json" && -f "$dir/oci-layout" ]] || die "$dir is not an OCI image layout (no index.json/oci-layout)"
    target=$(local_ref "$ref")
    # A layout whose index holds several manifests is pushed as an index; one
    # with a single image is pushed as that image, so the tag names its manifest.
    local manifests out
    manifests=$(grep -o '"digest"' "$dir/index.json" | wc -l)
    local args=()
    ((manifests > 1)) && args+=(--index)
    out=$(crane_ push "${args[@]}" "$dir" "$target" 2>&1) || { echo "$out" >&2; die "could not push $dir to $target"; }
    log "pushed $dir as $ref ($target)"
}

# build_image ROOTFS REF [ENTRYPOINT [CMD...]]: one-layer image of ROOTFS's
# contents (owned by root), pushed to the local registry as REF.
build_image() {
    local rootfs=$1 ref=$2 entrypoint=${3:-} target layer
    shift 2 && shift $(($# > 0 ? 1 : 0))
    [[ -d $rootfs ]] || die "$rootfs is not a directory"
    target=$(local_ref "$ref")
    layer=$(mktemp --suffix=.tar)
    tar -C "$rootfs" --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -cf "$layer" . ||
        die "could not pack $rootfs"
    local mutate=(--set-platform linux/amd64 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
    [[ -n $entrypoint ]] && mutate+=(--entrypoint "$entrypoint")
    if (($# > 0)); then
        local IFS=,
        mutate+=(--cmd "$*")
    fi
    local out
    if ! out=$(crane_ append --oci-empty-base --platform linux/amd64 -f "$layer" -t "$target" 2>&1 &&
        crane_ mutate "${mutate[@]}" -t "$target" "$target" 2>&1); then
        rm -f "$layer"
        echo "$out" >&2
        die "could not build $ref from $rootfs"
    fi
    rm -f "$layer"
    log "built $rootfs as $ref ($target)"
}

# The sandbox image: the static pause program from images/pause.c.
ensure_pause_image() {
    registry_has "$PAUSE_IMAGE" && return 0
    local root
    root=$(mktemp -d)
    gcc -static -Os -s -o "$root/pause" "$HERE/images/pause.c" || die "could not compile pause.c"
    build_image "$root" "$PAUSE_IMAGE" /pause
    rm -rf "$root"
}

# The test image: Debian's busybox-static with all its applets linked.
BUSYBOX_IMAGE=docker.io/library/busybox:latest
ensure_busybox_image() {
    registry_has "$BUSYBOX_IMAGE" && return 0
    local root applet
    root=$(mktemp -d)
    mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/proc" "$root/sys" "$root/dev" "$root/root"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $("$root/bin/busybox" --list); do
        [[ $applet == busybox ]] || ln -sf busybox "$root/bin/$applet"
    done
    echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
    echo 'root:x:0:' >"$root/etc/group"
    chmod 1777 "$root/tmp"
    build_image "$root" "$BUSYBOX_IMAGE" "" /bin/sh
    rm -rf "$root"
}

# KubeVirt's functional suite runs `pkill` in privileged Pods (hostPID) of its utility image
# vm-killer (registry:5000/kubevirt/vm-killer, the prefix tests/kubevirt-suite/run.sh gives it).
# Debian's busybox has no pkill: the image is busybox with images/pkill.sh as /usr/bin/pkill
# (the -SIGNAL, -f and pattern forms the suite uses).
VM_KILLER_IMAGE=registry:5000/kubevirt/vm-killer:pkill-1
ensure_vm_killer_image() {
    local root applet
    if ! registry_has "$VM_KILLER_IMAGE"; then
        root=$(mktemp -d)
        mkdir -p "$root/bin" "$root/usr/bin" "$root/tmp" "$root/proc" "$root/sys" "$root/dev"
        cp /bin/busybox "$root/bin/busybox"
        for applet in $("$root/bin/busybox" --list); do
            [[ $applet == busybox ]] || ln -sf busybox "$root/bin/$applet"
        done
        install -m 0755 "$HERE/images/pkill.sh" "$root/usr/bin/pkill"
        build_image "$root" "$VM_KILLER_IMAGE" "" /bin/sh
        rm -rf "$root"
    fi
    crane_ tag "$(local_ref "$VM_KILLER_IMAGE")" latest >/dev/null ||
        die "could not tag $VM_KILLER_IMAGE as latest"
}

# The guest images that guest-images/build.sh leaves in its cache: the stand-ins under the
# names KubeVirt's example manifests and suite use, the tiny guest under its own name.
GUEST_IMAGES_DIR=${FERROVIRT_GUEST_IMAGES_CACHE:-$CACHE_DIR/guest-images}/current
GUEST_IMAGE_REFS=(
    "oci/containerdisk registry:5000/ferrovirt/tiny-container-disk:latest"
    "oci/containerdisk registry:5000/ferrovirt/tiny-container-disk:devel"
    "oci/kernel-boot quay.io/kubevirt/ferrovirt-kernel-boot:latest"
    "oci/cirros-containerdisk quay.io/kubevirt/cirros-container-disk-demo:latest"
    "oci/cirros-containerdisk quay.io/kubevirt/cirros-container-disk-demo:devel"
    "oci/alpine-containerdisk quay.io/kubevirt/alpine-container-disk-demo:latest"
    "oci/fedora-containerdisk quay.io/kubevirt/fedora-with-test-tooling-container-disk:latest"
    "oci/fedora-containerdisk quay.io/kubevirt/fedora-with-test-tooling-container-disk:devel"
    "oci/alpine-test-tooling-containerdisk quay.io/kubevirt/alpine-with-test-tooling-container-disk:latest"
    "oci/alpine-test-tooling-containerdisk quay.io/kubevirt/alpine-with-test-tooling-container-disk:devel"
)

# layout_digest DIR: the digest of the first manifest of an OCI layout's index.
layout_digest() { grep -o '"digest":"sha256:[0-9a-f]*"' "$1/index.json" | head -n 1 | cut -d'"' -f4; }

# push_guest_images [--required]: push what guest-images/build.sh built, when
# the registry does not have that exact image yet.
push_guest_images() {
    local required=${1:-} entry dir ref have
    if [[ ! -e "$GUEST_IMAGES_DIR/.complete" ]]; then
        [[ $required == --required ]] && die "no guest images in $GUEST_IMAGES_DIR: run guest-images/build.sh"
        log "no guest images in $GUEST_IMAGES_DIR yet (guest-images/build.sh makes them); not pushed"
        return 0
    fi
    for entry in "${GUEST_IMAGE_REFS[@]}"; do
        dir=$GUEST_IMAGES_DIR/${entry%% *}
        ref=${entry#* }
        [[ -f $dir/index.json ]] || { log "missing $dir; not pushed"; continue; }
        have=$(crane_ digest "$(local_ref "$ref")" 2>/dev/null || true)
        [[ -n $have && $have == "$(layout_digest "$dir")" ]] && continue
        push_image "$dir" "$ref"
        # (An `if`: a `[[ ]] &&` as the loop's last command would fail the function on a
        # fresh registry, where no tag had an image before.)
        if [[ -n $have ]]; then forget_node_images "$ref"; fi
    done
    push_cirros_custom_image
}

# KubeVirt's cirros-custom-container-disk-demo: CirrOS with its disk at /custom-disk/downloaded
# instead of under /disk/ (its suite boots it with `containerDisk.path`): the cirros stand-in's
# disk there, tagged by the disk's digest, and `latest` and `devel`.
CIRROS_CUSTOM_REF=quay.io/kubevirt/cirros-custom-container-disk-demo
push_cirros_custom_image() {
    local disk=$GUEST_IMAGES_DIR/standins/cirros/disk.qcow2 key root tag
    [[ -f $disk ]] || { log "missing $disk; $CIRROS_CUSTOM_REF not pushed"; return 0; }
    key=$(sha256sum "$disk" | cut -c1-16)
    if ! registry_has "$CIRROS_CUSTOM_REF:$key"; then
        root=$(mktemp -d)
        mkdir -p "$root/custom-disk"
        cp "$disk" "$root/custom-disk/downloaded"
        chmod 0755 "$root/custom-disk" && chmod 0644 "$root/custom-disk/downloaded"
        build_image "$root" "$CIRROS_CUSTOM_REF:$key"
        rm -rf "$root"
    fi
    for tag in latest devel; do
        crane_ tag "$(local_ref "$CIRROS_CUSTOM_REF:$key")" "$tag" >/dev/null ||
            die "could not tag $CIRROS_CUSTOM_REF:$key as $tag"
    done
}

# forget_node_images REF: a tag the registry now gives another image is forgotten by the
# nodes' containerd, under every registry name it was pulled by, so that Pods that pull it
# IfNotPresent (containerDisks tagged other than latest) get the new image.
forget_node_images() {
    local want node name
    want=$(local_ref "$1")
    for node in $(node_names); do
        load_node "$node"
        if ((NODE_KVM)); then
            log "node $node is a KVM node: it keeps the copy of $1 it may have pulled"
            continue
        fi
        holder_running "$node" || continue
        { in_node "$node" ctr -n k8s.io images ls -q 2>/dev/null || true; } | while read -r name; do
            [[ $(local_ref "$name") == "$want" ]] || continue
            if in_node "$node" ctr -n k8s.io images rm "$name" </dev/null >/dev/null; then
                log "node $node forgot $name (the registry has a new $1)"
            else
                log "node $node could not forget $name: its Pods may still run the old $1"
            fi
        done
    done
    return 0
}

# The Debian 12 cloud image that guest-images/debian-cloud/build.sh leaves in its cache, as a
# containerDisk (/disk/disk.img, KubeVirt's layout), tagged by its build key and `latest`.
DEBIAN_IMAGE_DIR=${FERROVIRT_GUEST_IMAGES_CACHE:-$CACHE_DIR/guest-images}/debian-cloud/current
DEBIAN_IMAGE_REF=registry:5000/ferrovirt/debian-cloud-container-disk

# push_debian_image: push it when the registry does not have this build yet (not built: said).
push_debian_image() {
    local key root
    if [[ ! -f $DEBIAN_IMAGE_DIR/disk.img ]]; then
        log "no Debian cloud image in $DEBIAN_IMAGE_DIR (guest-images/debian-cloud/build.sh makes it); not pushed"
        return 0
    fi
    key=$(sed -n 's/^key=//p' "$DEBIAN_IMAGE_DIR/info.txt")
    [[ -n $key ]] || die "$DEBIAN_IMAGE_DIR/info.txt names no key"
    if registry_has "$DEBIAN_IMAGE_REF:$key"; then
        crane_ tag "$(local_ref "$DEBIAN_IMAGE_REF:$key")" latest >/dev/null ||
            die "could not tag $DEBIAN_IMAGE_REF:$key as latest"
        return 0
    fi
    root=$(mktemp -d)
    mkdir -p "$root/disk"
    cp --sparse=always "$DEBIAN_IMAGE_DIR/disk.img" "$root/disk/disk.img"
    chmod 0755 "$root/disk" && chmod 0644 "$root/disk/disk.img"
    build_image "$root" "$DEBIAN_IMAGE_REF:$key"
    rm -rf "$root"
    crane_ tag "$(local_ref "$DEBIAN_IMAGE_REF:$key")" latest >/dev/null ||
        die "could not tag $DEBIAN_IMAGE_REF:$key as latest"
}

