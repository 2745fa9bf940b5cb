#!/usr/bin/env bash
# peers.sh: c1m serve beside nginx + nchan (Debian's nginx-light + libnginx-mod-nchan), the same
# `c1m bench` command against each, in the same run, one scenario after the other:
#   fanout   : N SSE subscribers on one channel, one message every EVERY (fan-out latency);
#   channels : CHANNELS channels × k subscribers, round-robin publishing as fast as acks come.
# Both servers get POST /pub/{ch} and GET /sub/{ch} (c1m's own paths; nchan is configured with
# the same ones by bench/lib.sh start_nchan), so the bench command differs only in nothing.
# Server memory is measured the same way for both: PSS of the server's process tree (master +
# workers) at its peak during the run minus before it, per subscriber (user memory; kernel
# socket buffers are not in PSS).
#
# Usage: bench/peers.sh [FANOUT_N] [CHANNEL_SUBSCRIBERS]   (defaults 190000, 80000)
# Env: CHANNELS (40000), RATE (40000 new connections/s), HOLD (20s) / EVERY (5s) / DRAIN (6s)
# for fanout, CHOLD (15s) / PUBLISHERS (4) for channels, PORT (18480), SERVERS ("c1m nchan"),
# C1M (binary; built when unset).
# Writes bench/out/peers.json (figures + both reports per run) and bench/out/peers.md (table).
set -euo pipefail
FANOUT_N=${1:-190000}
CHAN_SUBS=${2:-80000}
CHANNELS=${CHANNELS:-40000}
RATE=${RATE:-40000}
HOLD=${HOLD:-20s}
EVERY=${EVERY:-5s}
DRAIN=${DRAIN:-6s}
CHOLD=${CHOLD:-15s}
PUBLISHERS=${PUBLISHERS:-4}
PORT=${PORT:-18480}
SERVERS=${SERVERS:-"c1m nchan"}
source "$(dirname "$0")/lib.sh"
c1m_binary
ensure_nchan
TMP=$(mktemp -d)
on_exit "rm -rf '$TMP'"
SERVER_PID=""

start_server() { # NAME CONNS
    case $1 in
    c1m)
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

run_one() { # SCENARIO SERVER CONNS BENCH-ARGS...
    local scen=$1 name=$2 conns=$3
    shift 3
    echo "== $scen · $name: c1m bench $*" >&2
    start_server "$name" "$conns"
    sleep 1
    local base peak p bpid
    base=$(tree_pss "$SERVER_PID")
    peak=$base
    timeout 600 "$C1M" bench "$@" --interval 5s --report "$TMP/$scen-$name.json" \
        >"$TMP/$scen-$name.txt" 2>&1 &
    bpid=$!
    while kill -0 "$bpid" 2>/dev/null; do
        p=$(tree_pss "$SERVER_PID")
        [ "$p" -gt "$peak" ] && peak=$p
        sleep 1
    done
    wait "$bpid" || true
    echo "$base $peak" >"$TMP/$scen-$name.pss"
    sed -n '/^c1m bench/,$p' "$TMP/$scen-$name.txt" >&2
    stop_pid "$SERVER_PID" 20
    SERVER_PID=""
    sleep 2
}

URL="http://127.0.0.1:$PORT/sub/{ch}"
PUB="http://127.0.0.1:$PORT/pub/{ch}"
for s in $SERVERS; do
    run_one fanout "$s" "$FANOUT_N" "$URL" --scenario fanout --conns "$FANOUT_N" --rate "$RATE" \
        --hold "$HOLD" --publish-every "$EVERY" --drain "$DRAIN" --publish-url "$PUB"
done
for s in $SERVERS; do
    run_one channels "$s" "$CHAN_SUBS" "$URL" --scenario channels --channels "$CHANNELS" \
        --conns "$CHAN_SUBS" --rate "$RATE" --hold "$CHOLD" --publishers "$PUBLISHERS" --publish-url "$PUB"
done

python3 - "$TMP" "$OUT" "$SERVERS" <<'PY'
import datetime, json, sys
tmp, out, servers = sys.argv[1], sys.argv[2], sys.argv[3].split()
rows, reports = {}, {}
for scen in ("fanout", "channels"):
    for s in servers:
        r = json.load(open(f"{tmp}/{scen}-{s}.json"))
        base, peak = map(int, open(f"{tmp}/{scen}-{s}.pss").read().split())
        res, d, sc = r["result"], r["delivery"]["totals"], r["scenario"] or {}
        online = res["peak_online"]
        rows[(scen, s)] = {
            "online": online, "conns": r["plan"]["conns"],
            "subscribe_rate": res["open_rate_avg"] or 0.0,
            "bytes_per_conn": (peak - base) / online if online else None,
            "server_pss_base": base, "server_pss_peak": peak,
            "p99_ms": (sc.get("fanout_p99_us") or sc.get("delivery_p99_us") or 0) / 1e3,
            "p50_ms": (sc.get("fanout_p50_us") or sc.get("delivery_p50_us") or 0) / 1e3,
            "publish_rate": sc.get("publish_rate_per_s"),
            "published": r["publishing"]["published"],
            "expected": d["expected"], "missing": d["missing"], "duplicates": d["duplicates"],
            "errors": r["errors_total"], "success": res["success"], "command": r["command"],
        }
        reports[f"{scen}-{s}"] = r
env = reports[next(iter(reports))]["environment"]
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
json.dump({"date_utc": date, "rows": {f"{k[0]}-{k[1]}": v for k, v in rows.items()}, "reports": reports},
          open(f"{out}/peers.json", "w"), indent=1)
def f(v, fmt):
    return "n/a" if v is None else format(v, fmt)
lines = [f"Run {date}; kernel {env.get('kernel')}, {env.get('cpus')} CPUs, "
         f"{env.get('mem_total_bytes', 0) / 2**30:.1f} GiB; servers and bench on one box over loopback.", "",
         "| scenario | server | online | subscribe rate | server user B/conn | p50 | p99 | publish rate (acked) | delivered / expected (missing) | errors |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for (scen, s), v in rows.items():
    lines.append(f"| {scen} | {s} | {v['online']:,} / {v['conns']:,} | {v['subscribe_rate']:,.0f}/s | {f(v['bytes_per_conn'], ',.0f')} "
                 f"| {v['p50_ms']:.1f} ms | {v['p99_ms']:.1f} ms | {f(v['publish_rate'], ',.0f') + '/s' if v['publish_rate'] else '—'} "
                 f"| {v['expected'] - v['missing']:,} / {v['expected']:,} ({v['missing']:,}) | {v['errors']:,} |")
if "c1m" in servers and "nchan" in servers:
    lines += ["", "Ratios c1m ÷ nchan (subscribe and publish rate: higher is better for c1m above 1; "
              "bytes per connection and p99: lower is better for c1m below 1):", "",
              "| scenario | subscribe rate | user B/conn | p99 | publish rate |", "|---|---|---|---|---|"]
    for scen in ("fanout", "channels"):
        a, b = rows[(scen, "c1m")], rows[(scen, "nchan")]
        def ratio(x, y):
            return "n/a" if not x or not y else f"{x / y:.2f}"
        lines.append(f"| {scen} | {ratio(a['subscribe_rate'], b['subscribe_rate'])} | {ratio(a['bytes_per_conn'], b['bytes_per_conn'])} "
                     f"| {ratio(a['p99_ms'], b['p99_ms'])} | {ratio(a['publish_rate'], b['publish_rate']) if scen == 'channels' else '—'} |")
lines += ["", "Commands (identical for both servers; PORT differs only by run):", ""]
for (scen, s), v in rows.items():
    if s == servers[0]:
        lines.append(f"    {v['command']}")
open(f"{out}/peers.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
