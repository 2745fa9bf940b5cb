#!/usr/bin/env bash
# ab.sh: two builds of `c1m serve`, A and B, measured by the same load generator with the
# committed scripts, alternated A B B A ... so a box whose load drifts treats both alike:
#   memory  : bench/serve-memory.sh MEM_N (SSE, idle): user bytes per subscriber;
#   fan-out : bench/peers.sh's fanout scenario (FANOUT_N SSE subscribers, one channel):
#             delivery p50/p99 of one message to all;
#   publish : bench/peers.sh's channels scenario (CHANNELS channels, CHAN_SUBS subscribers,
#             PUBLISHERS keep-alive publishers as fast as acks come): acked publishes/s and
#             the server's CPU per delivered message.
# The load generator is always the current build (C1M, built when unset); only the server
# differs (SERVE_C1M, see lib.sh). Loopback only; every step is bounded by the scripts it runs.
#
# Usage: bench/ab.sh A_BINARY B_BINARY
# Env: ROUNDS (2; each round runs A and B once, the order flipping every round), MEM_N
#      (100000), FANOUT_N (100000), CHAN_SUBS (40000), CHANNELS (20000), WORKERS (6: the
#      same worker count for both sides), TAG (ab: names the outputs).
# Writes bench/out/$TAG-{mem,peers}-{A,B}-ROUND.json and bench/out/$TAG.md (a table of every
# run and B/A medians), and prints the table.
set -euo pipefail
A=${1:?usage: bench/ab.sh A_BINARY B_BINARY}
B=${2:?usage: bench/ab.sh A_BINARY B_BINARY}
ROUNDS=${ROUNDS:-2}
MEM_N=${MEM_N:-100000}
FANOUT_N=${FANOUT_N:-100000}
CHAN_SUBS=${CHAN_SUBS:-40000}
CHANNELS=${CHANNELS:-20000}
WORKERS=${WORKERS:-6}
TAG=${TAG:-ab}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary
c1m_binary
# The scripts write their usual outputs (peers.json, serve-memory-N.json, ...), which other
# entries of BENCHMARKS.md cite: keep those as they were.
KEEP=$(mktemp -d)
for f in peers.json peers.md "serve-memory-$MEM_N.json"; do
    [ -e "$OUT/$f" ] && cp -p "$OUT/$f" "$KEEP/$f"
done
restore_outputs() {
    local f
    for f in peers.json peers.md "serve-memory-$MEM_N.json"; do
        if [ -e "$KEEP/$f" ]; then cp -p "$KEEP/$f" "$OUT/$f"; else rm -f "$OUT/$f"; fi
    done
    rm -rf "$KEEP"
}
on_exit restore_outputs
for bin in "$A" "$B"; do
    [ -x "$bin" ] || { echo "ab.sh: $bin is not an executable" >&2; exit 2; }
done

run_side() { # SIDE BINARY ROUND
    local side=$1 bin=$2 round=$3
    echo "== round $round · $side · $("$bin" --version)" >&2
    SERVE_C1M=$bin PROTOS=sse WORKERS=$WORKERS SETTLE=16 bash "$BENCH_DIR/serve-memory.sh" "$MEM_N" >&2
    cp "$OUT/serve-memory-$MEM_N.json" "$OUT/$TAG-mem-$side-$round.json"
    SERVE_C1M=$bin SERVERS=c1m ROUNDS=1 CHANNELS=$CHANNELS \
        bash "$BENCH_DIR/peers.sh" "$FANOUT_N" "$CHAN_SUBS" >&2
    cp "$OUT/peers.json" "$OUT/$TAG-peers-$side-$round.json"
}

for round in $(seq "$ROUNDS"); do
    if ((round % 2)); then order="A B"; else order="B A"; fi
    for side in $order; do
        if [ "$side" = A ]; then run_side A "$A" "$round"; else run_side B "$B" "$round"; fi
    done
done

python3 - "$OUT" "$TAG" "$ROUNDS" "$A" "$B" <<'PY'
import json, statistics, sys
out, tag, rounds, a_bin, b_bin = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def figures(side, rnd):
    mem = json.load(open(f"{out}/{tag}-mem-{side}-{rnd}.json"))["runs"][0]
    rows = json.load(open(f"{out}/{tag}-peers-{side}-{rnd}.json"))["rows"]
    fan, ch = rows["fanout-c1m-1"], rows["channels-c1m-1"]
    return {"mem B/sub": mem["bytes_per_subscriber"], "fan-out p50 ms": fan["p50_ms"],
            "fan-out p99 ms": fan["p99_ms"], "publish/s": ch["publish_rate"],
            "CPU µs/delivered": ch.get("cpu_us_per_delivered"),
            "missing": fan["missing"] + ch["missing"], "errors": fan["errors"] + ch["errors"]}
runs = {(s, r): figures(s, r) for r in range(1, rounds + 1) for s in "AB"}
keys = ["mem B/sub", "fan-out p50 ms", "fan-out p99 ms", "publish/s", "CPU µs/delivered",
        "missing", "errors"]
lines = [f"A = {a_bin}", f"B = {b_bin}", "",
         "| round | side | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
for (s, r), v in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    lines.append(f"| {r} | {s} | " + " | ".join(f"{v[k]:,.2f}" if v[k] is not None else "n/a" for k in keys) + " |")
lines += ["", "B / A, median of the rounds' ratios (memory, p99 and CPU: below 1 is better for "
          "B; publish/s: above 1 is better for B):", ""]
for k in keys[:5]:
    xs = [runs[("B", r)][k] / runs[("A", r)][k] for r in range(1, rounds + 1)
          if runs[("A", r)][k] and runs[("B", r)][k]]
    lines.append(f"- {k}: " + ("n/a" if not xs else
                 f"{statistics.median(xs):.3f} ({', '.join(f'{x:.3f}' for x in xs)})"))
open(f"{out}/{tag}.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
