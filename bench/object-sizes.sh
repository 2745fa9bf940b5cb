#!/usr/bin/env bash
# bench/object-sizes.sh [N] — per-object kernel memory on this kernel (bench/object-sizes.py)
# inside a throwaway network namespace; needs root. Nothing on the host is changed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) kernel $(uname -r), $(nproc) CPUs, $(grep MemTotal /proc/meminfo | tr -s ' ')"
timeout 300 unshare -n sh -c "ip link set lo up && python3 '$HERE/object-sizes.py' ${1:-8000}"
