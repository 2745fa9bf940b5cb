#!/usr/bin/env bash
# h2-memory.sh: user-space memory per idle HTTP/2 connection and per further SSE stream,
# c1m serve vs nginx + nchan (Debian nginx-light + libnginx-mod-nchan), both over cleartext
# HTTP/2 with prior knowledge (h2c), on loopback, in one run:
#
#   per connection (shape N×S) = (peak Σ PSS of the server's processes while N connections
#                                 with S streams each are held − the same before) / N
#   per further stream         = (per connection at 10K×20 − per connection at 100K×1) / 19
#
# The connections are held by `c1m bench --http2 --streams-per-conn S` (idle: nothing is
# published); a run is valid only when every connection came online (all its streams answered
# 200). PSS is sampled every second while bench holds them; the peak is the held state.
#
# c1m serve gives each stream a connection slot holding a duplicate of the connection's
# descriptor, so a process holds connections × (streams + 1) descriptors: serve gets
# --max-conns and enough workers for that (the hard nofile limit here is 20,000 per process);
# nginx gets one worker per 18,000 connections.
#
# Usage: bench/h2-memory.sh        Env: SHAPES ("100000x1 10000x20"), SERVERS ("c1m nchan"),
#   RATE (bench --rate, 10000), PORT (18580), SETTLE (seconds held after the ramp, 10),
#   C1M (binary; built when unset).
# Writes bench/out/h2-memory.json and bench/out/h2-memory.md. Every wait is bounded.
set -euo pipefail
SHAPES=${SHAPES:-"100000x1 10000x20"}
SERVERS=${SERVERS:-"c1m nchan"}
RATE=${RATE:-10000}
PORT=${PORT:-18580}
SETTLE=${SETTLE:-10}
source "$(dirname "$0")/lib.sh"
c1m_binary
ensure_nchan
TMP=$(mktemp -d)
on_exit "rm -rf '$TMP'"
# bench from its own copy of the binary: PSS splits shared text pages among their mappers.
cp "$C1M" "$TMP/c1m-bench"
RUN_NO=0

start_server() { # NAME CONNS STREAMS
    local name=$1 n=$2 s=$3
    case $name in
    c1m)
        local slots=$((n * (s + 1) * 11 / 10 + 1000))
        local workers=$((slots / 18000 + 1))
        start_serve "$TMP/serve.log" --listen "127.0.0.1:$PORT" --max-conns "$slots" --workers "$workers"
        SERVER_PID=$SERVE_PID
        SERVER_WORKERS=$workers
        wait_http "127.0.0.1:$PORT" 30
        ;;
    nchan)
        local w=$((n / 18000 + 1))
        [ "$w" -ge 2 ] || w=2
        rm -rf "$TMP/nchan"
        NCHAN_LISTEN=http2 start_nchan "$TMP/nchan" "$PORT" "$w"
        SERVER_PID=$NCHAN_PID
        SERVER_WORKERS=$w
        wait_port 127.0.0.1 "$PORT" 20
        ;;
    esac
}

: >"$TMP/rows.jsonl"
for shape in $SHAPES; do
    n=${shape%x*}
    s=${shape#*x}
    for name in $SERVERS; do
        label="$name-$shape"
        echo "== $label" >&2
        start_server "$name" "$n" "$s"
        sleep 3 # every worker started and settled
        base=$(tree_pss "$SERVER_PID")
        procs=$(tree_procs "$SERVER_PID")
        RUN_NO=$((RUN_NO + 1))
        # Each run its own source addresses: the last run's closed connections sit in
        # TIME_WAIT and would leave too few ports on shared ones.
        src="127.$((30 + RUN_NO)).0.2-127.$((30 + RUN_NO)).0.31"
        hold=$((n / RATE + 20 + SETTLE))
        timeout $((hold * 3 + 120)) "$TMP/c1m-bench" bench "http://127.0.0.1:$PORT/sub/mem" \
            --http2 --streams-per-conn "$s" --conns "$n" --rate "$RATE" --hold "${hold}s" \
            --source "$src" --interval 5s --report "$TMP/$label.json" >"$TMP/$label.txt" 2>&1 &
        bpid=$!
        track_pid "$bpid"
        peak=$base
        for _ in $(seq $((hold * 3 + 120))); do
            kill -0 "$bpid" 2>/dev/null || break
            p=$(tree_pss "$SERVER_PID")
            [ "$p" -gt "$peak" ] && peak=$p
            sleep 1
        done
        wait "$bpid" || true
        untrack_pid "$bpid"
        sed -n '/^c1m bench/,$p' "$TMP/$label.txt" >&2
        stop_pid "$SERVER_PID" 20
        python3 - "$TMP/$label.json" "$name" "$n" "$s" "$base" "$peak" "$procs" "$SERVER_WORKERS" \
            "$(cut -d' ' -f1 /proc/loadavg)" >>"$TMP/rows.jsonl" <<'PY'
import json, sys
path, name, n, s, base, peak, procs, workers, load = sys.argv[1:]
n, s, base, peak = int(n), int(s), int(base), int(peak)
r = json.load(open(path))
res = r["result"]
print(json.dumps({
    "server": name, "conns": n, "streams_per_conn": s, "server_processes": int(procs),
    "server_workers": int(workers), "pss_base_bytes": base, "pss_peak_bytes": peak,
    "bytes_per_conn": (peak - base) / n, "peak_online": res["peak_online"],
    "valid": res["peak_online"] == n, "errors": r["errors_total"], "error_kinds": r["errors"],
    "bench_bytes_per_conn": r.get("memory", {}).get("bench", {}).get("pss_delta_bytes_per_connection"),
    "load1_after": float(load), "command": r["command"], "environment": r["environment"],
}))
PY
        cp "$TMP/$label.json" "$TMP/report-$label.json"
        sleep 5 # closes settle before the next run
    done
done

python3 - "$TMP" "$OUT" <<'PY'
import datetime, glob, json, sys
tmp, out = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{tmp}/rows.jsonl")]
env = rows[0]["environment"]
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
reports = {p.split("report-")[1][:-5]: json.load(open(p)) for p in glob.glob(f"{tmp}/report-*.json")}
json.dump({"date_utc": date, "rows": rows, "bench_reports": reports}, open(f"{out}/h2-memory.json", "w"), indent=1)
lines = [f"Run {date}; kernel {env.get('kernel')}, {env.get('cpus')} CPUs, "
         f"{env.get('mem_total_bytes', 0) / 2**30:.1f} GiB; h2c (prior knowledge), servers and bench on one box over loopback.", "",
         "| server | connections × streams | online | server processes | user B / connection | errors | valid | load1 after |",
         "|---|---|---|---|---|---|---|---|"]
for v in rows:
    lines.append(f"| {v['server']} | {v['conns']:,} × {v['streams_per_conn']} | {v['peak_online']:,} | {v['server_processes']} "
                 f"| {v['bytes_per_conn']:,.0f} | {v['errors']:,} | {'yes' if v['valid'] else 'NO'} | {v['load1_after']:.1f} |")
lines += ["", "Per further idle stream, (B/conn at ×S − B/conn at ×1) / (S − 1):", ""]
for srv in sorted({v["server"] for v in rows}):
    one = [v for v in rows if v["server"] == srv and v["streams_per_conn"] == 1]
    many = [v for v in rows if v["server"] == srv and v["streams_per_conn"] > 1]
    for m in many:
        if one:
            per = (m["bytes_per_conn"] - one[0]["bytes_per_conn"]) / (m["streams_per_conn"] - 1)
            lines.append(f"- {srv}: {per:,.0f} B per further stream")
lines += ["", "Commands:", ""] + [f"    {v['command']}" for v in rows]
open(f"{out}/h2-memory.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
