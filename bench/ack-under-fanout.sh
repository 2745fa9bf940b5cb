#!/usr/bin/env bash
# ack-under-fanout.sh: publish acknowledgement time while fan-outs overlap. One
# serve worker holds N SSE subscribers of one channel (N ≤ 19,000: no lock, no sysctl) and
# bench publishes a SIZE-byte message every EVERY, faster than one fan-out to N sockets ends,
# so most publishes arrive while the worker is in the middle of a fan-out. Figures: bench's
# publish_ack (client side) and serve's own c1m_publish_ack / fan_out histograms (/status).
# Two servers in the same run, alternating: SERVE_A and SERVE_B (binaries; e.g. main's and
# this branch's), the same bench (C1M) for both.
# Usage: SERVE_A=/path/old SERVE_B=/path/new bench/ack-under-fanout.sh [N]   (default 18000)
# Env: EVERY (100ms), SIZE (4096), HOLD (20s), ROUNDS (2), PORT (18590).
set -euo pipefail
N=${1:-18000}
EVERY=${EVERY:-100ms}
SIZE=${SIZE:-4096}
HOLD=${HOLD:-20s}
ROUNDS=${ROUNDS:-2}
PORT=${PORT:-18590}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, OUT, c1m_binary, stop_pid, track_pid
c1m_binary
: "${SERVE_A:?SERVE_A=binary}" "${SERVE_B:?SERVE_B=binary}"
work_dir
OUTF="$OUT/ack-under-fanout-$N.txt"
echo "# ack-under-fanout: $N SSE subscribers on one worker, ${SIZE} B every $EVERY, $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUTF"
run() {
    local label=$1 bin=$2 round=$3 spid
    "$bin" serve --listen "127.0.0.1:$PORT" --workers 1 --max-conns 19500 --sse-heartbeat 0 >"$WORK/serve-$label.log" 2>&1 &
    spid=$!
    track_pid "$spid"
    wait_http "127.0.0.1:$PORT"
    timeout 120 "$C1M" bench "http://127.0.0.1:$PORT/sub/news" --proto sse --conns "$N" --rate 0 \
        --channels 1 --hold "$HOLD" --publish-every "$EVERY" --payload-size "$SIZE" --drain 5s \
        --report "$WORK/$label-$round.json" >"$WORK/$label-$round.txt" 2>&1 || true
    curl -s -m 10 "http://127.0.0.1:$PORT/status" >"$WORK/$label-$round-status.json" || true
    stop_pid "$spid"
    python3 - "$WORK/$label-$round.json" "$WORK/$label-$round-status.json" "$label" "$round" "$bin" <<'PY' | tee -a "$OUTF"
import json, sys
r = json.load(open(sys.argv[1]))
try:
    s = json.load(open(sys.argv[2]))["latency"]
except Exception:
    s = {}
a = r["latency_us"]["publish_ack"]; t = r["delivery"]["totals"]
sa, fo = s.get("publish_ack", {}), s.get("fan_out", {})
print(f"{sys.argv[3]} round {sys.argv[4]} ({sys.argv[5]}): bench publish_ack p50 {a['p50_us']/1e3:.1f} ms, "
      f"p99 {a['p99_us']/1e3:.1f} ms, max {a['max_us']/1e3:.1f} ms ({a['count']} publishes); "
      f"serve publish_ack p50 <= {sa.get('p50_le_us')} us, p99 <= {sa.get('p99_le_us')} us; "
      f"serve fan_out p50 <= {fo.get('p50_le_us')} us, p99 <= {fo.get('p99_le_us')} us ({fo.get('count')}); "
      f"online {r['result']['online_at_end']}, delivered {t['received']} of {t['expected']}, "
      f"missing {t['missing']}, duplicates {t['duplicates']}, reordered {t['reordered']}")
PY
}
for round in $(seq 1 "$ROUNDS"); do
    run A "$SERVE_A" "$round"
    run B "$SERVE_B" "$round"
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUTF"
