#!/usr/bin/env bash
# idle-cost.sh: what N idle SSE subscribers cost c1m serve while nothing is published, two
# builds side by side (loopback only): serve's CPU (Σ utime + stime of its process tree) and
# its processes' wake-ups (context switches, voluntary + not) per second, the master apart.
# Idle is most of a push gateway's life: a million subscribers that wait for their next
# message should not keep two cores busy counting them. Each run: a fresh serve (its default
# flags plus SERVE_ARGS), bench's naive C client (bench/blockconnect.c, N SSE subscribes of
# /sub/idle, then it holds them and does nothing), SETTLE s for the ramp's tail, then SECS s
# sampled. Heartbeats are serve's work too (30 s by default): SERVE_ARGS="--sse-heartbeat 0"
# leaves only serve's own bookkeeping.
# Usage: SERVE_A=<c1m> SERVE_B=<c1m> bench/idle-cost.sh [N]   (default 190000)
# Env: ROUNDS (2, alternated: A B, then B A), SECS (30), SETTLE (10), SERVE_ARGS, PORT (18720).
set -euo pipefail
N=${1:-190000}
ROUNDS=${ROUNDS:-2}
SECS=${SECS:-30}
SETTLE=${SETTLE:-10}
SERVE_ARGS=${SERVE_ARGS:-}
PORT=${PORT:-18720}
: "${SERVE_A:?SERVE_A=<c1m binary>}" "${SERVE_B:?SERVE_B=<c1m binary>}"
source "$(dirname "$0")/lib.sh" # OUT, BENCH_DIR, work_dir, track_pid, stop_pid, wait_http, tree_cpu_ticks, wait_sockets_gone
work_dir
sysctl_raise_for_conns "$N"
gcc -O2 -Wall -o "$WORK/blockconnect" "$BENCH_DIR/blockconnect.c"
HZ=$(getconf CLK_TCK)
PROCS=$((N / 15000 + 1)) # each under the 20,000 fd limit
OUTF="$OUT/idle-cost-$N-$(date -u +%Y%m%dT%H%MZ).txt"
echo "# idle-cost: $N idle SSE subscribers (blockconnect, $PROCS processes), serve on default flags + [$SERVE_ARGS], ${SECS}s sampled after ${SETTLE}s; A=$SERVE_A B=$SERVE_B; $(nproc) CPUs, kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ)" | tee "$OUTF"

switches() { # PID...: Σ context switches of these processes
    local p
    for p in "$@"; do
        awk '/^(voluntary|nonvoluntary)_ctxt_switches/ { s += $2 } END { print s + 0 }' "/proc/$p/status" 2>/dev/null || echo 0
    done | awk '{ t += $1 } END { print t + 0 }'
}

run_one() { # LABEL BINARY
    local label=$1 bin=$2 spid cpid workers c0 c1 m0 m1 w0 w1
    # Not lib.sh's start_serve (workers at nice 0): the figure is serve's defaults.
    # shellcheck disable=SC2086 # SERVE_ARGS is a flag list on purpose
    "$bin" serve --listen "127.0.0.1:$PORT" $SERVE_ARGS >"$WORK/serve-$label.log" 2>&1 &
    spid=$!
    track_pid "$spid"
    wait_http "127.0.0.1:$PORT" 30
    HOLD=3600 "$WORK/blockconnect" 127.0.0.1 "$PORT" "$N" "$PROCS" 127.0.1.1 20 /sub/idle >"$WORK/client-$label.txt" 2>&1 &
    cpid=$!
    track_pid "$cpid"
    for _ in $(seq 300); do
        [ "$(curl -s "http://127.0.0.1:$PORT/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"]["sse"])' 2>/dev/null || echo 0)" -ge "$N" ] && break
        sleep 1
    done
    sleep "$SETTLE"
    workers=$(pgrep -P "$spid" | tr '\n' ' ')
    # shellcheck disable=SC2086 # one pid per word
    { c0=$(tree_cpu_ticks "$spid"); m0=$(switches "$spid"); w0=$(switches $workers); }
    sleep "$SECS"
    # shellcheck disable=SC2086
    { c1=$(tree_cpu_ticks "$spid"); m1=$(switches "$spid"); w1=$(switches $workers); }
    local held
    held=$(curl -s "http://127.0.0.1:$PORT/status" | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["connections"]["sse"], len(s["workers"]))' 2>/dev/null || echo "? ?")
    echo "$label: held ${held% *} in ${held#* } workers; serve cpu $(((c1 - c0) * 1000 / HZ / SECS)) ms/s; master $(((m1 - m0) / SECS)) wake-ups/s, workers $(((w1 - w0) / SECS))/s" | tee -a "$OUTF"
    stop_pid "$cpid" 10
    stop_pid "$spid" 20
    wait_sockets_gone
}

for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
    for x in $order; do
        if [ "$x" = A ]; then run_one "round $r A" "$SERVE_A"; else run_one "round $r B" "$SERVE_B"; fi
    done
done
echo "wrote $OUTF"
