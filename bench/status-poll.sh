#!/usr/bin/env bash
# status-poll.sh: does polling /status and /metrics slow publishing down? Publish p50/p99 with
# no pollers, then with POLLERS clients each asking /status (and /metrics, alternately) at
# 10/s, against c1m serve holding N idle SSE subscribers (their memory is what /status
# reports, and what made a per-request smaps read cost the master ~4 ms). Loopback only.
# The master's history is filled first (HISTORY_MB of 64 KiB messages, default 128 = the default
# --history-max-bytes), as on a box that has been serving for a while: the master's size is what
# makes reading its memory figures expensive.
# Usage: bench/status-poll.sh [N]   (default 10000). Env: POLLERS (16), SECONDS_EACH (10),
# PUB_RATE (50/s), HISTORY_MB (128), PORT (18280), C1M (binary; default: build
# target/release/c1m).
# Prints one line per phase and the difference of the p50s.
set -euo pipefail
N=${1:-10000}
POLLERS=${POLLERS:-16}
SECONDS_EACH=${SECONDS_EACH:-10}
PUB_RATE=${PUB_RATE:-50}
HISTORY_MB=${HISTORY_MB:-128}
PORT=${PORT:-18280}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
SPID="" BPID="" PPID_POLL=""
cleanup() {
    for p in $PPID_POLL $BPID $SPID; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT

C1M=${C1M:-}
if [ -z "$C1M" ]; then
    (cd "$ROOT" && timeout 900 cargo build --release -q -p c1m)
    C1M="$ROOT/target/release/c1m"
fi
"$C1M" serve --listen "127.0.0.1:$PORT" --workers 2 --max-conns $((N * 2 + 1000)) \
    >/dev/null 2>&1 &
SPID=$!
for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
    sleep 0.1
done
# Idle subscribers on a channel nobody publishes to: publishes below measure the master alone.
HOLD=$((SECONDS_EACH * 2 + 60))
timeout $((HOLD + 120)) "$C1M" bench "http://127.0.0.1:$PORT/sub/idle" --conns "$N" \
    --rate 20000 --hold "${HOLD}s" >/dev/null 2>&1 &
BPID=$!
python3 - "$PORT" "$N" <<'PY'
import http.client, json, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
deadline = time.time() + 120
while time.time() < deadline:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/status")
        sse = json.loads(c.getresponse().read())["connections"]["sse"]
    except (OSError, http.client.HTTPException):
        sse = 0  # still starting
    if sse >= n:
        break
    time.sleep(0.5)
else:
    sys.exit(f"only {sse} of {n} subscribers connected")
PY

# Fill the history: 16 messages of 64 KiB per MiB, over channels of 100 (the default history).
python3 - "$PORT" "$HISTORY_MB" <<'PY'
import http.client, sys
port, mb = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
payload = b"h" * (64 * 1024 - 64)
for i in range(mb * 16):
    c.request("POST", f"/pub/history-{i // 100}", body=payload)
    r = c.getresponse(); r.read()
    if r.status != 200:
        sys.exit(f"history fill: publish answered {r.status}")
PY

# POLLERS keep-alive clients at 10 requests/s each, in one process (threads mostly sleep).
poll() {
    exec python3 - "$PORT" "$POLLERS" <<'PY'
import http.client, sys, threading, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def poller(i):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    path = ["/status", "/metrics"]
    k, nxt = i, time.monotonic() + i * 0.1 / n
    while True:
        time.sleep(max(0.0, nxt - time.monotonic()))
        nxt += 0.1
        c.request("GET", path[k % 2]); c.getresponse().read(); k += 1
for i in range(n):
    threading.Thread(target=poller, args=(i,), daemon=True).start()
while True:
    time.sleep(3600)
PY
}

# Publish latency over one keep-alive connection at PUB_RATE/s; prints "p50_ms p99_ms count".
measure() {
    python3 - "$PORT" "$SECONDS_EACH" "$PUB_RATE" <<'PY'
import http.client, sys, time
port, secs, rate = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
lat, nxt, end = [], time.monotonic(), time.monotonic() + secs
while time.monotonic() < end:
    time.sleep(max(0.0, nxt - time.monotonic()))
    nxt += 1 / rate
    t = time.perf_counter()
    c.request("POST", "/pub/bench-status-poll", body=b"x")
    r = c.getresponse(); r.read()
    if r.status != 200:
        sys.exit(f"publish answered {r.status}")
    lat.append((time.perf_counter() - t) * 1000)
lat.sort()
print(f"{lat[len(lat) // 2]:.3f} {lat[int(len(lat) * 0.99)]:.3f} {len(lat)}")
PY
}

read -r P50_QUIET P99_QUIET COUNT_QUIET < <(measure)
poll &
PPID_POLL=$!
sleep 1
read -r P50_POLLED P99_POLLED COUNT_POLLED < <(measure)
echo "subscribers $N, history ${HISTORY_MB} MiB, publishes at ${PUB_RATE}/s for ${SECONDS_EACH}s per phase"
echo "without pollers:        publish p50 ${P50_QUIET} ms  p99 ${P99_QUIET} ms  (${COUNT_QUIET} publishes)"
echo "with $POLLERS pollers at 10/s: publish p50 ${P50_POLLED} ms  p99 ${P99_POLLED} ms  (${COUNT_POLLED} publishes)"
python3 -c "q, p = $P50_QUIET, $P50_POLLED; print(f'p50 difference: {(p - q) / q * 100:+.1f} %')"
