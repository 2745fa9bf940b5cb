#!/usr/bin/env bash
# serve-memory.sh: c1m serve's user-space memory per idle subscriber, on loopback only.
#
#   per subscriber = (Σ PSS of all c1m serve processes at N subscribers
#                     − the same at 0 subscribers) / N
#
# PSS is read by this script from /proc/PID/smaps_rollup of the master and of every worker
# (children of the master), and cross-checked with serve's own /status memory.pss_bytes.
# The N subscribers are held by `c1m bench` (idle: nothing is published); its report's
# server-memory figures are kept beside ours.
#
# Usage: bench/serve-memory.sh [N]   (default 100000)
# Env: PROTOS ("sse poll tcp"), MAX_CONNS (serve --max-conns; default: serve's default,
#      1,000,000), WORKERS (serve --workers; default auto), RATE (bench --rate, 20000),
#      PORT (18280), C1M (binary; default: cargo build --release), SERVE_FLAGS (extra serve
#      flags), SETTLE (seconds held before measuring, 3; ≥ 16 lets the head-timeout entries of
#      the ramp fire (10 s) and a worker's periodic heap trim (5 s) run before the sample).
# Writes bench/out/serve-memory-N.json and prints a summary. Every step is time-bounded.
set -euo pipefail
N=${1:-100000}
PROTOS=${PROTOS:-"sse poll tcp"}
RATE=${RATE:-20000}
PORT=${PORT:-18280}
WORKERS=${WORKERS:-auto}
MAX_CONNS=${MAX_CONNS:-}
SETTLE=${SETTLE:-3}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary
HERE=$BENCH_DIR
TMP=$(mktemp -d)
SPID=""
BPID=""
stop_serve() {
    if [ -n "$SPID" ]; then
        kill -TERM "$SPID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SPID" 2>/dev/null || true
        wait "$SPID" 2>/dev/null || true
        SPID=""
    fi
}
cleanup() {
    if [ -n "$BPID" ]; then kill -TERM "$BPID" 2>/dev/null || true; wait "$BPID" 2>/dev/null || true; fi
    stop_serve
    rm -rf "$TMP"
}
trap cleanup EXIT

c1m_binary
# bench runs from its own copy of the binary: PSS splits a shared page among all its mappers,
# so a bench started from the same file took a share of serve's ~5 MB of text and lowered
# serve's figure at N (growth below the slab's own 32 B per subscriber at 100K with 7 serve
# processes, 2026-11-26T02:21Z).
BENCH_C1M="$TMP/c1m-bench"
cp "$C1M" "$BENCH_C1M"

# pss_sum: Σ Pss (bytes) over the serve master and its children, and the process count.
pss_sum() {
    local total=0 n=0 pid kb
    for pid in "$SPID" $(cat "/proc/$SPID/task/$SPID/children" 2>/dev/null); do
        kb=$(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || true)
        [ -n "$kb" ] || continue
        total=$((total + kb * 1024)); n=$((n + 1))
    done
    echo "$total $n"
}
status() { timeout 5 curl -s "http://127.0.0.1:$PORT/status" || echo '{}'; }
conns() { status | python3 -c 'import json,sys; print(json.load(sys.stdin).get("connections",{}).get("total",-1))' 2>/dev/null || echo -1; }

SERVE_ARGS=(--listen "127.0.0.1:$PORT" --tcp-listen "127.0.0.1:$((PORT + 1))" --workers "$WORKERS")
[ -n "$MAX_CONNS" ] && SERVE_ARGS+=(--max-conns "$MAX_CONNS")
# Extra serve flags, split on spaces (e.g. short heartbeat and ping intervals).
read -r -a EXTRA <<<"${SERVE_FLAGS:-}"
SERVE_ARGS+=("${EXTRA[@]}")

for PROTO in $PROTOS; do
    "$SERVE_C1M" serve "${SERVE_ARGS[@]}" >"$TMP/serve-$PROTO.log" 2>&1 &
    SPID=$!
    for _ in $(seq 1 200); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
        sleep 0.1
    done
    sleep 3   # let every worker start and push its first figures
    read -r P0 NP0 < <(pss_sum)
    S0=$(status)
    # Hold long enough for the ramp, the settle and the measurement; nothing is published (idle).
    HOLD=$(( N / RATE + 30 + SETTLE ))
    timeout $((HOLD * 3 + 120)) "$BENCH_C1M" bench "http://127.0.0.1:$PORT/sub/mem" --proto "$PROTO" \
        --tcp "127.0.0.1:$((PORT + 1))" --conns "$N" --rate "$RATE" --hold "${HOLD}s" \
        --interval 5s --report "$TMP/bench-$PROTO.json" >"$TMP/bench-$PROTO.txt" 2>&1 &
    BPID=$!
    # Wait until serve counts N connections (plus our own /status request), then settle.
    ok=0
    for _ in $(seq 1 $((HOLD * 4))); do
        c=$(conns)
        if [ "$c" -ge "$N" ]; then ok=1; break; fi
        kill -0 "$BPID" 2>/dev/null || break
        sleep 0.5
    done
    sleep "$SETTLE"
    read -r P1 NP1 < <(pss_sum)
    S1=$(status)
    C1=$(conns)
    kill -TERM "$BPID" 2>/dev/null || true   # measured: stop the hold (bench still writes its report)
    wait "$BPID" || true
    BPID=""
    stop_serve
    python3 - "$PROTO" "$N" "$P0" "$NP0" "$P1" "$NP1" "$ok" "$C1" "$TMP" <<'PY'
import json, sys
proto, n, p0, np0, p1, np1, ok, c1, tmp = sys.argv[1:]
n, p0, p1 = int(n), int(p0), int(p1)
def js(s):
    try: return json.loads(s)
    except Exception: return {}
b = json.load(open(f"{tmp}/bench-{proto}.json"))
rec = {
    "proto": proto, "n": n, "reached": ok == "1", "serve_connections_at_sample": int(c1),
    "serve_processes": int(np1), "pss_zero_bytes": p0, "pss_n_bytes": p1,
    "bytes_per_subscriber": (p1 - p0) / n,
    "bench_report_server_memory": b.get("memory", {}).get("server"),
    "bench_online_at_end": b["result"]["online_at_end"], "bench_errors": b.get("errors_total"),
    "bench_ramp_rate": b["result"]["open_rate_avg"], "bench_workers": b["plan"]["workers"],
    "bench_bytes_per_conn": b.get("memory", {}).get("bench", {}).get("pss_delta_bytes_per_connection"),
    "environment": b.get("environment"), "bench_command": b.get("command"), "started_utc": b.get("started_utc"),
}
open(f"{tmp}/rec-{proto}.json", "w").write(json.dumps(rec))
PY
    cp "$TMP/serve-$PROTO.log" "$TMP/serve-$PROTO.keep" 2>/dev/null || true
    echo "status-zero-$PROTO $(echo "$S0" | tr -d '\n')" >>"$TMP/status.txt"
    echo "status-n-$PROTO $(echo "$S1" | tr -d '\n')" >>"$TMP/status.txt"
    sleep 3   # TIME_WAIT/close settle before the next protocol
done

python3 - "$TMP" "$N" "$OUT/serve-memory-$N.json" "${SERVE_ARGS[*]}" "$PROTOS" <<'PY'
import json, sys, datetime
tmp, n, out, sargs, protos = sys.argv[1:]
st = {}
for line in open(f"{tmp}/status.txt"):
    k, _, v = line.partition(" ")
    try: st[k] = json.loads(v)
    except Exception: st[k] = {}
recs = []
for p in protos.split():
    r = json.load(open(f"{tmp}/rec-{p}.json"))
    s0, s1 = st.get(f"status-zero-{p}", {}), st.get(f"status-n-{p}", {})
    r["status_pss_zero_bytes"] = s0.get("memory", {}).get("pss_bytes")
    r["status_pss_n_bytes"] = s1.get("memory", {}).get("pss_bytes")
    r["status_processes"] = s1.get("memory", {}).get("processes")
    r["status_workers"] = len(s1.get("workers", []))
    recs.append(r)
env = recs[0]["environment"] or {}
doc = {"date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
       "serve_command": f"c1m serve {sargs}", "n": int(n), "runs": recs}
json.dump(doc, open(out, "w"), indent=1)
print(f"\n# c1m serve memory per idle subscriber, N={int(n):,} ({doc['date_utc']})")
print(f"serve: c1m serve {sargs}")
print(f"env:   kernel {env.get('kernel')}, {env.get('cpus')} CPUs, {env.get('mem_total_bytes',0)/2**30:.1f} GiB, "
      f"nofile {env.get('nofile_soft')}/{env.get('nofile_hard')}")
print("| proto | held | serve procs | Σ PSS at 0 (ours / /status) | Σ PSS at N (ours / /status) | **B per subscriber** | bench's server B/conn (growth) | budget ≤ 256 B |")
print("|---|---|---|---|---|---|---|---|")
for r in recs:
    m = lambda x: f"{x/2**20:.2f} MiB" if x is not None else "n/a"
    bs = (r.get("bench_report_server_memory") or {}).get("pss_delta_bytes_per_connection")
    print(f"| {r['proto']} | {r['bench_online_at_end']:,} (serve {r['serve_connections_at_sample']:,}) | {r['serve_processes']} "
          f"| {m(r['pss_zero_bytes'])} / {m(r['status_pss_zero_bytes'])} | {m(r['pss_n_bytes'])} / {m(r['status_pss_n_bytes'])} "
          f"| **{r['bytes_per_subscriber']:.0f} B** | {bs:.0f} B | {'met' if r['bytes_per_subscriber'] <= 256 and r['reached'] else 'NOT met'} |"
          if bs is not None else
          f"| {r['proto']} | {r['bench_online_at_end']:,} | {r['serve_processes']} | {m(r['pss_zero_bytes'])} | {m(r['pss_n_bytes'])} | **{r['bytes_per_subscriber']:.0f} B** | n/a | {'met' if r['bytes_per_subscriber'] <= 256 and r['reached'] else 'NOT met'} |")
for r in recs:
    print(f"- {r['proto']}: bench `{r['bench_command']}` ({r['started_utc']}), {r['bench_workers']} bench workers, "
          f"ramp {r['bench_ramp_rate']:,.0f}/s, errors {r['bench_errors']}, bench B/conn: {r['bench_bytes_per_conn']} (none when the hold is cut short)")
PY
