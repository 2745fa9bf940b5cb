#!/usr/bin/env bash
# tcache-ab.sh: does switching glibc's tcache off in serve's workers (serve's default, for
# memory) cost subscribe speed? One binary, the workers' tcache off as shipped
# and back on through the operator override GLIBC_TUNABLES=glibc.malloc.tcache_count=7,
# alternated ROUNDS times: N SSE subscribers at bench --rate 0 against --workers W, loopback.
# Per run: bench's ramp rate and serve's CPU (utime + stime of master and workers across the
# ramp) per subscribe. Every step is time-bounded.
#
# Usage: bench/tcache-ab.sh [N]   (default 100000)
# Env: ROUNDS (4), WORKERS (6), PORT (18680), C1M (binary; default: cargo build --release).
# Writes bench/out/tcache-ab-N.txt.
set -euo pipefail
N=${1:-100000}
ROUNDS=${ROUNDS:-4}
WORKERS=${WORKERS:-6}
PORT=${PORT:-18680}
source "$(dirname "$0")/lib.sh" # OUT, c1m_binary, stop_pid, wait_port, on_exit
c1m_binary
TMP=$(mktemp -d)
PID=""
on_exit 'stop_pid "$PID" 10; rm -rf "$TMP"'
cp "$C1M" "$TMP/c1m-bench" # bench from its own copy: no shared text pages with serve
cpu_ticks() { # utime + stime of PID and its children, in clock ticks
    local t=0 p
    for p in "$1" $(cat "/proc/$1/task/$1/children"); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$t"
}
HZ=$(getconf CLK_TCK)
{
    echo "# tcache-ab N=$N rounds=$ROUNDS workers=$WORKERS $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
    for i in $(seq 1 "$ROUNDS"); do
        for mode in off on; do
            tunables=()
            [ "$mode" = on ] && tunables=(GLIBC_TUNABLES=glibc.malloc.tcache_count=7)
            env "${tunables[@]}" "$C1M" serve --listen "127.0.0.1:$PORT" --workers "$WORKERS" \
                --max-conns $((N * 13 / 10)) >"$TMP/serve.log" 2>&1 &
            PID=$!
            wait_port 127.0.0.1 "$PORT" 30
            sleep 2
            c0=$(cpu_ticks "$PID")
            timeout 300 "$TMP/c1m-bench" bench "http://127.0.0.1:$PORT/sub/ab" --proto sse \
                --conns "$N" --rate 0 --hold 1s --report "$TMP/$mode-$i.json" >/dev/null 2>&1 || true
            c1=$(cpu_ticks "$PID")
            python3 - "$TMP/$mode-$i.json" "$mode" "$i" "$c0" "$c1" "$HZ" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
c0, c1, hz = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
online = r["online_at_end"] or 1
print(f"tcache {sys.argv[2]} round {sys.argv[3]}: ramp {r['open_rate_avg'] or 0:,.0f}/s, "
      f"online {online:,}, serve CPU {(c1 - c0) / hz * 1e6 / online:.1f} us per subscribe")
PY
            stop_pid "$PID" 10
            PID=""
            sleep 2
        done
    done
} | tee "$OUT/tcache-ab-$N.txt"
