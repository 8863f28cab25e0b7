#!/usr/bin/env bash
# Runs shellcheck (warnings and errors) on every shell script of the repository: the *.sh files
# (sourced libraries included) and every tracked file whose first line runs sh or bash.
# Usage: hack/shellcheck.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v shellcheck >/dev/null || {
  echo "shellcheck is missing: hack/install-deps.sh installs it (Debian package shellcheck)" >&2
  exit 1
}
mapfile -t scripts < <(
  {
    git ls-files '*.sh'
    git ls-files | while read -r f; do
      [[ -f $f && $f != *.sh ]] && head -n 1 "$f" | grep -qE '^#!(/usr/bin/env |/bin/)(ba)?sh' && echo "$f"
    done
  } | sort -u
)
echo "shellcheck: ${#scripts[@]} scripts"
shellcheck -S warning -x "${scripts[@]}"
