#!/usr/bin/env bash
# fanout-uring.sh: one message to N SSE subscribers through three servers in the same run:
# c1m serve --io epoll (one write() per socket), c1m serve --io uring (batched io_uring sends)
# and the C floor (bench/fanout_floor.c: a multi-process epoll loop, one write() per socket),
# same client (c1m bench), same N, alternating ROUNDS times (the order rotates each round so
# a drift in the box's load does not favour one). Loopback only.
#
# Each run: `c1m bench --proto sse --conns N --rate RATE --channels 1 --hold HOLD
# --publish-every EVERY --drain DRAIN`: each message's fan-out is measured alone. Delivery
# latency = publisher's send time to the subscriber's parse time (p50/p99 over every delivery).
# The floor runs as many processes as serve has workers, in the same session as serve and
# bench (sched autogroup; see fanout.sh). Serve's workers run at nice 0 like bench and the floor
# (lib.sh's start_serve; C1M_WORKER_NICE=10 gives serve's own default): at its default +10 they
# yield the shared CPUs to bench, which a deployment's subscribers never share.
#
# Above 200,000 subscribers the kernel limits a 1M run needs are raised as run-1m.sh does
# (somaxconn, tcp_max_syn_backlog, tcp_mem, netdev_max_backlog, fs.file-max, nf_conntrack_max) and restored on
# exit. Take the box-wide lock for such runs: flock /work/locks/bench.lock bench/fanout-uring.sh 1000000
#
# Usage: bench/fanout-uring.sh [N]   (default 190000)
# Env: ROUNDS (2), RATE (60000), HOLD (22s), EVERY (5s), DRAIN (8s), PORT (18380),
#      SERVERS ("epoll uring floor"), SERVE_EXTRA (more serve flags, e.g. "--uring-setup defer"),
#      TAG (output name suffix), C1M (binary).
# Writes bench/out/fanout-uring-N$TAG.json (every run's figures) and prints a markdown table.
set -euo pipefail
N=${1:-190000}
ROUNDS=${ROUNDS:-2}
RATE=${RATE:-60000}
HOLD=${HOLD:-22s}
EVERY=${EVERY:-5s}
DRAIN=${DRAIN:-8s}
PORT=${PORT:-18380}
SERVERS=${SERVERS:-epoll uring floor}
SERVE_EXTRA=${SERVE_EXTRA:-}
TAG=${TAG:-}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary, start_serve, stop_pid, wait_port
TMP=$(mktemp -d)
PID=""
on_exit 'stop_pid "$PID" 10; rm -rf "$TMP"'
sysctl_raise_for_conns "$N"

c1m_binary
gcc -O2 -Wall -o "$TMP/fanout_floor" "$BENCH_DIR/fanout_floor.c"

echo "# fanout-uring N=$N rounds=$ROUNDS servers=[$SERVERS] $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host: kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
SERVE_ARGS=(--listen "127.0.0.1:$PORT" --max-conns $((N * 3 / 2)))
# shellcheck disable=SC2206 # SERVE_EXTRA is a flag list on purpose
SERVE_ARGS+=($SERVE_EXTRA)
# Serve's worker count (auto, from --max-conns and the fd limit), for the floor's processes.
start_serve "$TMP/probe.log" "${SERVE_ARGS[@]}" --io epoll
PID=$SERVE_PID
wait_port 127.0.0.1 "$PORT" 30
W=$(timeout 5 curl -s "http://127.0.0.1:$PORT/status" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))')
stop_pid "$PID" 10
PID=""
sleep 2
echo "serve: c1m serve ${SERVE_ARGS[*]} --io {epoll,uring} ($W workers, C1M_WORKER_NICE=${C1M_WORKER_NICE:-0}: at bench's and the floor's priority, lib.sh's start_serve); floor: fanout_floor, $W processes"

run_one() { # $1 = server, $2 = round
    local label="$1-$2"
    case $1 in
        floor)
            "$TMP/fanout_floor" 127.0.0.1 "$PORT" "$W" 2>"$TMP/$label.log" &
            PID=$!
            ;;
        *)
            start_serve "$TMP/$label.log" "${SERVE_ARGS[@]}" --io "$1"
            PID=$SERVE_PID
            ;;
    esac
    wait_port 127.0.0.1 "$PORT" 30
    sleep 2
    echo "== round $2: $1 (load $(cut -d' ' -f1 /proc/loadavg))"
    echo "$(cut -d' ' -f1-3 /proc/loadavg)" >"$TMP/$label.load"
    timeout 900 "$C1M" bench "http://127.0.0.1:$PORT/sub/news" --proto sse --conns "$N" \
        --rate "$RATE" --channels 1 --hold "$HOLD" --publish-every "$EVERY" --drain "$DRAIN" --interval 5s \
        --report "$TMP/$label.json" >"$TMP/$label.txt" 2>&1 || true
    if [ "$1" != floor ]; then
        timeout 5 curl -s "http://127.0.0.1:$PORT/status" >"$TMP/$label.status" || echo '{}' >"$TMP/$label.status"
    else
        echo '{}' >"$TMP/$label.status"
    fi
    stop_pid "$PID" 10
    PID=""
    grep -E 'delivery|delivered' "$TMP/$label.txt" | head -4 || true
    sleep 3
}

read -r -a ORDER <<<"$SERVERS"
for r in $(seq 1 "$ROUNDS"); do
    for s in "${ORDER[@]}"; do run_one "$s" "$r"; done
    # Rotate: the server that went first goes last next round.
    ORDER=("${ORDER[@]:1}" "${ORDER[0]}")
done

python3 - "$TMP" "$ROUNDS" "$N" "$W" "$OUT/fanout-uring-$N$TAG.json" "${SERVE_ARGS[*]}" "$SERVERS" <<'PY'
import json, statistics, sys, datetime
tmp, rounds, n, w, out, sargs, servers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7].split()
def fig(label):
    try:
        r = json.load(open(f"{tmp}/{label}.json"))
    except Exception as e:
        return {"error": f"no report: {e}"}
    d, res, lat = r["delivery"], r["result"], r["latency_us"]
    st = json.load(open(f"{tmp}/{label}.status"))
    return {
        "online_at_end": res["online_at_end"], "open_rate_avg": res["open_rate_avg"],
        "errors_total": r["errors_total"], "published": r["publishing"]["published"],
        "expected": d["totals"]["expected"], "received_in_window": d["totals"]["received_in_window"],
        "missing": d["totals"]["missing"],
        "delivery_p50_ms": lat["delivery"]["p50_us"] / 1e3, "delivery_p99_ms": lat["delivery"]["p99_us"] / 1e3,
        "delivery_max_ms": lat["delivery"]["max_us"] / 1e3, "delivery_samples": lat["delivery"]["count"],
        "load_at_start": open(f"{tmp}/{label}.load").read().strip(),
        "io": st.get("io"), "fan_out": st.get("latency", {}).get("fan_out"),
        "command": r["command"], "environment": r.get("environment"),
    }
rows = {f"{s}-{i}": fig(f"{s}-{i}") for i in range(1, rounds + 1) for s in servers}
doc = {"date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), "n": n, "workers": int(w),
       "serve_command": f"c1m serve {sargs} --io {{epoll,uring}}", "floor_command": f"fanout_floor 127.0.0.1 PORT {w}",
       "runs": rows}
json.dump(doc, open(out, "w"), indent=1)
print(f"\n# one message to {n:,} SSE subscribers ({doc['date_utc']}): {w} workers / floor processes")
print("| round | server | online | delivered / expected | p50 | **p99** | max | load at start | uring sends / submits |")
print("|---|---|---|---|---|---|---|---|---|")
for i in range(1, rounds + 1):
    for s in servers:
        f = rows[f"{s}-{i}"]
        if "error" in f:
            print(f"| {i} | {s} | {f['error']} |"); continue
        io = f.get("io") or {}
        us = sum(x.get("uring_sends") or 0 for x in io.get("workers", [])) if io else 0
        sub = sum(x.get("uring_submits") or 0 for x in io.get("workers", [])) if io else 0
        print(f"| {i} | {s} | {f['online_at_end']:,} | {f['received_in_window']:,} / {f['expected']:,} (missing {f['missing']}) "
              f"| {f['delivery_p50_ms']:.0f} ms | **{f['delivery_p99_ms']:.0f} ms** | {f['delivery_max_ms']:.0f} ms | {f['load_at_start']} "
              f"| {us:,} / {sub:,} |")
def ratio(a, b, k):
    out = []
    for i in range(1, rounds + 1):
        x, y = rows.get(f"{a}-{i}", {}), rows.get(f"{b}-{i}", {})
        if k in x and k in y and y[k]:
            out.append(x[k] / y[k])
    return out
for a, b in (("uring", "floor"), ("epoll", "floor"), ("uring", "epoll")):
    if a in servers and b in servers:
        for k in ("delivery_p99_ms", "delivery_p50_ms"):
            rs = ratio(a, b, k)
            if rs:
                print(f"{a}/{b} {k[9:12]} per round: " + ", ".join(f"{x:.2f}" for x in rs) + f"; median {statistics.median(rs):.2f}")
PY
