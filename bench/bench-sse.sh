#!/usr/bin/env bash
# bench-sse.sh: N SSE subscribers held against c1m serve on the same box (loopback only),
# a message to all of them every few seconds, the full report and plot kept.
# Usage: bench/bench-sse.sh [N] [RATE]   (defaults 100000, 20000). Env: HOLD (20s),
# EVERY (2s), CHANNELS (1), PROTO (sse), PORT (18180). Writes bench/out/sse-N.{json,svg,txt}.
set -euo pipefail
N=${1:-100000}
RATE=${2:-20000}
HOLD=${HOLD:-20s}
EVERY=${EVERY:-2s}
CHANNELS=${CHANNELS:-1}
PROTO=${PROTO:-sse}
PORT=${PORT:-18180}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary
HERE=$BENCH_DIR
SPID=""
cleanup() {
    if [ -n "$SPID" ]; then kill -TERM "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; fi
}
trap cleanup EXIT

c1m_binary
"$C1M" serve --listen "127.0.0.1:$PORT" --tcp-listen "127.0.0.1:$((PORT + 1))" \
    --max-conns $((N * 3 / 2)) >"$OUT/serve-$N.log" 2>&1 &
SPID=$!
for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
    sleep 0.1
done
timeout 900 "$C1M" bench "http://127.0.0.1:$PORT/sub/news" --proto "$PROTO" \
    --tcp "127.0.0.1:$((PORT + 1))" --conns "$N" --rate "$RATE" --channels "$CHANNELS" \
    --hold "$HOLD" --publish-every "$EVERY" --interval 5s \
    --report "$OUT/$PROTO-$N.json" --plot "$OUT/$PROTO-$N.svg" | tee "$OUT/$PROTO-$N.txt"
