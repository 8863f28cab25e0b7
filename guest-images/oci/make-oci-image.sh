#!/bin/bash
# Writes a single-layer OCI image as an OCI image-layout directory, without a container engine:
#
#   make-oci-image.sh LAYOUT_DIR CONTENT_DIR TAG [UID:GID]
#
# The layer holds CONTENT_DIR's entries (paths relative to it, e.g. disk/disk.img), owned by
# UID:GID (default 107:107, KubeVirt's qemu user), with mtime SOURCE_DATE_EPOCH (default 0), in
# name order, so the same content gives the same digests. LAYOUT_DIR gets oci-layout, index.json
# (the manifest tagged TAG through org.opencontainers.image.ref.name) and blobs/sha256/.
set -euo pipefail

layout=$1
content=$2
tag=$3
owner=${4:-107:107}
epoch=${SOURCE_DATE_EPOCH:-0}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

rm -rf "$layout"
mkdir -p "$layout/blobs/sha256"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Adds FILE to the blob store under its digest; prints "sha256:<hex> <size>".
add_blob() {
    local digest size
    digest=$(sha256sum "$1" | cut -d' ' -f1)
    size=$(stat -c %s "$1")
    cp "$1" "$layout/blobs/sha256/$digest"
    echo "sha256:$digest $size"
}

# The layer: a tar of the content, fixed owners, modes kept, fixed mtimes, sorted names.
(cd "$content" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort) >"$work/names"
tar -C "$content" --create --file "$work/layer.tar" --no-recursion --verbatim-files-from \
    --files-from "$work/names" --format=posix --numeric-owner --owner="${owner%%:*}" \
    --group="${owner##*:}" --mtime="@$epoch" \
    --pax-option='exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime'
diff_id=sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -6 -c "$work/layer.tar" >"$work/layer.tar.gz"
read -r layer_digest layer_size < <(add_blob "$work/layer.tar.gz")

cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","created":"$created","config":{},"rootfs":{"type":"layers","diff_ids":["$diff_id"]},"history":[{"created":"$created","created_by":"ferrovirt guest-images/oci/make-oci-image.sh"}]}
JSON
read -r config_digest config_size < <(add_blob "$work/config.json")

cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"$config_digest","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"$layer_digest","size":$layer_size}]}
JSON
read -r manifest_digest manifest_size < <(add_blob "$work/manifest.json")

cat >"$layout/index.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"$manifest_digest","size":$manifest_size,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"org.opencontainers.image.ref.name":"$tag"}}]}
JSON
echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
echo "oci: $layout ($tag) manifest $manifest_digest"
