#!/usr/bin/env bash
# bench/connect-cliff.sh [PERCENT] — time each connect() while one (source, destination)
# pair fills the ephemeral port range, to find where connect() stops being cheap.
#
# Runs bench/connect-cliff.c inside a fresh network namespace (`unshare -n`, needs root): the
# namespace has its own loopback, its own sockets and its own net.ipv4.ip_local_port_range
# (the kernel default 32768-60999 there), so no host sysctl is changed and nothing is left
# behind when it exits. PERCENT (default 95) is how much of the range to fill; the run is
# bounded by alarm(300) in the program and by `timeout` here.
set -euo pipefail

PERCENT=${1:-95}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
gcc -O2 -Wall -o "$WORK/connect-cliff" "$HERE/connect-cliff.c"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) kernel $(uname -r), $(nproc) CPUs, RLIMIT_NOFILE hard $(ulimit -Hn)"
timeout 400 unshare -n sh -c "ip link set lo up && '$WORK/connect-cliff' 5000 $PERCENT"
