#!/usr/bin/env bash
# ack-idle.sh: the box's own floor under a publish-ack target. One subscriber and a steady
# stream of publishes to its channel on an otherwise idle server, c1m serve (its default
# flags) and nginx + nchan (the peer, one worker) alternated in one run, each after a CPU-gap
# probe: a spinning process pinned to each CPU for GAP_SECS that adds up the time it did not
# run in gaps over 1 ms (the host or the kernel took the CPU; run before, not beside, the
# acks, so it takes no CPU from them). An ack p99 target at 1M means little where an idle
# server's p99 on the same box is close to it. Loopback only.
# Figures per run: bench's publish_ack p50 / p99 / p99.9 / max (client side) and the gaps.
# Usage: bench/ack-idle.sh [SECONDS]   (default 25 per run)
# Env: RATE (40 publishes/s), ROUNDS (2), GAP_SECS (5), PORT (18720), C1M (default
#      target/release/c1m).
set -euo pipefail
SECS=${1:-25}
RATE=${RATE:-40}
ROUNDS=${ROUNDS:-2}
PORT=${PORT:-18720}
GAP_SECS=${GAP_SECS:-5}
source "$(dirname "$0")/lib.sh" # OUT, work_dir, c1m_binary, track_pid, stop_pid, start_nchan, wait_http, wait_sockets_gone
c1m_binary
ensure_nchan
work_dir
gcc -O2 -Wall -o "$WORK/cpugap" "$(dirname "$0")/cpugap.c"
OUTF="$OUT/ack-idle-$(date -u +%Y%m%dT%H%MZ).txt"
echo "# ack-idle: 1 SSE subscriber, $RATE publishes/s for ${SECS}s per run, $(nproc) CPUs, $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUTF"

run() { # LABEL
    local label=$1 pid gaps=()
    if [ "$label" = c1m ]; then
        # Not lib.sh's start_serve: that one sets --worker-nice 0; the target is the defaults.
        "$C1M" serve --listen "127.0.0.1:$PORT" >"$WORK/serve.log" 2>&1 &
        pid=$!
        track_pid "$pid"
    else
        start_nchan "$WORK/nchan" "$PORT" 1
        pid=$NCHAN_PID
    fi
    wait_http "127.0.0.1:$PORT" 30
    for cpu in $(seq 0 $(($(nproc) - 1))); do
        taskset -c "$cpu" "$WORK/cpugap" "$GAP_SECS" >"$WORK/gap-$cpu.txt" &
        gaps+=($!)
    done
    wait "${gaps[@]}" || true
    timeout $((SECS + 60)) "$C1M" bench "http://127.0.0.1:$PORT/sub/ackidle" --proto sse --conns 1 \
        --channels 1 --hold "${SECS}s" --publish-rate "$RATE" --publish-url "http://127.0.0.1:$PORT/pub/{ch}" \
        --report "$WORK/$label.json" -q >"$WORK/$label.txt" 2>&1 || true
    python3 - "$WORK/$label.json" "$label" "$round" <<'PY' | tee -a "$OUTF"
import json, sys
try:
    a = json.load(open(sys.argv[1]))["latency_us"]["publish_ack"]
    print(f"round {sys.argv[3]} {sys.argv[2]}: {a['count']} acks, p50 {a['p50_us']/1e3:.2f} ms, p99 {a['p99_us']/1e3:.1f} ms, "
          f"p99.9 {a['p999_us']/1e3:.1f} ms, max {a['max_us']/1e3:.1f} ms")
except (OSError, KeyError, ValueError) as e:
    print(f"round {sys.argv[3]} {sys.argv[2]}: no acks ({e})")
PY
    for cpu in $(seq 0 $(($(nproc) - 1))); do
        echo "  cpu $cpu, ${GAP_SECS}s before: $(cat "$WORK/gap-$cpu.txt")" | tee -a "$OUTF"
    done
    stop_pid "$pid" 30
    wait_sockets_gone
}

for round in $(seq "$ROUNDS"); do
    run c1m
    run nchan
done
echo "raw: $OUTF"
