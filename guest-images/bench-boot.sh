#!/bin/bash
# Boot benchmark of the guest kernels under QEMU TCG: median time to the ready marker with our
# kernel and with Debian's stock cloud kernel, and their ratio.
#
#   guest-images/bench-boot.sh [--runs N]      (default 5 runs each; build.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --quiet --release -p guest-images --bin bench-boot -- "$@"
