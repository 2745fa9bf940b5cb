#!/usr/bin/env bash
# bench-log-memory.sh: c1m bench's own memory over a long publish stream, two bench builds
# alternated against one c1m serve (loopback only). Each bench keeps a log of acknowledged
# publishes per channel for its delivery accounting; this shows whether that log grows with
# the run's length or stays within its retention.
#
# Each round runs, for each of BENCH_A and BENCH_B: SUBS SSE subscribers over CHANNELS
# channels with --churn-resume (windows stay open all run, as in bench/soak.sh), PUBS
# publishes per second, for HOLD. The default is many publishes to few subscribers, so a log
# that grows with the run stands out against the connections' own memory within minutes.
# The figure is bench's summed PSS at the end minus at the start (workers and coordinator;
# the report's memory.bench), beside the publishes made.
# Usage: BENCH_A=<c1m> BENCH_B=<c1m> bench/bench-log-memory.sh
# Env: SUBS (2000), CHANNELS (1000), PUBS (8000), PUBLISHERS (4), HOLD (240s), ROUNDS (1),
#      PORT (18490), C1M (the serve binary; default target/release/c1m), TAG.
# Writes bench/out/bench-log-memory${TAG}-r{round}{A,B}.json and prints a Markdown table.
set -euo pipefail
SUBS=${SUBS:-2000}
CHANNELS=${CHANNELS:-1000}
PUBS=${PUBS:-8000}
PUBLISHERS=${PUBLISHERS:-4}
HOLD=${HOLD:-240s}
ROUNDS=${ROUNDS:-1}
PORT=${PORT:-18490}
TAG=${TAG:-}
: "${BENCH_A:?BENCH_A=<c1m binary>}" "${BENCH_B:?BENCH_B=<c1m binary>}"
source "$(dirname "$0")/lib.sh" # ROOT, OUT, c1m_binary, start_serve, wait_http, stop_pid
c1m_binary
log() { echo "bench-log-memory: $*" >&2; }

start_serve "$OUT/bench-log-memory${TAG}-serve.log" --listen "127.0.0.1:$PORT" \
    --workers 2 --history-size 100 --max-conns $((SUBS + 1000))
wait_http "127.0.0.1:$PORT" 20

echo "| round | bench | publishes | bench PSS start → end | growth | growth per publish | delivered to all |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
    for side in A B; do
        bin=BENCH_$side
        report="$OUT/bench-log-memory${TAG}-r${round}${side}.json"
        log "round $round, $side: ${!bin}"
        timeout 900 "${!bin}" bench "http://127.0.0.1:$PORT/sub/logmem" --scenario churn \
            --churn-resume --churn-rate 100 --conns "$SUBS" --rate 5000 --channels "$CHANNELS" \
            --publish-rate "$PUBS" --publishers "$PUBLISHERS" --hold "$HOLD" --drain 5s --reconnect -q \
            --report "$report" >"$report.txt" 2>&1 || log "bench $side exited $? (see $report.txt)"
        python3 - "$report" "$round" "$side" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["memory"]["bench"]
pubs = r["publishing"]["published"]
ok = r["delivery"]["delivered_to_all"]
start, end = m["pss_start_bytes"], m["pss_end_bytes"]
per = (end - start) / pubs if pubs else float("nan")
print(f"| {sys.argv[2]} | {sys.argv[3]} | {pubs:,} | {start / 1e6:.1f} → {end / 1e6:.1f} MB "
      f"| {(end - start) / 1e6:+.1f} MB | {per:.2f} B | {ok} |")
EOF
    done
done
