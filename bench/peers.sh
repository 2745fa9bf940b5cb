#!/usr/bin/env bash
# peers.sh: c1m serve beside nginx + nchan (Debian's nginx-light + libnginx-mod-nchan), the same
# `c1m bench` command against each, in the same run, one scenario after the other:
#   fanout   : N SSE subscribers on one channel, one message every EVERY (fan-out latency);
#   channels : CHANNELS channels × k subscribers, round-robin publishing as fast as acks come;
#   rooms    : ROOMS rooms × ROOM_SIZE subscribers (chat rooms), the same publishing; runs
#              only when SCENARIOS names it (200,000 connections by default).
# Servers: c1m, nchan, and c1m-batch: c1m serve again, its publishers sending BATCH messages per
# request through the server API's batch call (`c1m bench --publish-batch`; channels and rooms
# only, a fan-out publishes one message at a time).
# Both servers get POST /pub/{ch} and GET /sub/{ch} (c1m's own paths; nchan is configured with
# the same ones by bench/lib.sh start_nchan), so the bench command differs only in nothing.
# Server memory is measured the same way for both: PSS of the server's process tree (master +
# workers) at its peak during the run minus before it, per subscriber (user memory; kernel
# socket buffers are not in PSS). Server CPU per delivered message is measured the same way
# too: utime + stime of the server's process tree, sampled every second, over the publish
# phase only (from the first to the last second of bench's timeline with a delivery), divided
# by the messages delivered in it.
#
# ROUNDS rounds, each running every server once per scenario, alternating, so a box whose load
# changes during the run (it is shared) treats both alike; the table lists every round.
#
# Usage: bench/peers.sh [FANOUT_N] [CHANNEL_SUBSCRIBERS]   (defaults 190000, 80000)
# Env: CHANNELS (40000), RATE (40000 new connections/s), HOLD (30s) / EVERY (5s) / DRAIN (12s:
# no publish in the last DRAIN of the hold, so the slower server's last fan-out still lands)
# for fanout, CHOLD (15s) / PUBLISHERS (4) for channels and rooms, ROOMS (10000) / ROOM_SIZE
# (20), SCENARIOS ("fanout channels"), ROUNDS (2), PORT (18480), SERVERS ("c1m nchan"; add
# c1m-batch), BATCH (100), PUB_RATE (channels and rooms: publish this many messages a second,
# open loop, instead of as fast as acks come: delivery latency at a load both servers carry,
# where the closed loop's figure mostly says how far the faster server outruns the client's
# subscribers on the same CPUs), C1M (binary; built when unset).
# Writes bench/out/peers.json (figures + both reports per run) and bench/out/peers.md (table).
set -euo pipefail
FANOUT_N=${1:-190000}
CHAN_SUBS=${2:-80000}
CHANNELS=${CHANNELS:-40000}
RATE=${RATE:-40000}
HOLD=${HOLD:-30s}
EVERY=${EVERY:-5s}
DRAIN=${DRAIN:-12s}
ROUNDS=${ROUNDS:-2}
CHOLD=${CHOLD:-15s}
PUBLISHERS=${PUBLISHERS:-4}
PORT=${PORT:-18480}
SERVERS=${SERVERS:-"c1m nchan"}
SCENARIOS=${SCENARIOS:-"fanout channels"}
ROOMS=${ROOMS:-10000}
ROOM_SIZE=${ROOM_SIZE:-20}
BATCH=${BATCH:-100}
PUB_RATE=${PUB_RATE:-}
source "$(dirname "$0")/lib.sh"
c1m_binary
ensure_nchan
TMP=$(mktemp -d)
on_exit "rm -rf '$TMP'"
SERVER_PID=""
RUN_NO=0

start_server() { # NAME CONNS
    case $1 in
    c1m | c1m-batch)
        start_serve "$TMP/serve.log" --listen "127.0.0.1:$PORT" --max-conns $(($2 * 3 / 2))
        SERVER_PID=$SERVE_PID
        wait_http "127.0.0.1:$PORT" 20
        ;;
    nchan)
        # One worker per 18,000 connections (nofile is 20,000 per process), at least 2.
        local w=$(($2 / 18000 + 1))
        [ "$w" -ge 2 ] || w=2
        rm -rf "$TMP/nchan"
        start_nchan "$TMP/nchan" "$PORT" "$w"
        SERVER_PID=$NCHAN_PID
        wait_port 127.0.0.1 "$PORT" 20
        ;;
    esac
}

run_one() { # ROUND SCENARIO SERVER CONNS BENCH-ARGS...
    local round=$1 scen=$2 name=$3 conns=$4 label="$2-$3-$1"
    shift 4
    echo "== round $round · $scen · $name: c1m bench $*" >&2
    start_server "$name" "$conns"
    sleep 1
    local base peak p bpid
    # Each run its own 20 source addresses (127.(10+k).0.2-21): the previous run's closed
    # connections sit in TIME_WAIT for 60 s and would leave too few free ports on shared
    # sources (seen: EADDRNOTAVAIL and a ramp that never finished).
    RUN_NO=$((RUN_NO + 1))
    local src="127.$((10 + RUN_NO)).0.2-127.$((10 + RUN_NO)).0.21"
    base=$(tree_pss "$SERVER_PID")
    peak=$base
    local t0
    t0=$(date +%s.%N)
    : >"$TMP/$label.cpu"
    timeout 600 "$C1M" bench "$@" --source "$src" --duration 300s --interval 5s --report "$TMP/$label.json" \
        >"$TMP/$label.txt" 2>&1 &
    bpid=$!
    while kill -0 "$bpid" 2>/dev/null; do
        p=$(tree_pss "$SERVER_PID")
        [ "$p" -gt "$peak" ] && peak=$p
        echo "$(date +%s.%N) $t0 $(tree_cpu_ticks "$SERVER_PID")" >>"$TMP/$label.cpu"
        sleep 1
    done
    wait "$bpid" || true
    echo "$base $peak $(cut -d' ' -f1 /proc/loadavg)" >"$TMP/$label.pss"
    sed -n '/^c1m bench/,$p' "$TMP/$label.txt" >&2
    stop_pid "$SERVER_PID" 20
    SERVER_PID=""
    sleep 2
}

URL="http://127.0.0.1:$PORT/sub/{ch}"
PUB="http://127.0.0.1:$PORT/pub/{ch}"
wants() { [[ " $SCENARIOS " == *" $1 "* ]]; }
publish_args() { # SERVER: how that server's runs publish
    if [ "$1" = c1m-batch ]; then
        echo --publish-batch "$BATCH" --publish-url "http://127.0.0.1:$PORT/api/batch"
    else
        echo --publish-url "$PUB"
    fi
    if [ -n "$PUB_RATE" ]; then echo --publish-rate "$PUB_RATE"; fi
}
for round in $(seq "$ROUNDS"); do
    wants fanout && for s in $SERVERS; do
        [ "$s" = c1m-batch ] && continue
        run_one "$round" fanout "$s" "$FANOUT_N" "$URL" --scenario fanout --conns "$FANOUT_N" \
            --rate "$RATE" --hold "$HOLD" --publish-every "$EVERY" --drain "$DRAIN" --publish-url "$PUB"
    done
    wants channels && for s in $SERVERS; do
        run_one "$round" channels "$s" "$CHAN_SUBS" "$URL" --scenario channels --channels "$CHANNELS" \
            --conns "$CHAN_SUBS" --rate "$RATE" --hold "$CHOLD" --publishers "$PUBLISHERS" $(publish_args "$s")
    done
    # Rooms: the channels scenario with ROOM_SIZE subscribers on each of ROOMS channels.
    wants rooms && for s in $SERVERS; do
        run_one "$round" rooms "$s" $((ROOMS * ROOM_SIZE)) "$URL" --scenario channels --channels "$ROOMS" \
            --conns $((ROOMS * ROOM_SIZE)) --rate "$RATE" --hold "$CHOLD" --publishers "$PUBLISHERS" $(publish_args "$s")
    done
done

python3 - "$TMP" "$OUT" "$SERVERS" "$ROUNDS" "$SCENARIOS" "$(getconf CLK_TCK)" <<'PY'
import datetime, json, statistics, sys
tmp, out, servers, rounds = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4])
scenarios, hz = sys.argv[5].split(), int(sys.argv[6])

def cpu_per_delivered_us(label, timeline):
    """Server CPU (µs) over the publish phase / messages delivered in it, or None."""
    busy = [p for p in timeline if p["delivered"] > 0]
    samples = []
    for line in open(f"{tmp}/{label}.cpu"):
        now, t0, ticks = line.split()
        samples.append((float(now) - float(t0), int(ticks) * 1e6 / hz))
    if len(busy) < 2 or len(samples) < 2:
        return None
    # The first busy second's deliveries began during the second before it.
    start = busy[0]["t_s"] - (busy[1]["t_s"] - busy[0]["t_s"])
    end = busy[-1]["t_s"]
    def cpu_at(t):
        for (ta, ca), (tb, cb) in zip(samples, samples[1:]):
            if ta <= t <= tb:
                return ca + (cb - ca) * (t - ta) / (tb - ta) if tb > ta else ca
        return samples[0][1] if t < samples[0][0] else samples[-1][1]
    delivered = sum(p["delivered"] for p in busy)
    return (cpu_at(end) - cpu_at(start)) / delivered if delivered else None

rows, reports = {}, {}
for scen in [s for s in ("fanout", "channels", "rooms") if s in scenarios]:
  for rnd in range(1, rounds + 1):
    for s in servers:
        if scen == "fanout" and s == "c1m-batch":
            continue
        r = json.load(open(f"{tmp}/{scen}-{s}-{rnd}.json"))
        base, peak, load = open(f"{tmp}/{scen}-{s}-{rnd}.pss").read().split()
        base, peak = int(base), int(peak)
        res, d, sc = r["result"], r["delivery"]["totals"], r["scenario"] or {}
        online = res["peak_online"]
        rows[(scen, s, rnd)] = {
            "round": rnd, "load1_after": float(load),
            "online": online, "conns": r["plan"]["conns"],
            "subscribe_rate": res["open_rate_avg"] or 0.0,
            "bytes_per_conn": (peak - base) / online if online else None,
            "server_pss_base": base, "server_pss_peak": peak,
            "p99_ms": (sc.get("fanout_p99_us") or sc.get("delivery_p99_us") or 0) / 1e3,
            "p50_ms": (sc.get("fanout_p50_us") or sc.get("delivery_p50_us") or 0) / 1e3,
            "publish_rate": sc.get("publish_rate_per_s"),
            "cpu_us_per_delivered": cpu_per_delivered_us(f"{scen}-{s}-{rnd}", r.get("timeline") or []),
            "published": r["publishing"]["published"],
            "expected": d["expected"], "missing": d["missing"], "duplicates": d["duplicates"],
            "errors": r["errors_total"], "success": res["success"], "command": r["command"],
        }
        reports[f"{scen}-{s}-{rnd}"] = r
env = reports[next(iter(reports))]["environment"]
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
json.dump({"date_utc": date, "rows": {f"{k[0]}-{k[1]}-{k[2]}": v for k, v in rows.items()}, "reports": reports},
          open(f"{out}/peers.json", "w"), indent=1)
def f(v, fmt):
    return "n/a" if v is None else format(v, fmt)
lines = [f"Run {date}; kernel {env.get('kernel')}, {env.get('cpus')} CPUs, "
         f"{env.get('mem_total_bytes', 0) / 2**30:.1f} GiB; servers and bench on one box over loopback.", "",
         "| scenario | round | server | online | subscribe rate | server user B/conn | p50 | p99 | publish rate (acked) | server CPU µs / delivered | delivered / expected (missing) | errors | load1 after |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for (scen, s, rnd), v in rows.items():
    lines.append(f"| {scen} | {rnd} | {s} | {v['online']:,} / {v['conns']:,} | {v['subscribe_rate']:,.0f}/s | {f(v['bytes_per_conn'], ',.0f')} "
                 f"| {v['p50_ms']:.1f} ms | {v['p99_ms']:.1f} ms | {f(v['publish_rate'], ',.0f') + '/s' if v['publish_rate'] else '—'} | {f(v['cpu_us_per_delivered'], '.2f')} "
                 f"| {v['expected'] - v['missing']:,} / {v['expected']:,} ({v['missing']:,}) | {v['errors']:,} | {v['load1_after']:.1f} |")
if "c1m" in servers and "nchan" in servers:
    lines += ["", "Ratios c1m ÷ nchan, median over rounds of each round's ratio (subscribe and publish rate: "
              "above 1 is better for c1m; bytes per connection, p99 and CPU per delivered message: "
              "below 1 is better for c1m):", "",
              "| scenario | subscribe rate | user B/conn | p99 | publish rate | server CPU / delivered |",
              "|---|---|---|---|---|---|"]
    def ratio(key, scen, ours="c1m"):
        xs = []
        for rnd in range(1, rounds + 1):
            if (scen, ours, rnd) not in rows:
                continue
            a, b = rows[(scen, ours, rnd)][key], rows[(scen, "nchan", rnd)][key]
            if a and b:
                xs.append(a / b)
        return "n/a" if not xs else f"{statistics.median(xs):.2f} ({', '.join(f'{x:.2f}' for x in xs)})"
    for scen in [s for s in ("fanout", "channels", "rooms") if s in scenarios]:
        lines.append(f"| {scen} | {ratio('subscribe_rate', scen)} | {ratio('bytes_per_conn', scen)} "
                     f"| {ratio('p99_ms', scen)} | {ratio('publish_rate', scen) if scen != 'fanout' else '—'} "
                     f"| {ratio('cpu_us_per_delivered', scen)} |")
        if "c1m-batch" in servers and scen != "fanout":
            lines.append(f"| {scen}, c1m-batch | {ratio('subscribe_rate', scen, 'c1m-batch')} "
                         f"| {ratio('bytes_per_conn', scen, 'c1m-batch')} | {ratio('p99_ms', scen, 'c1m-batch')} "
                         f"| {ratio('publish_rate', scen, 'c1m-batch')} | {ratio('cpu_us_per_delivered', scen, 'c1m-batch')} |")
lines += ["", "Commands (identical for both servers; PORT differs only by run):", ""]
for (scen, s, rnd), v in rows.items():
    if s == servers[0] and rnd == 1:
        lines.append(f"    {v['command']}")
open(f"{out}/peers.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
