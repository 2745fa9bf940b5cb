#!/usr/bin/env bash
# ack-control.sh: publish acknowledgements while every subscriber worker is busy.
# N SSE subscribers of one channel spread over WORKERS serve workers (many, as at 1M on a box
# whose RLIMIT_NOFILE forces ~19K connections per process), bench publishing one message every
# EVERY, each fan-out taking most of that time, so most publishes arrive while all workers are
# delivering. Modes, alternating in one run, same binary (C1M) and same bench:
#   public  - publishes on --listen, served by a subscriber worker (the layout without a control worker)
#   control - --admin-listen --admin-publish: publishes served by the control worker
#   nice    - control + `serve --worker-nice NICE` and `bench --load-nice NICE`
# Figures: bench's publish_ack (client side) and serve's own publish_ack histogram (/status).
# Usage: bench/ack-control.sh [N] [WORKERS]   (defaults 150000 53; take bench.lock above 20K)
# Env: EVERY (3s), HOLD (40s), ROUNDS (2), NICE (5), MODES ("public control nice"), PORT (18700).
set -euo pipefail
N=${1:-150000}
WORKERS=${2:-53}
EVERY=${EVERY:-3s}
HOLD=${HOLD:-40s}
ROUNDS=${ROUNDS:-2}
NICE=${NICE:-5}
MODES=${MODES:-public control nice}
PORT=${PORT:-18700}
APORT=$((PORT + 1))
source "$(dirname "$0")/lib.sh" # c1m_binary, start_serve, stop_pid, work_dir, OUT
c1m_binary
work_dir
OUTF="$OUT/ack-control-$N.txt"
echo "# ack-control: $N SSE subscribers over $WORKERS workers, a publish every $EVERY, $(date -u +%Y-%m-%dT%H:%M:%SZ), kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUTF"
run() {
    local mode=$1 round=$2 serve=() bench=() status=http://127.0.0.1:$PORT/status
    if [ "$mode" != public ]; then
        serve=(--admin-listen "127.0.0.1:$APORT" --admin-publish)
        bench=(--publish-url "http://127.0.0.1:$APORT/pub/{ch}")
        status=http://127.0.0.1:$APORT/status
    fi
    if [ "$mode" = nice ]; then
        serve+=(--worker-nice "$NICE")
        bench+=(--load-nice "$NICE")
    fi
    local tag="$mode-$round"
    start_serve "$WORK/serve-$tag.log" --listen "127.0.0.1:$PORT" --workers "$WORKERS" \
        --max-conns $((N * 2)) --sse-heartbeat 0 "${serve[@]}"
    wait_port 127.0.0.1 "$PORT"
    sleep 2
    timeout 300 "$C1M" bench "http://127.0.0.1:$PORT/sub/news" --proto sse --conns "$N" --rate 0 \
        --channels 1 --hold "$HOLD" --publish-every "$EVERY" --drain 8s "${bench[@]}" \
        --report "$WORK/$tag.json" >"$WORK/$tag.txt" 2>&1 || true
    curl -s -m 10 "$status" >"$WORK/$tag-status.json" || true
    stop_pid "$SERVE_PID"
    python3 - "$WORK/$tag.json" "$WORK/$tag-status.json" "$mode" "$round" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY' | tee -a "$OUTF"
import json, sys
r = json.load(open(sys.argv[1]))
try:
    s = json.load(open(sys.argv[2]))["latency"]
except Exception:
    s = {}
a = r["latency_us"]["publish_ack"]; d = r["latency_us"]["delivery"]; t = r["delivery"]["totals"]
sa = s.get("publish_ack", {})
print(f"{sys.argv[3]:8} round {sys.argv[4]}: bench publish_ack p50 {a['p50_us']/1e3:.1f} ms, "
      f"p99 {a['p99_us']/1e3:.1f} ms, max {a['max_us']/1e3:.1f} ms ({a['count']} publishes); "
      f"serve publish_ack mean {sa.get('mean_us', 0)/1e3:.1f} ms, p50 <= {sa.get('p50_le_us')} us, "
      f"p99 <= {sa.get('p99_le_us')} us; delivery p50 {d['p50_us']/1e3:.0f} ms p99 {d['p99_us']/1e3:.0f} ms; "
      f"online {r['result']['online_at_end']}, received {t['received']}, duplicates {t['duplicates']}, "
      f"reordered {t['reordered']}; load {sys.argv[5]}")
PY
}
for round in $(seq 1 "$ROUNDS"); do
    for mode in $MODES; do run "$mode" "$round"; done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUTF"
