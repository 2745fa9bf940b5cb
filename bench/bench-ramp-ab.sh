#!/usr/bin/env bash
# bench-ramp-ab.sh: the load generator's own cost on a subscribe ramp, two bench builds
# alternated against one c1m serve (loopback only), to tell a change in bench from a change in
# serve or in the box. Each run: a fresh serve on its default flags (`--max-conns` MAX_CONNS,
# so the fd limit's worker layout), one bench ramp of N SSE subscribers at `--rate 0` (closed
# loop), a short hold. Figures per run: the ramp rate, bench's errors, and the CPU each side
# spent per connection over the run (utime + stime of each process tree / N).
# Usage: BENCH_A=<c1m> BENCH_B=<c1m> bench/bench-ramp-ab.sh [N]   (default 190000)
# Env: ROUNDS (2), MAX_CONNS (1000000), PORT (18700), C1M (the serve binary; default
#      target/release/c1m), LOAD_NICE (10, bench --load-nice, as run-1m.sh), ARGS_A / ARGS_B
#      (more bench flags for A / B: one binary twice, e.g. ARGS_B="--per-source 12000").
set -euo pipefail
N=${1:-190000}
ROUNDS=${ROUNDS:-2}
MAX_CONNS=${MAX_CONNS:-1000000}
PORT=${PORT:-18700}
LOAD_NICE=${LOAD_NICE:-10}
: "${BENCH_A:?BENCH_A=<c1m binary>}" "${BENCH_B:?BENCH_B=<c1m binary>}"
source "$(dirname "$0")/lib.sh" # OUT, work_dir, c1m_binary, track_pid, stop_pid, tree_cpu_ticks, wait_sockets_gone
c1m_binary
work_dir
HZ=$(getconf CLK_TCK)
OUTF="$OUT/bench-ramp-ab-$N-$(date -u +%Y%m%dT%H%MZ).txt"
echo "# bench-ramp-ab: $N SSE subscribers per run (A: ${ARGS_A:-no more flags}; B: ${ARGS_B:-no more flags}), serve $C1M --max-conns $MAX_CONNS, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUTF"

run() { # LABEL BENCH ROUND EXTRA_ARGS
    local label=$1 bin=$2 round=$3 spid bpid s0 s1 b_ticks summary
    local -a extra
    read -r -a extra <<<"$4"
    "$C1M" serve --listen "127.0.0.1:$PORT" --max-conns "$MAX_CONNS" >"$WORK/serve-$label.log" 2>&1 &
    spid=$!
    track_pid "$spid"
    wait_http "127.0.0.1:$PORT" 30
    sleep 3 # every worker reports (and is steered) before the ramp
    cp "$bin" "$WORK/bench-$label" # its own copy: no shared text pages with serve
    s0=$(tree_cpu_ticks "$spid")
    # bash's `time` counts the waited-for descendants too: bench's workers.
    local TIMEFORMAT='%U %S'
    { time timeout 600 "$WORK/bench-$label" bench \
        "http://127.0.0.1:$PORT/sub/ab" --proto sse --conns "$N" --rate 0 --channels 1 \
        --hold 5s --load-nice "$LOAD_NICE" "${extra[@]}" -q >"$WORK/bench-$label.txt" 2>&1 || true; } 2>"$WORK/time-$label"
    s1=$(tree_cpu_ticks "$spid")
    b_ticks=$(awk '{printf "%d", ($1 + $2) * 1000000 / '"$N"'}' "$WORK/time-$label")
    summary=$(grep -E '^(online|errors)' "$WORK/bench-$label.txt" | tr -s ' ' | tr '\n' ';')
    echo "round $round $label: $summary bench cpu $b_ticks us/conn; serve cpu $(((s1 - s0) * 1000000 / HZ / N)) us/conn" | tee -a "$OUTF"
    stop_pid "$spid" 30
    wait_sockets_gone
}

for round in $(seq "$ROUNDS"); do
    run A "$BENCH_A" "$round" "${ARGS_A:-}"
    run B "$BENCH_B" "$round" "${ARGS_B:-}"
done
echo "raw: $OUTF"
