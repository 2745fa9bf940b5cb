#!/usr/bin/env bash
# pie-cost.sh: the fixed memory cost of linking c1m as a position-independent executable (PIE,
# the default, which keeps ASLR for the executable's own image) against a non-PIE link of the
# same code. A PIE's pointer tables (.data.rel.ro, vtables, static string tables) are patched
# by the dynamic loader at start, so those pages become private and dirty in every process;
# `c1m serve --max-conns 1000000` runs one process per ~19,000 connections on a host whose
# hard fd limit is 20,000 (~55 processes), so the cost is paid that many times.
#
# Measured: Σ PSS of an idle `c1m serve --max-conns MAX_CONNS` (master + workers, no client),
# each binary started ROUNDS times, alternated (PIE, non-PIE, PIE, non-PIE, ...).
#
# Usage: bench/pie-cost.sh PIE_BINARY NOPIE_BINARY
#   A non-PIE binary of the current tree (relinks only the c1m crate):
#     cargo rustc --release -p c1m --bin c1m -- -C link-arg=-no-pie
#     cp target/release/c1m /tmp/c1m-nopie && cargo build --release -p c1m
# Env: ROUNDS (2), MAX_CONNS (1000000), PORT (18690), SETTLE (seconds after /healthz, 5).
# Writes bench/out/pie-cost.txt. Every step is time-bounded.
set -euo pipefail
PIE=${1:?usage: bench/pie-cost.sh PIE_BINARY NOPIE_BINARY}
NOPIE=${2:?usage: bench/pie-cost.sh PIE_BINARY NOPIE_BINARY}
ROUNDS=${ROUNDS:-2}
MAX_CONNS=${MAX_CONNS:-1000000}
PORT=${PORT:-18690}
SETTLE=${SETTLE:-5}
source "$(dirname "$0")/lib.sh" # OUT, start_serve, wait_http, stop_pid, tree_pss, tree_procs
TMP=$(mktemp -d)
on_exit 'rm -rf "$TMP"'

elf_type() { readelf -h "$1" | awk '/Type:/ { print $2 }'; }
[ "$(elf_type "$PIE")" = DYN ] || { echo "pie-cost: $PIE is not a PIE (readelf -h)" >&2; exit 2; }
[ "$(elf_type "$NOPIE")" = EXEC ] || { echo "pie-cost: $NOPIE is not a non-PIE executable" >&2; exit 2; }

{
    echo "# pie-cost max_conns=$MAX_CONNS rounds=$ROUNDS $(date -u +%Y-%m-%dT%H:%M:%SZ), kernel $(uname -r), $(nproc) CPUs, hard nofile $(ulimit -Hn), load $(cut -d' ' -f1-3 /proc/loadavg)"
    for i in $(seq 1 "$ROUNDS"); do
        for kind in pie nopie; do
            if [ "$kind" = pie ]; then C1M=$PIE; else C1M=$NOPIE; fi
            start_serve "$TMP/serve-$kind-$i.log" --listen "127.0.0.1:$PORT" --max-conns "$MAX_CONNS"
            wait_http "127.0.0.1:$PORT" 60
            sleep "$SETTLE"
            pss=$(tree_pss "$SERVE_PID")
            procs=$(tree_procs "$SERVE_PID")
            echo "$kind round $i: $procs processes, sum PSS $((pss / 1024)) KiB ($((pss / 1024 / procs)) KiB per process)"
            stop_pid "$SERVE_PID" 15
            sleep 2
        done
    done
} | tee "$OUT/pie-cost.txt"
