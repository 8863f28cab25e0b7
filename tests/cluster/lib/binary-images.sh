# shellcheck shell=bash
# Images made of binaries on this machine (no Docker, no base image): each
# binary with the shared libraries it loads (found with ldd), and busybox-static
# as /bin/sh for debugging. hack/images.sh builds Ferrovirt's small component
# images with it. Sourced by cluster.sh after images.sh.

# copy_with_libs ROOTFS BINARY [DEST]: BINARY at DEST (default /usr/bin/NAME) in
# ROOTFS, with every shared library and the ELF interpreter it needs.
copy_with_libs() {
    local root=$1 bin=$2 dest=${3:-/usr/bin/$(basename "$2")} lib
    [[ -f $bin ]] || die "$bin does not exist"
    mkdir -p "$root$(dirname "$dest")"
    cp -L "$bin" "$root$dest"
    # ldd prints "name => /path (addr)" for libraries and "/path (addr)" for the interpreter.
    for lib in $(ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
        [[ -e "$root$lib" ]] && continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}

new_component_rootfs() {
    local root
    root=$(mktemp -d)
    mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/var/run" "$root/usr/bin"
    chmod 1777 "$root/tmp"
    cp /bin/busybox "$root/bin/busybox"
    local applet
    # nsenter and sysctl: virt-handler prepares launcher Pods' networks with them.
    for applet in sh ls cat ps mkdir rm sleep nc nsenter sysctl; do ln -sf busybox "$root/bin/$applet"; done
    echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
    echo 'qemu:x:107:107:qemu:/:/bin/false' >>"$root/etc/passwd"
    printf 'root:x:0:\nqemu:x:107:\n' >"$root/etc/group"
    echo "$root"
}

# build_binary_image REF BINARY... : an image of the given binaries (first is
# the entrypoint) with their shared libraries.
build_binary_image() {
    local ref=$1 root bin
    shift
    (($# > 0)) || die "usage: build-binary-image REF BINARY..."
    root=$(new_component_rootfs)
    for bin in "$@"; do copy_with_libs "$root" "$bin"; done
    build_image "$root" "$ref" "/usr/bin/$(basename "$1")"
    rm -rf "$root"
}
