#!/usr/bin/env bash
# fanout.sh: one message to N SSE subscribers — c1m serve against the C floor
# (bench/fanout_floor.c: a multi-process SO_REUSEPORT epoll loop that write()s the same SSE
# event bytes to every socket it holds), same client (c1m bench), same N, same run,
# alternating the two servers ROUNDS times. Loopback only.
#
# Each run: `c1m bench --proto sse --conns N --rate RATE --channels 1 --hold HOLD
# --publish-every EVERY`, so each message's fan-out is measured alone (EVERY well above the
# fan-out time). Delivery latency = publisher's send time to the subscriber's parse time.
# The ramp (RATE, high on purpose) also gives the subscribe rate each server sustains.
# The floor runs as many processes as serve has workers, in the same session (scheduling
# autogroup) as serve and bench.
#
# Usage: bench/fanout.sh [N]   (default 190000)
# Env: ROUNDS (2), RATE (60000), HOLD (22s), EVERY (5s), DRAIN (8s: no publish in the last
# DRAIN of the hold, so the slower server's last fan-out still lands inside it), PORT (18380), C1M (binary).
# Writes bench/out/fanout-N.json (every round's figures; the last round's two bench reports
# in full) and the last round's plots bench/out/fanout-N-{serve,floor}.svg.
set -euo pipefail
N=${1:-190000}
ROUNDS=${ROUNDS:-2}
RATE=${RATE:-60000}
HOLD=${HOLD:-22s}
EVERY=${EVERY:-5s}
DRAIN=${DRAIN:-8s}
PORT=${PORT:-18380}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary, start_serve
HERE=$BENCH_DIR
TMP=$(mktemp -d)
SPID=""
FPID=""
# lib.sh's stop_pid: SIGTERM, bounded wait, SIGKILL. The floor's parent stops its workers on
# SIGTERM (they also die with it: PDEATHSIG).
stop_all() {
    stop_pid "$SPID" 10
    SPID=""
    stop_pid "$FPID" 5
    FPID=""
}
on_exit 'stop_all; rm -rf "$TMP"'

c1m_binary
gcc -O2 -Wall -o "$TMP/fanout_floor" "$HERE/fanout_floor.c"

overflows() { awk '/^TcpExt:/ { if (!h) { for (i = 1; i <= NF; i++) k[i] = $i; h = 1 } else for (i = 1; i <= NF; i++) if (k[i] == "ListenOverflows") print $i }' /proc/net/netstat; }
run_bench() { # $1 = label
    local o0; o0=$(overflows)
    timeout 600 "$C1M" bench "http://127.0.0.1:$PORT/sub/news" --proto sse --conns "$N" \
        --rate "$RATE" --channels 1 --hold "$HOLD" --publish-every "$EVERY" --drain "$DRAIN" --interval 5s \
        --report "$TMP/$1.json" --plot "$TMP/$1.svg" >"$TMP/$1.txt" 2>&1 || true
    echo $(( $(overflows) - o0 )) >"$TMP/$1.overflows"
    echo "listen overflows during the run: $(cat "$TMP/$1.overflows")"
    sed -n '/^c1m bench/,$p' "$TMP/$1.txt" | grep -v '^ *[0-9.]*s ' | tail -14
}

SERVE_ARGS=(--listen "127.0.0.1:$PORT" --max-conns $((N * 3 / 2)))
W=""
for i in $(seq 1 "$ROUNDS"); do
    echo "== round $i: c1m serve ${SERVE_ARGS[*]} (C1M_WORKER_NICE=${C1M_WORKER_NICE:-0}, as bench and the floor)"
    start_serve "$TMP/serve-$i.log" "${SERVE_ARGS[@]}"
    SPID=$SERVE_PID
    wait_port 127.0.0.1 "$PORT" 20
    sleep 2
    W=$(timeout 5 curl -s "http://127.0.0.1:$PORT/status" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))')
    run_bench "serve-$i"
    timeout 5 curl -s "http://127.0.0.1:$PORT/status" >"$TMP/serve-status-$i.json" || true
    stop_all
    sleep 3
    echo "== round $i: fanout_floor 127.0.0.1 $PORT $W"
    # Same session as serve and bench: NOT setsid. With sched_autogroup (on here) a new
    # session is its own scheduling group, and the floor's processes would share one group's
    # CPU instead of getting a share per process like serve's workers (first runs did that:
    # the floor came out ~1.7x slower than serve).
    "$TMP/fanout_floor" 127.0.0.1 "$PORT" "$W" 2>"$TMP/floor-$i.log" &
    FPID=$!
    wait_port 127.0.0.1 "$PORT" 20
    sleep 1
    run_bench "floor-$i"
    stop_all
    sed 's/^/    /' "$TMP/floor-$i.log" | sort -t' ' -k1,1 | awk '{n++; s+=$5; w+=$11; sh+=$13; f+=$15; if ($17>m) m=$17} END {printf "    floor: %d processes, %d subscribers still held at stop, writes %d, short %d, failed %d, slowest fan-out in one process %.1f ms\n", n, s, w, sh, f, m}'
    sleep 3
done
cp "$TMP/serve-$ROUNDS.svg" "$OUT/fanout-$N-serve.svg"
cp "$TMP/floor-$ROUNDS.svg" "$OUT/fanout-$N-floor.svg"

python3 - "$TMP" "$ROUNDS" "$N" "$W" "$OUT/fanout-$N.json" "${SERVE_ARGS[*]}" <<'PY'
import json, statistics, sys, datetime
tmp, rounds, n, w, out, sargs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
def fig(label):
    r = json.load(open(f"{tmp}/{label}.json"))
    d, res, lat = r["delivery"], r["result"], r["latency_us"]
    return {
        "started_utc": r["started_utc"], "online_at_end": res["online_at_end"],
        "subscribed": res.get("subscribed"), "ramp_s": res["ramp_s"], "open_rate_avg": res["open_rate_avg"],
        "errors_total": r["errors_total"], "errors": r["errors"],
        "published": r["publishing"]["published"], "delivered_to_all": d["delivered_to_all"],
        "expected": d["totals"]["expected"], "received_in_window": d["totals"]["received_in_window"],
        "missing": d["totals"]["missing"],
        "delivery_p50_ms": lat["delivery"]["p50_us"] / 1e3, "delivery_p99_ms": lat["delivery"]["p99_us"] / 1e3,
        "delivery_max_ms": lat["delivery"]["max_us"] / 1e3, "delivery_samples": lat["delivery"]["count"],
        "subscribe_p50_ms": lat["subscribe"]["p50_us"] / 1e3, "subscribe_p99_ms": lat["subscribe"]["p99_us"] / 1e3,
        "bench_workers": r["plan"]["workers"], "command": r["command"],
        "server_memory": r.get("memory", {}).get("server"),
        "listen_overflows": int(open(f"{tmp}/{label}.overflows").read()),
    }
rows = [{"round": i, "serve": fig(f"serve-{i}"), "floor": fig(f"floor-{i}")} for i in range(1, rounds + 1)]
for row in rows:
    row["p99_ratio_serve_over_floor"] = row["serve"]["delivery_p99_ms"] / row["floor"]["delivery_p99_ms"]
last = json.load(open(f"{tmp}/serve-{rounds}.json"))
env = last["environment"]
doc = {"date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), "n": n,
       "serve_command": f"c1m serve {sargs}", "serve_workers": int(w),
       "floor_command": f"fanout_floor 127.0.0.1 PORT {w}", "rounds": rows,
       "environment": env,
       "last_round_reports": {"serve": last, "floor": json.load(open(f"{tmp}/floor-{rounds}.json"))}}
json.dump(doc, open(out, "w"), indent=1)
print(f"\n# one message to {n:,} SSE subscribers: c1m serve vs C floor ({doc['date_utc']})")
print(f"serve: c1m serve {sargs} ({w} workers); floor: bench/fanout_floor.c, {w} processes")
print(f"bench: {rows[0]['serve']['command']}")
print(f"env:   kernel {env.get('kernel')}, {env.get('cpus')} CPUs, {env.get('mem_total_bytes',0)/2**30:.1f} GiB")
print("| round | server | online | published | delivered / expected | delivery p50 | **p99** | max | subscribe ramp | subscribe p99 | listen overflows | errors |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for row in rows:
    for k in ("serve", "floor"):
        f = row[k]
        print(f"| {row['round']} | {k} | {f['online_at_end']:,} | {f['published']} | {f['received_in_window']:,} / {f['expected']:,} "
              f"(missing {f['missing']}) | {f['delivery_p50_ms']:.0f} ms | **{f['delivery_p99_ms']:.0f} ms** | {f['delivery_max_ms']:.0f} ms "
              f"| {f['open_rate_avg']:,.0f}/s ({f['ramp_s']:.1f} s) | {f['subscribe_p99_ms']:.1f} ms | {f['listen_overflows']} | {f['errors_total']} |")
ratios = [r["p99_ratio_serve_over_floor"] for r in rows]
print("p99 ratio serve/floor per round: " + ", ".join(f"{x:.2f}" for x in ratios)
      + f"; median {statistics.median(ratios):.2f} (budget ≤ 1.30: {'met' if statistics.median(ratios) <= 1.3 else 'NOT met'})")
sr = [r["serve"]["open_rate_avg"] for r in rows]
print("serve subscribe rate per round: " + ", ".join(f"{x:,.0f}/s" for x in sr)
      + f" (budget ≥ 25,000/s: {'met' if min(sr) >= 25000 else 'NOT met'}); floor: "
      + ", ".join(f"{r['floor']['open_rate_avg']:,.0f}/s" for r in rows))
PY
