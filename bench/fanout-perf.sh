#!/usr/bin/env bash
# fanout-perf.sh: where a worker's fan-out time goes, epoll vs io_uring. For each --io mode:
# c1m serve --workers 1, N SSE subscribers from c1m bench, one message every EVERY; `perf record
# -g` on the worker process for the publishing window; the stacks become a flame graph
# (bench/flamegraph.py, standard-library Python) and a top-functions summary.
#
# Usage: bench/fanout-perf.sh [N]   (default 15000: one worker holds them all within its 20000-descriptor limit)
# Env: TAG (report name suffix), MODES ("epoll uring"): each a --io value, or serve flags joined by commas
#      (e.g. "uring,--uring-setup,defer"); ROUNDS (1, modes alternate); PERF (1; 0 = figures
#      only, no perf record); EVERY (1s), HOLD (16s), PORT (18395), FREQ (2999 Hz), C1M.
# Writes bench/out/fanout-perf-MODE-N.svg (flame graph) and bench/out/fanout-perf-N.txt (the
# summaries and the serve/bench commands).
set -euo pipefail
N=${1:-15000}
MODES=${MODES:-epoll uring}
EVERY=${EVERY:-1s}
HOLD=${HOLD:-16s}
PORT=${PORT:-18395}
FREQ=${FREQ:-2999}
source "$(dirname "$0")/lib.sh"
work_dir
c1m_binary
REPORT="$OUT/fanout-perf-$N${TAG:-}.txt"
{
    echo "# fanout-perf N=$N $(date -u +%Y-%m-%dT%H:%M:%SZ), kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "serve: c1m serve --listen 127.0.0.1:$PORT --workers 1 --io MODE; bench: c1m bench --proto sse --conns $N --rate 20000 --publish-every $EVERY --hold $HOLD"
} >"$REPORT"
PERF=${PERF:-1}
ROUNDS=${ROUNDS:-1}
for round in $(seq "$ROUNDS"); do
for variant in $MODES; do
    IFS=, read -r -a flags <<<"$variant"
    [ "${flags[0]#--}" = "${flags[0]}" ] && flags=(--io "${flags[@]}")
    mode=$(echo "$variant" | tr -c 'a-z0-9\n' '-')
    echo "== round $round: ${flags[*]} (load $(cut -d' ' -f1 /proc/loadavg))" >>"$REPORT"
    start_serve "$WORK/serve-$mode.log" --listen "127.0.0.1:$PORT" --workers 1 "${flags[@]}" --max-conns $((N + 1000))
    wait_http "127.0.0.1:$PORT" 20
    sleep 1
    worker=$(curl -s -m 5 "http://127.0.0.1:$PORT/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["workers"][0]["pid"])')
    "$C1M" bench "http://127.0.0.1:$PORT/sub/news" --proto sse --conns "$N" --rate 20000 --channels 1 \
        --hold "$HOLD" --publish-every "$EVERY" --drain 2s --interval 5s >"$WORK/bench-$mode.txt" 2>&1 &
    BPID=$!
    track_pid "$BPID"
    # Ramp first (N at 20K/s), then record the steady publishing window.
    for _ in $(seq 60); do
        c=$(curl -s -m 5 "http://127.0.0.1:$PORT/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"]["sse"])' 2>/dev/null || echo 0)
        [ "$c" -ge "$N" ] && break
        sleep 0.5
    done
    sleep 1
    if [ "$PERF" = 1 ]; then
        timeout 30 perf record -F "$FREQ" -g -p "$worker" -o "$WORK/perf-$mode.data" -- sleep 8 >/dev/null 2>&1 || true
    fi
    wait "$BPID" || true
    status=$(curl -s -m 5 "http://127.0.0.1:$PORT/status" || echo '{}')
    stop_pid "$SERVE_PID" 10
    if [ "$PERF" = 1 ]; then
        perf script -i "$WORK/perf-$mode.data" 2>/dev/null |
            python3 "$BENCH_DIR/flamegraph.py" "$OUT/fanout-perf-$mode-$N.svg" "c1m serve ${flags[*]}, worker, $N SSE subscribers, one message per $EVERY" --top 20 >>"$REPORT"
    fi
    {
        echo "  fan_out (per message, this worker): $(echo "$status" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("latency", {}).get("fan_out"))')"
        echo "  io: $(echo "$status" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("io", {}).get("workers"))')"
        grep -E '^delivery' "$WORK/bench-$mode.txt" | sed 's/^/  bench /'
        echo
    } >>"$REPORT"
    sleep 2
done
done
cat "$REPORT"
