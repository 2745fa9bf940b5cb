#!/usr/bin/env bash
# channels-1m.sh: one million distinct channels against one `c1m serve`, on loopback only.
#
# SUBS SSE subscribers held on channels spread evenly over the channel space, then one
# PAYLOAD-byte message published to each of N distinct channels through /api/batch (NDJSON,
# 8,000 items a request), history on (--history-age AGE, so it expires during the run). At each
# phase (start, subscribed, with history, after the history expired, after the subscribers
# left) the driver (bench/channels_1m.py) records the master's and the workers' RSS and PSS,
# the time and size of GET /status, and every page of POST /api/channels at the largest limit
# (and that a limit over the cap is refused). Bytes per channel:
#   master with history = (master RSS with history − subscribed) / N
#   master after expiry = (master RSS after expiry − subscribed) / N   (the records of loss)
#   workers per subscriber = (Σ worker RSS subscribed − at start) / SUBS (its connection, its
#                            channel there, its share of the worker's tables)
#
# Usage: bench/channels-1m.sh [N]   (default 1000000)
# Env: SUBS (5000), PAYLOAD (64), AGE (serve --history-age, 90s), WORKERS (2), PORT (18390),
#      C1M, TAG (a suffix for the output names, e.g. to compare two builds). Writes
#      bench/out/channels-1m-N[-TAG].json (the report) and .log (progress and serve's log).
#      Every wait is bounded; the server is stopped at exit.
set -euo pipefail
N=${1:-1000000}
SUBS=${SUBS:-5000}
PAYLOAD=${PAYLOAD:-64}
AGE=${AGE:-90s}
WORKERS=${WORKERS:-2}
PORT=${PORT:-18390}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary, start_serve, wait_http
c1m_binary
work_dir
REPORT="$OUT/channels-1m-$N${TAG:+-$TAG}.json"
LOG="$OUT/channels-1m-$N${TAG:+-$TAG}.log"
# History for every channel: 1M × (224 B channel + name + 64 B message + 64 B bookkeeping)
# is about 360 MB; the bound leaves room so nothing is evicted before it expires.
start_serve "$WORK/serve.log" --listen "127.0.0.1:$PORT" --workers "$WORKERS" \
    --history-age "$AGE" --history-max-bytes 1073741824
wait_http "127.0.0.1:$PORT" 20
{
    echo "# $(date -u +%FT%TZ) $("$SERVE_C1M" --version) $(uname -r) $(nproc) CPUs" \
        "$(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
    echo "# serve --workers $WORKERS --history-age $AGE --history-max-bytes 1073741824;" \
        "N=$N SUBS=$SUBS PAYLOAD=$PAYLOAD"
} >"$LOG"
timeout 1200 python3 "$BENCH_DIR/channels_1m.py" --addr "127.0.0.1:$PORT" \
    --master-pid "$SERVE_PID" --channels "$N" --subscribers "$SUBS" --payload "$PAYLOAD" \
    >"$REPORT" 2> >(tee -a "$LOG" >&2)
cat "$WORK/serve.log" >>"$LOG"
cat "$REPORT"
