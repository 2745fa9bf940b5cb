#!/usr/bin/env bash
# publish-cost-ab.sh: what one published message costs the server, two builds alternated in one
# run: CH channels with N/CH SSE subscribers each, PUBLISHERS keep-alive publishers as fast as
# acks come (`c1m bench --scenario channels`); over a 10 s window in the middle of the publish
# phase, per delivered message: the server tree's CPU time (utime + stime), its system calls
# and its context switches (`perf stat -e raw_syscalls:sys_enter,context-switches` on the
# master and workers; the tracepoint adds a little to the CPU figure of both builds alike).
# Counts of system calls do not depend on how busy the box is; CPU time does, so compare the
# two builds within one run only. PERF=1 also profiles the server tree over the same window
# (`perf record -g -F 999`) and draws a flame graph per run: where a message's cost goes, e.g.
# rooms (N=200000 CH=10000 WORKERS=16: 20 subscribers per channel) against one subscriber per
# channel. Loopback only; every process is stopped at exit.
#
# Usage: SERVE_A=old-binary SERVE_B=new-binary bench/publish-cost-ab.sh
# Env: N (20000 subscribers), CH (20000 channels), PUBLISHERS (4), WORKERS (2; each holds at
#      most ~19,900 under a 20,000 fd limit), ROUNDS (3), RATE (10000 subscribes/s: the window
#      opens 6 s after the ramp's N / RATE seconds), BATCH (unset: one message per request; N:
#      bench --publish-batch N), NICE (-5: serve and bench, so builds on a shared box yield to
#      them), PERF (0), TAG (names the outputs), PORT (18620), C1M (bench's binary).
# Writes bench/out/publish-cost-ab$TAG.txt, and with PERF=1
# bench/out/publish-cost$TAG-r{round}{A,B}.svg and .collapsed.txt.
set -euo pipefail
N=${N:-20000}
CH=${CH:-20000}
PUBLISHERS=${PUBLISHERS:-4}
WORKERS=${WORKERS:-2}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-10000}
NICE=${NICE:--5}
PERF=${PERF:-0}
TAG=${TAG:-}
PORT=${PORT:-18620}
: "${SERVE_A:?SERVE_A=binary}" "${SERVE_B:?SERVE_B=binary}"
source "$(dirname "$0")/lib.sh"
c1m_binary
TMP=$(mktemp -d)
on_exit "rm -rf '$TMP'"
REPORT="$OUT/publish-cost-ab$TAG.txt"
{
    echo "# publish-cost-ab $(date -u +%Y-%m-%dT%H:%M:%SZ), kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# A=$SERVE_A B=$SERVE_B; $N subscribers over $CH channels, $PUBLISHERS publishers, $WORKERS workers${BATCH:+, batch $BATCH}"
} | tee "$REPORT"
run=0
for round in $(seq "$ROUNDS"); do
    for side in A B; do
        run=$((run + 1))
        if [ "$side" = A ]; then SERVE_C1M=$SERVE_A; else SERVE_C1M=$SERVE_B; fi
        export SERVE_C1M
        start_serve "$TMP/serve.log" --listen "127.0.0.1:$PORT" --max-conns $((N * 3)) --workers "$WORKERS"
        # shellcheck disable=SC2046 # one pid per word
        renice -n "$NICE" -p "$SERVE_PID" $(pgrep -P "$SERVE_PID") >/dev/null
        wait_http "127.0.0.1:$PORT" 20
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086 # BATCH's flags are words
        nice -n "$NICE" "$C1M" bench "http://127.0.0.1:$PORT/sub/{ch}" --scenario channels --channels "$CH" \
            --conns "$N" --rate "$RATE" --hold 30s --publishers "$PUBLISHERS" ${BATCH:+--publish-batch $BATCH} \
            --source "127.35.$run.2-127.35.$run.11" --interval 1s --report "$TMP/run.json" >"$TMP/run.txt" 2>&1 &
        bench_pid=$!
        sleep $((N / RATE + 6)) # the ramp is over and publishing runs
        pids=$(echo "$SERVE_PID" $(pgrep -P "$SERVE_PID") | tr ' ' ,)
        perf_pid=""
        if [ "$PERF" = 1 ]; then
            perf record -q -g -F 999 -p "$pids" -o "$TMP/perf.data" -- sleep 10 >/dev/null 2>&1 &
            perf_pid=$!
        fi
        c0=$(tree_cpu_ticks "$SERVE_PID")
        w0=$(date +%s.%N)
        perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$pids" -- sleep 10 2>"$TMP/perf.csv"
        c1=$(tree_cpu_ticks "$SERVE_PID")
        w1=$(date +%s.%N)
        if [ -n "$perf_pid" ]; then
            wait "$perf_pid" || true
            perf script -i "$TMP/perf.data" 2>/dev/null |
                python3 "$(dirname "$0")/flamegraph.py" "$OUT/publish-cost$TAG-r$round$side.svg" \
                    "serve, $N subscribers over $CH channels, round $round $side, perf -g -F 999, 10 s" \
                    --collapsed "$OUT/publish-cost$TAG-r$round$side.collapsed.txt" --top 25 >>"$REPORT"
        fi
        wait "$bench_pid" || true
        stop_pid "$SERVE_PID" 20
        python3 - "$TMP/run.json" "$TMP/perf.csv" "$t0" "$w0" "$w1" "$c0" "$c1" "$(getconf CLK_TCK)" "$round" "$side" <<'PY' | tee -a "$REPORT"
import json, sys
report, perf = sys.argv[1], sys.argv[2]
t0, w0, w1 = map(float, sys.argv[3:6])
c0, c1, hz = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
r = json.load(open(report))
delivered = sum(p["delivered"] for p in r["timeline"] if w0 - t0 < p["t_s"] <= w1 - t0)
counts = {}
for line in open(perf):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].replace(".", "").isdigit():
        counts[f[2]] = float(f[0])
d = max(delivered, 1)
print(f"round {sys.argv[9]} {sys.argv[10]}: delivered {delivered:,} in the window ({delivered / (w1 - w0):,.0f}/s); "
      f"per message: server CPU {(c1 - c0) * 1e6 / hz / d:.1f} µs, system calls {counts.get('raw_syscalls:sys_enter', 0) / d:.2f}, "
      f"context switches {counts.get('context-switches', 0) / d:.2f}; run: missing {r['delivery']['totals']['missing']}, "
      f"errors {r['errors_total']}")
PY
        sleep 3
    done
done
