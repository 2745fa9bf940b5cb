#!/usr/bin/env bash
# tls-handshakes.sh: full TLS handshakes per second per server core, c1m serve vs nginx (the
# same nginx + nchan build as tls-memory.sh), on loopback.
#
#   per core = handshakes completed / CPU seconds (user + system) the server's one worker used
#
# The server runs one worker (c1m --workers 1, nginx worker_processes 1); bench/tls-hold.py
# clients (python ssl, several processes) connect, finish a full handshake (no resumption)
# and close, back to back, for SECONDS. The client runs on the same 2 cores, so the wall rate
# is bounded by the client; the per-core figure is not (it divides by the server's own CPU).
# TLS 1.3, X25519, ECDSA P-256 certificate.
#
# Usage: bench/tls-handshakes.sh [SECONDS]   (default 20)
# Env: RUNS ("c1m nginx"), PROCS (client processes, 3), PORT (18390), C1M (binary).
# Writes bench/out/tls-handshakes.json and prints a Markdown table.
set -euo pipefail
SECS=${1:-20}
RUNS=${RUNS:-"c1m nginx"}
PROCS=${PROCS:-3}
PORT=${PORT:-18390}
source "$(dirname "$0")/lib.sh"
TMP=$(mktemp -d)
on_exit "rm -rf '$TMP'"
c1m_binary
make_cert "$TMP"
TICK=$(getconf CLK_TCK)


: >"$TMP/results.jsonl"
for RUN in $RUNS; do
    case $RUN in
    c1m)
        start_serve "$TMP/$RUN.log" --listen "127.0.0.1:$PORT" --workers 1 \
            --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem"
        ROOT_PID=$SERVE_PID ;;
    nginx)
        start_nchan "$TMP/nginx" "$PORT" 1 "$TMP"
        wait_port 127.0.0.1 "$PORT"
        ROOT_PID=$NCHAN_PID ;;
    *) echo "unknown run $RUN" >&2; exit 2 ;;
    esac
    sleep 3
    WORKER=$(cat /proc/"$ROOT_PID"/task/*/children | tr ' ' '\n' | grep -v '^$' | head -1)
    C0=$(cpu_ticks "$WORKER")
    S0=$(curl -ks -m 5 "https://127.0.0.1:$PORT/status" || echo '{}')
    OUTL=$(timeout $((SECS + 90)) python3 "$BENCH_DIR/tls-hold.py" handshakes 127.0.0.1 "$PORT" \
        "$SECS" --ca "$TMP/cert.pem" --procs "$PROCS")
    C1=$(cpu_ticks "$WORKER")
    sleep 1   # workers push their counters every 250 ms
    S1=$(curl -ks -m 5 "https://127.0.0.1:$PORT/status" || echo '{}')
    stop_pid "$ROOT_PID"
    python3 - "$RUN" "$SECS" "$C0" "$C1" "$TICK" "$OUTL" "$S0" "$S1" >>"$TMP/results.jsonl" <<'PY'
import json, sys
run, secs, c0, c1, tick, outl, s0, s1 = sys.argv[1:]
parts = outl.split()
done, failed = int(parts[1]), int(parts[3])
cpu = (int(c1) - int(c0)) / int(tick)
def tls(s):
    try: return (json.loads(s).get("tls") or {}).get("handshakes")
    except Exception: return None
server_counted = None if tls(s1) is None else tls(s1) - (tls(s0) or 0) - 1  # minus the /status probe
print(json.dumps({"run": run, "seconds": float(secs), "client_handshakes": done, "client_failed": failed,
    "server_counted": server_counted, "worker_cpu_s": round(cpu, 2),
    "per_wall_second": round(done / float(secs)), "per_core_second": round(done / cpu) if cpu else None}))
PY
    sleep 2
done
python3 - "$TMP/results.jsonl" "$OUT/tls-handshakes.json" "$SECS" "$PROCS" <<'PY'
import json, sys, datetime, platform, os
src, out, secs, procs = sys.argv[1:]
runs = [json.loads(l) for l in open(src)]
doc = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "kernel": platform.release(), "cpus": os.cpu_count(),
       "command": f"bench/tls-handshakes.sh {secs} (PROCS={procs})", "runs": runs}
json.dump(doc, open(out, "w"), indent=1)
print(f"\n# full TLS handshakes, one server worker ({doc['date_utc']}, kernel {doc['kernel']}, {doc['cpus']} CPUs)")
print("| server | handshakes (failed) in s | server counted | worker CPU s | per wall s | **per core s** |")
print("|---|---|---|---|---|---|")
for r in runs:
    print(f"| {r['run']} | {r['client_handshakes']:,} ({r['client_failed']}) in {r['seconds']:.0f} | {r['server_counted']} | "
          f"{r['worker_cpu_s']} | {r['per_wall_second']:,} | **{r['per_core_second']:,}** |")
PY
