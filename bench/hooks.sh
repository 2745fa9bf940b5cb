#!/usr/bin/env bash
# hooks.sh: what the backend proxies cost, on loopback only.
#
#  1. Proxied subscribes per second: `c1m bench` opens N SSE subscribers as fast as it can
#     (--rate 0) against `c1m serve --proxy-connect-url` pointing at bench/proxy_backend.py
#     (answers allow at once, keep-alive), and the same without the proxy, one after the
#     other. The backend is a Python stdlib server: past a few thousand calls per second it is
#     the limit, not c1m (its CPU is printed beside the figure).
#  2. Memory per connection waiting on a slow proxy: W SSE subscribes whose connect call the
#     backend holds for SLOW seconds (proxy timeout above it, --proxy-max-in-flight above W);
#     the serve processes' PSS with them waiting, minus before, over W. A waiting connection
#     is its slot and a parked record, which for calls no proxy thread has taken yet sits in
#     the worker's 48-byte queue entry (the call's body is built when a thread takes it).
#
# Usage: bench/hooks.sh [N] [W]   (defaults 20000 and 10000)
# Env: PORT (18390), WORKERS (serve --workers, 2), SLOW (120), C1M.
# Writes bench/out/hooks-N-W.json and prints it. Every step is time-bounded.
set -euo pipefail
N=${1:-20000}
W=${2:-10000}
PORT=${PORT:-18390}
WORKERS=${WORKERS:-2}
SLOW=${SLOW:-120}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary, start_serve, …
c1m_binary
work_dir
python3 "$BENCH_DIR/proxy_backend.py" --slow "$SLOW" --lifetime 900 >"$WORK/backend.port" &
BACKEND_PID=$!
track_pid "$BACKEND_PID"
for _ in $(seq 50); do [ -s "$WORK/backend.port" ] && break; sleep 0.1; done
BPORT=$(head -1 "$WORK/backend.port")
MAXFD=$(ulimit -Hn)

subscribe_rate() { # LABEL SERVE-ARGS… → bench report in $WORK/LABEL.json
    local label=$1
    shift
    start_serve "$WORK/serve-$label.log" --listen "127.0.0.1:$PORT" --workers "$WORKERS" \
        --max-conns $((N * 2)) "$@"
    wait_http "127.0.0.1:$PORT" 20
    local t0
    t0=$(cpu_ticks "$BACKEND_PID")
    timeout 300 "$C1M" bench "http://127.0.0.1:$PORT/sub/room" --proto sse --conns "$N" \
        --rate 0 --hold 2s --connect-timeout 30s --duration 200s \
        --report "$WORK/$label.json" >"$WORK/bench-$label.txt" 2>&1 || true
    echo $(( $(cpu_ticks "$BACKEND_PID") - t0 )) >"$WORK/$label.backend_ticks"
    stop_pid "$SERVE_PID" 15
}
subscribe_rate plain
subscribe_rate proxied --proxy-connect-url "http://127.0.0.1:$BPORT/connect"

# Waiting connections.
start_serve "$WORK/serve-wait.log" --listen "127.0.0.1:$PORT" --workers "$WORKERS" \
    --max-conns $((W * 2)) --proxy-connect-url "http://127.0.0.1:$BPORT/slow" \
    --proxy-timeout "$((SLOW + 60))s" --proxy-max-in-flight "$W"
wait_http "127.0.0.1:$PORT" 20
sleep 3
P0=$(tree_pss "$SERVE_PID")
timeout $((SLOW + 120)) "$C1M" bench "http://127.0.0.1:$PORT/sub/room" --proto sse --conns "$W" \
    --rate 5000 --max-inflight "$W" --hold 1s --connect-timeout "$((SLOW + 30))s" \
    --duration "$((SLOW + 60))s" \
    --report "$WORK/wait.json" >"$WORK/bench-wait.txt" 2>&1 &
WAIT_BENCH=$!
track_pid "$WAIT_BENCH"
# Until every connection is accepted and parked (the workers' connection counts), bounded.
held=0
for _ in $(seq 120); do
    held=$(timeout 5 curl -s "http://127.0.0.1:$PORT/status" | python3 -c \
        'import json,sys; c=json.load(sys.stdin)["connections"]; print(c["sse"])' 2>/dev/null || echo 0)
    [ "$held" -ge "$W" ] && break
    sleep 0.5
done
sleep 3
P1=$(tree_pss "$SERVE_PID")
STATUS=$(timeout 5 curl -s "http://127.0.0.1:$PORT/status" || echo '{}')
stop_pid "$WAIT_BENCH" 5
stop_pid "$SERVE_PID" 15

python3 - "$WORK" "$N" "$W" "$P0" "$P1" "$held" "$STATUS" "$(getconf CLK_TCK)" "$WORKERS" \
    >"$OUT/hooks-$N-$W.json" <<'PY'
import json, sys
work, n, w, p0, p1, held = sys.argv[1], *(int(x) for x in sys.argv[2:7])
status, tck, workers = json.loads(sys.argv[7] or "{}"), int(sys.argv[8]), sys.argv[9]
def rate(label):
    r = json.load(open(f"{work}/{label}.json"))
    ticks = int(open(f"{work}/{label}.backend_ticks").read())
    res = r["result"]
    return {"connected": res["connected"], "ramp_s": res["ramp_s"],
            "subscribes_per_s": res["connected"] / res["ramp_s"] if res["ramp_s"] else None,
            "connect_p50_us": r["latency_us"]["connect"]["p50_us"],
            "connect_p99_us": r["latency_us"]["connect"].get("p99_us"),
            "backend_cpu_s": ticks / tck}
print(json.dumps({
    "workers": workers,
    "plain": rate("plain"), "proxied": rate("proxied"),
    "waiting": {"target": w, "held_sse_at_sample": held,
                "proxy_in_flight_at_sample": status.get("proxy", {}).get("in_flight"),
                "pss_before": p0, "pss_waiting": p1,
                "pss_bytes_per_waiting_conn": (p1 - p0) / held if held else None},
    "load1": open("/proc/loadavg").read().split()[0],
}, indent=1))
PY
cat "$OUT/hooks-$N-$W.json"
