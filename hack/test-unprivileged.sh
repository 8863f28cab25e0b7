#!/usr/bin/env bash
# The hermetic tier as a user without privileges: every test binary `cargo test --workspace`
# builds with no feature (the unit tests of every package and the integration tests that need no
# tier feature: bootdisk's, api's own manifests, the handler's device plugins, ...), run as
# `nobody` with a HOME and TMPDIR of its own, from its package's directory as cargo runs it. Test
# targets that need a tier feature (kvm, qemu, nested, cluster, compat: see the README) are left
# out. Doc tests are not run (cargo runs them as the user who builds). Prints each binary's
# result and the total; fails if any test failed.
# Usage: hack/test-unprivileged.sh [CARGO_ARGS...]   (as root; CARGO_ARGS go to the build, e.g.
#        -p bootdisk)
set -euo pipefail
cd "$(dirname "$0")/.."
((EUID == 0)) || {
  echo "hack/test-unprivileged.sh runs as root: it drops to nobody for the tests" >&2
  exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

echo "building the test binaries (cargo test --workspace --no-run $*)"
cargo test --workspace --locked --no-run --message-format=json-render-diagnostics "$@" \
  >"$work/artifacts.json"
cargo metadata --no-deps --format-version 1 --locked >"$work/metadata.json"

# One line per test binary: the package's directory, then the executable. A test target with
# required-features is a tier of its own and is left out.
python3 - "$work/metadata.json" "$work/artifacts.json" >"$work/binaries" <<'EOF'
import json, os, sys
metadata = json.load(open(sys.argv[1]))
gated = {
    (p["manifest_path"], t["name"])
    for p in metadata["packages"]
    for t in p["targets"]
    if t.get("required-features")
}
for line in open(sys.argv[2]):
    message = json.loads(line)
    if message.get("reason") != "compiler-artifact" or not message.get("executable"):
        continue
    if not message["profile"]["test"]:
        continue
    if (message["manifest_path"], message["target"]["name"]) in gated:
        continue
    print(os.path.dirname(message["manifest_path"]), message["executable"])
EOF

home="$work/home"
mkdir -p "$home"
chown nobody "$home"
total=0 failed=0 binaries=0
while read -r dir exe; do
  binaries=$((binaries + 1))
  log="$work/$binaries.log"
  if (cd "$dir" && setpriv --reuid=nobody --regid=nogroup --clear-groups \
    env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" TMPDIR="$home" "$exe") >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=$((failed + 1))
    cat "$log"
  fi
  passed=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed.*/\1/p' "$log" | tail -1)
  total=$((total + ${passed:-0}))
  printf '%-6s %4s passed  %s\n' "$status" "${passed:-0}" "${exe##*/}"
done <"$work/binaries"

((binaries > 0)) || {
  echo "no test binaries were built" >&2
  exit 1
}
printf '\n%s tests passed in %s binaries as nobody; %s binaries failed\n' "$total" "$binaries" "$failed"
((failed == 0))
