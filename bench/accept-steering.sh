#!/usr/bin/env bash
# accept-steering.sh: serve's accept path when the fd limit makes it run more workers than
# CPUs (53 on this box for the default --max-conns 1M). The subscribe floor's naive C client
# (bench/blockconnect.c with PATH: blocking connect, the SSE request, read the response head)
# opens N subscribers against each server, alternating, and the subscribe floor itself
# (bench/holdlisten.c sse) runs in the same round. Figures per run: the open rate, and the
# server's CPU per connection (utime + stime of its process tree over the ramp / N).
# Servers: SERVE_A and SERVE_B (binaries, e.g. the build before accept steering and main),
# both on default flags plus SERVE_ARGS.
# Usage: SERVE_A=/path/old SERVE_B=/path/new bench/accept-steering.sh [N]   (default 60000)
# Env: ROUNDS (3), PORT (18690), SERVE_ARGS (none).
set -euo pipefail
N=${1:-60000}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-18690}
SERVE_ARGS=${SERVE_ARGS:-}
source "$(dirname "$0")/lib.sh" # OUT, work_dir, track_pid, stop_pid, tree_cpu_ticks, wait_sockets_gone
: "${SERVE_A:?SERVE_A=binary}" "${SERVE_B:?SERVE_B=binary}"
work_dir
gcc -O2 -Wall -o "$WORK/holdlisten" "$BENCH_DIR/holdlisten.c"
gcc -O2 -Wall -o "$WORK/blockconnect" "$BENCH_DIR/blockconnect.c"
HARD=$(ulimit -Hn)
CPROCS=$(((N + HARD - 101) / (HARD - 100)))
SRCS=$(((N + 11999) / 12000))
LPROCS=$(((N + 14999) / 15000 + 2))
HZ=$(getconf CLK_TCK)
OUTF="$OUT/accept-steering-$N-$(date -u +%Y%m%dT%H%MZ).txt"
echo "# accept-steering: $N naive subscribers per run, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUTF"

connect() { # -> "opened ... rate R"
    timeout 300 "$WORK/blockconnect" 127.0.0.1 "$PORT" "$N" "$CPROCS" 127.0.1.1 "$SRCS" /sub/news
}

serve_run() { # LABEL BINARY ROUND
    local label=$1 bin=$2 round=$3 spid before after line
    # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
    "$bin" serve --listen "127.0.0.1:$PORT" $SERVE_ARGS >"$WORK/serve-$label.log" 2>&1 &
    spid=$!
    track_pid "$spid"
    wait_http "127.0.0.1:$PORT" 30
    sleep 3 # every worker reports (and is steered) before the ramp
    before=$(tree_cpu_ticks "$spid")
    line=$(connect)
    after=$(tree_cpu_ticks "$spid")
    echo "round $round $label: $line; workers $(($(pgrep -P "$spid" | wc -l))); serve cpu $(((after - before) * 1000000 / HZ / N)) us/conn" | tee -a "$OUTF"
    stop_pid "$spid" 30
    wait_sockets_gone
}

floor_run() { # ROUND
    local lpid line
    setsid "$WORK/holdlisten" 127.0.0.1 "$PORT" "$LPROCS" sse &
    lpid=$!
    sleep 1
    line=$(connect)
    echo "round $1 floor (holdlisten sse, $LPROCS processes): $line" | tee -a "$OUTF"
    kill -- -"$lpid" 2>/dev/null || true
    wait "$lpid" 2>/dev/null || true
    wait_sockets_gone
}

for round in $(seq "$ROUNDS"); do
    floor_run "$round"
    serve_run A "$SERVE_A" "$round"
    serve_run B "$SERVE_B" "$round"
done
echo "raw: $OUTF"
