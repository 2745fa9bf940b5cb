#!/usr/bin/env bash
# tls-memory.sh: user-space memory per idle TLS subscriber, c1m serve vs nginx + nchan, on
# loopback, in one run:
#
#   per subscriber = (Σ PSS of the server's processes with N SSE subscribers held
#                     − the same with none) / N
#
# Runs, one after the other on the same port range:
#   c1m-tls      c1m serve --tls-cert/--tls-key, N SSE subscribers over TLS
#   c1m-plain    c1m serve without TLS, N SSE subscribers (the baseline: TLS's own cost is
#                the difference)
#   nchan-tls    nginx + nchan (Debian nginx-light + libnginx-mod-nchan) with the same
#                certificate, N EventSource subscribers over TLS
# The subscribers are held by bench/tls-hold.py (python ssl; `c1m bench` has no TLS yet).
# TLS 1.3, X25519, an ECDSA P-256 certificate, whatever cipher the client and server agree on.
#
# Usage: bench/tls-memory.sh [N]   (default 100000)
# Env: RUNS ("c1m-tls c1m-plain nchan-tls"), PROCS (client processes, default N/16000+1),
#      PORT (18380), SETTLE (seconds held before measuring, 5), C1M (binary).
# Writes bench/out/tls-memory-N.json and prints a Markdown table. Every wait is bounded.
set -euo pipefail
N=${1:-100000}
RUNS=${RUNS:-"c1m-tls c1m-plain nchan-tls"}
PROCS=${PROCS:-$((N / 16000 + 1))}
PORT=${PORT:-18380}
SETTLE=${SETTLE:-5}
source "$(dirname "$0")/lib.sh"
TMP=$(mktemp -d)
on_exit "rm -rf '$TMP'"
c1m_binary
make_cert "$TMP"
# Server processes: enough that none passes the 20000-descriptor limit.
WORKERS=$((N / 18000 + 1))
RAMP_LIMIT=$((N / 100 + 120))   # seconds: at least 100 handshakes/s or the run fails


: >"$TMP/results.jsonl"
for RUN in $RUNS; do
    proto=sse
    case $RUN in
    c1m-tls)
        start_serve "$TMP/$RUN.log" --listen "127.0.0.1:$PORT" --workers "$WORKERS" \
            --max-conns $((N + N / 10 + 100)) --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem"
        ROOT_PID=$SERVE_PID ;;
    c1m-plain)
        start_serve "$TMP/$RUN.log" --listen "127.0.0.1:$PORT" --workers "$WORKERS" \
            --max-conns $((N + N / 10 + 100))
        ROOT_PID=$SERVE_PID; proto=plain-sse ;;
    nchan-tls)
        start_nchan "$TMP/nginx" "$PORT" "$WORKERS" "$TMP"
        wait_port 127.0.0.1 "$PORT"
        ROOT_PID=$NCHAN_PID ;;
    *) echo "unknown run $RUN" >&2; exit 2 ;;
    esac
    sleep 3   # every worker up
    P0=$(tree_pss "$ROOT_PID"); NP0=$(tree_procs "$ROOT_PID")
    rm -f "$TMP/ready"
    T0=$(date +%s.%N)
    python3 "$BENCH_DIR/tls-hold.py" hold 127.0.0.1 "$PORT" "$N" --ca "$TMP/cert.pem" \
        --procs "$PROCS" --proto "$proto" --ready "$TMP/ready" --concurrency 64 \
        --max-hold $((RAMP_LIMIT + 120)) >"$TMP/hold-$RUN.log" 2>&1 &
    HOLD_PID=$!
    track_pid "$HOLD_PID"
    for _ in $(seq $((RAMP_LIMIT * 2))); do
        [ -s "$TMP/ready" ] && break
        kill -0 "$HOLD_PID" 2>/dev/null || break
        sleep 0.5
    done
    T1=$(date +%s.%N)
    READY=$(cat "$TMP/ready" 2>/dev/null || echo "ready 0 $N never")
    sleep "$SETTLE"
    P1=$(tree_pss "$ROOT_PID"); NP1=$(tree_procs "$ROOT_PID")
    STATUS='{}'
    if [ "${RUN#c1m}" != "$RUN" ]; then
        scheme=https; [ "$RUN" = c1m-plain ] && scheme=http
        STATUS=$(curl -ks -m 5 "$scheme://127.0.0.1:$PORT/status" || echo '{}')
    fi
    stop_pid "$HOLD_PID"
    stop_pid "$ROOT_PID"
    python3 - "$RUN" "$N" "$P0" "$NP0" "$P1" "$NP1" "$T0" "$T1" "$READY" "$STATUS" >>"$TMP/results.jsonl" <<'PY'
import json, sys
run, n, p0, np0, p1, np1, t0, t1, ready, status = sys.argv[1:]
_, opened, failed, *_ = ready.split(" ", 3) + [""]
try: st = json.loads(status)
except Exception: st = {}
print(json.dumps({"run": run, "n": int(n), "held": int(opened), "failed": int(failed),
    "ramp_s": round(float(t1) - float(t0), 1), "processes": int(np1),
    "pss_zero_bytes": int(p0), "pss_n_bytes": int(p1),
    "bytes_per_subscriber": (int(p1) - int(p0)) / max(int(opened), 1),
    "status_connections": st.get("connections", {}).get("total"), "status_tls": st.get("tls")}))
PY
    sleep 3   # closes settle before the next server takes the port
done

python3 - "$TMP/results.jsonl" "$OUT/tls-memory-$N.json" "$N" <<'PY'
import json, sys, datetime, platform, os
src, out, n = sys.argv[1:]
runs = [json.loads(l) for l in open(src)]
doc = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "kernel": platform.release(), "cpus": os.cpu_count(),
       "command": f"bench/tls-memory.sh {n}", "runs": runs}
json.dump(doc, open(out, "w"), indent=1)
print(f"\n# memory per idle TLS subscriber, N={int(n):,} ({doc['date_utc']}, kernel {doc['kernel']}, {doc['cpus']} CPUs)")
print("| run | held (failed) | ramp | server procs | Σ PSS at 0 | Σ PSS at N | **B per subscriber** |")
print("|---|---|---|---|---|---|---|")
for r in runs:
    print(f"| {r['run']} | {r['held']:,} ({r['failed']}) | {r['ramp_s']} s | {r['processes']} | "
          f"{r['pss_zero_bytes']/2**20:.1f} MiB | {r['pss_n_bytes']/2**20:.1f} MiB | **{r['bytes_per_subscriber']:,.0f} B** |")
for r in runs:
    if r.get("status_tls"):
        print(f"- {r['run']} /status tls: {r['status_tls']}, connections {r['status_connections']}")
PY
