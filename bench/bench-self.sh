#!/usr/bin/env bash
# bench-self.sh: c1m bench's own footprint and connection-open rate, on loopback only.
#
# 1. Starts holdlisten (bench/holdlisten.c: multi-process SO_REUSEPORT accept-and-hold).
# 2. c1m bench --proto connect opens and holds N connections as fast as it can (--rate 0);
#    its report gives bench's PSS growth (workers + coordinator) per held connection and the
#    open rate.
# 3. Restarts the listener and opens the same N with bench/blockconnect.c (plain blocking
#    connect() in as many processes as the fd limit needs): the floor to compare with.
# Writes bench/out/self-N.json (+ .svg) and prints a Markdown block for BENCHMARKS.md.
# Usage: bench/bench-self.sh [N]   (default 120000). Every step has a time bound.
set -euo pipefail
N=${1:-120000}
PORT=${PORT:-19190}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary
HERE=$BENCH_DIR
TMP=$(mktemp -d)
LPID=""
cleanup() {
    if [ -n "$LPID" ]; then kill -- -"$LPID" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT

c1m_binary
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

ROUNDS=${ROUNDS:-3}
# Alternate the two clients so both see the same background load (the box is shared).
for i in $(seq 1 "$ROUNDS"); do
    start_listener
    timeout 300 "$C1M" bench "tcp://127.0.0.1:$PORT" --proto connect --conns "$N" --rate 0 \
        --hold 5s --report "$TMP/bench-$i.json" --plot "$OUT/self-$N.svg" --interval 2s \
        | tee "$TMP/bench-$i.txt" || true
    stop_listener
    start_listener
    timeout 300 "$TMP/blockconnect" 127.0.0.1 "$PORT" "$N" "$CPROCS" 127.0.1.1 "$SRCS" | tee "$TMP/c-$i.txt"
    stop_listener
done
cp "$TMP/bench-$ROUNDS.json" "$OUT/self-$N.json"

python3 - "$TMP" "$ROUNDS" "$OUT/self-$N.json" <<'PY'
import json, statistics, sys
tmp, rounds, last = sys.argv[1], int(sys.argv[2]), sys.argv[3]
bench, blocking, mems = [], [], []
for i in range(1, rounds + 1):
    r = json.load(open(f"{tmp}/bench-{i}.json"))
    bench.append(r["result"]["open_rate_avg"])
    mems.append(r["memory"]["bench"]["pss_delta_bytes_per_connection"])
    c = open(f"{tmp}/c-{i}.txt").read().split()
    blocking.append(float(c[7]))
r = json.load(open(last))
res, env = r["result"], r["environment"]
lat = r["latency_us"]["connect"]
print()
print(f"### Bench footprint and open rate, {res['peak_online']:,} connections ({r['started_utc']})")
print()
print(f"- command: `{r['command']}`")
print(f"- environment: kernel {env['kernel']}, {env['cpus']} CPUs ({env.get('cpu_model')}), "
      f"{env['mem_total_bytes'] / 2**30:.1f} GiB RAM, nofile {env['nofile_soft']}/{env['nofile_hard']}, "
      f"ip_local_port_range {env['sysctls'].get('net.ipv4.ip_local_port_range')}")
print(f"- c1m bench: {r['plan']['workers']} workers, {r['plan']['source_addresses']} source addresses; "
      f"peak online {res['peak_online']:,}, errors {r['errors_total']}; user-space memory per held "
      f"connection (PSS growth of workers + coordinator / connections) per round: "
      + ", ".join(f"{m:.0f} B" for m in mems))
print(f"- open rate, {rounds} alternating rounds: c1m bench "
      + ", ".join(f"{b:,.0f}/s" for b in bench) + f" (median **{statistics.median(bench):,.0f}/s**); "
      "blocking-connect C client " + ", ".join(f"{b:,.0f}/s" for b in blocking)
      + f" (median **{statistics.median(blocking):,.0f}/s**)")
print(f"- last round's connect latency (from the scheduled start): p50 {lat['p50_us']/1000:.1f} ms, "
      f"p99 {lat['p99_us']/1000:.1f} ms, max {lat['max_us']/1000:.1f} ms")
PY
