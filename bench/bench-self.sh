#!/usr/bin/env bash
# bench-self.sh: c1m bench's own footprint and connection-open rate, on loopback only.
#
# 1. Starts holdlisten (bench/holdlisten.c: multi-process SO_REUSEPORT accept-and-hold).
# 2. c1m bench --proto connect opens and holds N connections as fast as it can (--rate 0);
#    its report gives the workers' PSS growth per held connection and the open rate.
# 3. Restarts the listener and opens the same N with bench/blockconnect.c (plain blocking
#    connect() in as many processes as the fd limit needs): the floor to compare with.
# Writes bench/out/self-N.json (+ .svg) and prints a Markdown block for BENCHMARKS.md.
# Usage: bench/bench-self.sh [N]   (default 120000). Every step has a time bound.
set -euo pipefail
N=${1:-120000}
PORT=${PORT:-19190}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
OUT="$HERE/out"
mkdir -p "$OUT"
TMP=$(mktemp -d)
LPID=""
cleanup() {
    if [ -n "$LPID" ]; then kill -- -"$LPID" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT

C1M=${C1M:-}
if [ -z "$C1M" ]; then
    (cd "$ROOT" && timeout 900 cargo build --release -q -p c1m)
    C1M="$ROOT/target/release/c1m"
fi
gcc -O2 -Wall -o "$TMP/holdlisten" "$HERE/holdlisten.c"
gcc -O2 -Wall -o "$TMP/blockconnect" "$HERE/blockconnect.c"

HARD=$(ulimit -Hn)
PER=$((HARD - 100))
LPROCS=$(( (N + 14999) / 15000 + 2 ))   # SO_REUSEPORT spreads unevenly: keep headroom
CPROCS=$(( (N + PER - 1) / PER ))
SRCS=$(( (N + 11999) / 12000 ))        # same per-pair load as c1m bench's default

start_listener() {
    setsid "$TMP/holdlisten" 127.0.0.1 "$PORT" "$LPROCS" &
    LPID=$!
    sleep 1
}
stop_listener() {
    kill -- -"$LPID" 2>/dev/null || true
    wait "$LPID" 2>/dev/null || true
    LPID=""
    sleep 2
}

start_listener
timeout 300 "$C1M" bench "tcp://127.0.0.1:$PORT" --proto connect --conns "$N" --rate 0 \
    --hold 5s --report "$OUT/self-$N.json" --plot "$OUT/self-$N.svg" --interval 2s \
    | tee "$TMP/bench.txt" || true
stop_listener

start_listener
timeout 300 "$TMP/blockconnect" 127.0.0.1 "$PORT" "$N" "$CPROCS" 127.0.1.1 "$SRCS" | tee "$TMP/c.txt"
stop_listener

python3 - "$OUT/self-$N.json" "$TMP/c.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = open(sys.argv[2]).read().split()
res, mem, env = r["result"], r["memory"]["bench"], r["environment"]
print()
print(f"### Bench footprint and open rate, {res['peak_online']:,} connections ({r['started_utc']})")
print()
print(f"- command: `{r['command']}`")
print(f"- environment: kernel {env['kernel']}, {env['cpus']} CPUs ({env.get('cpu_model')}), "
      f"{env['mem_total_bytes'] / 2**30:.1f} GiB RAM, nofile {env['nofile_soft']}/{env['nofile_hard']}, "
      f"ip_local_port_range {env['sysctls'].get('net.ipv4.ip_local_port_range')}")
print(f"- c1m bench: {r['plan']['workers']} workers, {r['plan']['source_addresses']} source addresses; "
      f"peak online {res['peak_online']:,}, errors {r['errors_total']}; "
      f"**{mem['pss_delta_bytes_per_connection']:.0f} B of user-space memory (PSS growth) per held connection**")
lat = r["latency_us"]["connect"]
print(f"- open rate: c1m bench **{res['open_rate_avg']:,.0f}/s** (ramp {res['ramp_s']:.2f}s; connect p50 "
      f"{lat['p50_us']/1000:.1f} ms, p99 {lat['p99_us']/1000:.1f} ms, measured from the scheduled start) vs "
      f"blocking-connect C client **{float(c[7]):,.0f}/s** ({int(c[1]):,} opened, {int(c[3])} failed, {float(c[5]):.2f}s)")
PY
