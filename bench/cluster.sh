#!/usr/bin/env bash
# cluster.sh: c1m as a cluster on this box (3 `c1m serve --broker redis://…` nodes +
# redis-server + HAProxy) beside one node with the in-process hub, same client, same run.
#
#   1. fan-out: N SSE subscribers on one channel; one message every EVERY; delivery p99
#      (publisher's send time to subscriber's parse time). Single node: one bench against one
#      node. Cluster: three benches at once, N/3 subscribers each on nodes A, B, C, only the one
#      on A publishes (so B and C see messages published on another node); the cluster p99 is
#      the worst of the three benches' p99s.
#   2. many channels: M subscribers on M channels (one each), publishes at PRATE/s round-robin
#      over the channels by PUBLISHERS connections; achieved rate = acknowledged publishes /
#      publishing time. Cluster: three benches, M/3 channels each (distinct names), each
#      publishing PRATE/3 to its own node.
#   3. killed node: K SSE subscribers through HAProxy (`balance first`: all land on B) with
#      --reconnect (Last-Event-ID), publishes through HAProxy every second; kill -9 of B; time
#      until C holds all K again, and the bench's verdict (missing, duplicates) at the end.
#
# REDIS=single (default): the nodes share one redis-server. REDIS=cluster: a Redis Cluster of 3
# masters (redis+cluster://, ids per channel, sharded pub/sub). REDIS=both: phases 1-3 run
# against one Redis and then against the Redis Cluster in the same run, so the cluster's figures
# stand beside one Redis' (ratios) as well as beside the single node's.
#
# Usage: bench/cluster.sh [N] [M] [K]   (defaults 150000 40000 8000; K is bounded by HAProxy's
# own fd limit here: it holds two sockets per client under RLIMIT_NOFILE 20000)
# Env: EVERY (5s), HOLD (25s), PRATE (30000), PUBLISHERS (48: enough that the rate is not
# bound by one publisher's round trips), RATE (20000 subscribes/s),
# PORT0 (18500: nodes on PORT0+1..3, single node on PORT0+4, HAProxy PORT0+5, Redis PORT0+6;
# Redis Cluster masters on PORT0+6..8, their bus ports 100 above).
# Writes bench/out/cluster.json (all figures and the raw bench reports) and prints a summary.
set -euo pipefail
N=${1:-150000}
M=${2:-40000}
K=${3:-8000}
EVERY=${EVERY:-5s}
HOLD=${HOLD:-25s}
PRATE=${PRATE:-30000}
PUBLISHERS=${PUBLISHERS:-48}
RATE=${RATE:-20000}
PORT0=${PORT0:-18500}
REDIS=${REDIS:-single}
case "$REDIS" in
single) MODES=(single) ;;
cluster) MODES=(cluster) ;;
both) MODES=(single cluster) ;;
*) echo "REDIS must be single, cluster or both" >&2; exit 2 ;;
esac
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary, start_serve, wait_http, stop_pid
c1m_binary
TMP=$(mktemp -d)
on_exit "rm -rf '$TMP'"
REDIS_PORT=$((PORT0 + 6))
LB_PORT=$((PORT0 + 5))
SINGLE_PORT=$((PORT0 + 4))

sse_on() { timeout 5 curl -s "http://127.0.0.1:$1/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"]["sse"])' 2>/dev/null || echo 0; }

# Each bench run gets its own block of loopback source addresses (127.0.SRC.1-20): ports in
# TIME_WAIT from an earlier phase (or another program's benchmark) then cannot collide with it.
LABELS=(single-fanout single-many)
for mode in "${MODES[@]}"; do
    LABELS+=("$mode-fanout-a" "$mode-fanout-b" "$mode-fanout-c" "$mode-many-1" "$mode-many-2"
        "$mode-many-3" "$mode-kill")
done
bench() { # label url conns extra-args...
    local label=$1 url=$2 conns=$3 SRC=10 i
    shift 3
    for i in "${!LABELS[@]}"; do [ "${LABELS[$i]}" = "$label" ] && SRC=$((11 + i)); done
    timeout 900 "$C1M" bench "$url" --proto sse --conns "$conns" --rate "$RATE" --hold "$HOLD" \
        --source "127.0.$SRC.1-127.0.$SRC.20" \
        --interval 10s -q --report "$TMP/$label.json" "$@" >"$TMP/$label.txt" 2>&1 || true
    # Kept as they come, so a run stopped half-way still leaves its figures.
    mkdir -p "$OUT/cluster-runs"
    cp "$TMP/$label.json" "$TMP/$label.txt" "$OUT/cluster-runs/" 2>/dev/null || true
}

redis_up() { # port
    for _ in $(seq 50); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "redis-server on $1 did not start" >&2
    return 1
}

start_redis() { # MODE: sets BROKER_URL and REDIS_PIDS
    REDIS_PIDS=()
    if [ "$1" = single ]; then
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$TMP" --maxclients 1000 >"$TMP/redis.log" 2>&1 &
        REDIS_PIDS+=($!)
        track_pid $!
        redis_up "$REDIS_PORT"
        BROKER_URL="redis://127.0.0.1:$REDIS_PORT"
        return
    fi
    local i port addrs=()
    for i in 0 1 2; do
        port=$((REDIS_PORT + i))
        mkdir -p "$TMP/rc$i"
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$TMP/rc$i" --maxclients 1000 --cluster-enabled yes \
            --cluster-config-file nodes.conf --cluster-port $((port + 100)) \
            >"$TMP/rc$i.log" 2>&1 &
        REDIS_PIDS+=($!)
        track_pid $!
        addrs+=("127.0.0.1:$port")
    done
    for i in 0 1 2; do redis_up $((REDIS_PORT + i)); done
    redis-cli --cluster create "${addrs[@]}" --cluster-yes >"$TMP/rc-create.log" 2>&1
    for _ in $(seq 100); do
        local ok=0
        for i in 0 1 2; do
            redis-cli -p $((REDIS_PORT + i)) cluster info | grep -q cluster_state:ok && ok=$((ok + 1))
        done
        [ "$ok" = 3 ] && break
        sleep 0.1
    done
    BROKER_URL="redis+cluster://$(IFS=,; echo "${addrs[*]}")"
}

stop_redis() {
    for pid in "${REDIS_PIDS[@]}"; do stop_pid "$pid"; done
    rm -rf "$TMP"/rc?
}

start_nodes() { # sets NODE_PIDS (A B C)
    NODE_PIDS=()
    for i in 1 2 3; do
        # Each node is sized for its third (its worker count follows, as the single node's
        # follows N): the same CPU split between more processes would favour neither side.
        start_serve "$TMP/node$i.log" --listen "127.0.0.1:$((PORT0 + i))" --max-conns $((N / 3 + K)) \
            --broker "$BROKER_URL"
        NODE_PIDS+=("$SERVE_PID")
    done
    for i in 1 2 3; do wait_http "127.0.0.1:$((PORT0 + i))" 20; done
    sleep 2
}

stop_nodes() {
    for pid in "${NODE_PIDS[@]}"; do stop_pid "$pid"; done
}

echo "== single node, in-process hub"
start_serve "$TMP/single.log" --listen "127.0.0.1:$SINGLE_PORT" --max-conns "$N"
SINGLE_PID=$SERVE_PID
wait_http "127.0.0.1:$SINGLE_PORT" 20
sleep 2
bench single-fanout "http://127.0.0.1:$SINGLE_PORT/sub/fan" "$N" --channels 1 --publish-every "$EVERY" --drain 6s
sleep 2
bench single-many "http://127.0.0.1:$SINGLE_PORT/sub/mc" "$M" --channels "$M" \
    --publish-rate "$PRATE" --publishers "$PUBLISHERS" --drain 3s
stop_pid "$SINGLE_PID"
sleep 3

run_phases() { # MODE
local MODE=$1
echo "== cluster ($MODE): redis + 3 nodes"
start_redis "$MODE"
start_nodes
PER=$((N / 3))
# B's and C's subscribers are all online before A's bench (the publisher) starts, and they
# hold until after A's last message.
LONG_HOLD="$(( ${HOLD%s} + PER / RATE + 20 ))s"
HOLD=$LONG_HOLD bench $MODE-fanout-b "http://127.0.0.1:$((PORT0 + 2))/sub/fan" "$PER" --channels 1 &
B2=$!
HOLD=$LONG_HOLD bench $MODE-fanout-c "http://127.0.0.1:$((PORT0 + 3))/sub/fan" "$PER" --channels 1 &
B3=$!
for _ in $(seq 1200); do
    [ "$(sse_on $((PORT0 + 2)))" -ge "$PER" ] && [ "$(sse_on $((PORT0 + 3)))" -ge "$PER" ] && break
    sleep 0.1
done
bench $MODE-fanout-a "http://127.0.0.1:$((PORT0 + 1))/sub/fan" "$PER" --channels 1 --publish-every "$EVERY" --drain 6s
wait "$B2" "$B3"
sleep 2
MPER=$((M / 3))
for i in 1 2 3; do
    bench "$MODE-many-$i" "http://127.0.0.1:$((PORT0 + i))/sub/mc$i" "$MPER" --channels "$MPER" \
        --publish-rate $((PRATE / 3)) --publishers $((PUBLISHERS / 3)) --drain 3s &
    eval "MB$i=\$!"
done
wait "$MB1" "$MB2" "$MB3"
for i in 1 2 3; do
    timeout 5 curl -s "http://127.0.0.1:$((PORT0 + i))/status" >"$TMP/$MODE-node$i-status.json" || true
done
stop_nodes
sleep 2

echo "== killed node: $K subscribers through HAProxy"
start_nodes
cat >"$TMP/haproxy.cfg" <<EOF
global
  maxconn $((K + 100))
defaults
  mode http
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  timeout tunnel 1h
  option redispatch
  retries 3
frontend edge
  bind 127.0.0.1:$LB_PORT
  default_backend nodes
backend nodes
  balance first
  option httpchk GET /healthz
  http-check expect status 200
  default-server check inter 200ms fall 1 rise 2 maxconn $((K + 100))
  server b 127.0.0.1:$((PORT0 + 2))
  server c 127.0.0.1:$((PORT0 + 3))
EOF
haproxy -c -f "$TMP/haproxy.cfg" >/dev/null
haproxy -db -f "$TMP/haproxy.cfg" >"$TMP/haproxy.log" 2>&1 &
HAPROXY_PID=$!
track_pid "$HAPROXY_PID"
wait_http "127.0.0.1:$LB_PORT" 10 || { cat "$TMP/haproxy.log" >&2; exit 1; }
HOLD=40s bench $MODE-kill "http://127.0.0.1:$LB_PORT/sub/k" "$K" --channels 1 --publish-every 1s \
    --reconnect --reconnect-min 50ms --reconnect-max 1s --drain 5s &
KB=$!
for _ in $(seq 600); do [ "$(sse_on $((PORT0 + 2)))" -ge "$K" ] && break; sleep 0.1; done
echo "B holds $(sse_on $((PORT0 + 2))) subscribers; killing it (kill -9) in 5 s"
sleep 5
T0=$(date +%s.%N)
kill -KILL "${NODE_PIDS[1]}"
BACK=""
for _ in $(seq 600); do
    if [ "$(sse_on $((PORT0 + 3)))" -ge "$K" ]; then BACK=$(echo "$(date +%s.%N) - $T0" | bc); break; fi
    sleep 0.05
done
echo "all $K back on C after ${BACK:-never} s"
echo "${BACK:-null}" >"$TMP/$MODE-kill-back-s"
wait "$KB"
stop_nodes
stop_pid "$HAPROXY_PID"
stop_redis

}

for mode in "${MODES[@]}"; do
    run_phases "$mode"
    sleep 2
done

python3 - "$TMP" "$OUT/cluster.json" "$N" "$M" "$K" "${MODES[@]}" <<'PY'
import json, sys, datetime
tmp, out, n, m, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
modes = sys.argv[6:]
def rep(label): return json.load(open(f"{tmp}/{label}.json"))
def fan(r):
    d, lat = r["delivery"]["totals"], r["latency_us"]["delivery"]
    return {"online": r["result"]["online_at_end"], "published": r["publishing"]["published"],
            "received": d["received"], "duplicates": d["duplicates"], "reordered": d["reordered"],
            "missing": d["missing"], "server_gaps": d["server_gaps"],
            "p50_ms": lat["p50_us"] / 1e3, "p99_ms": lat["p99_us"] / 1e3, "max_ms": lat["max_us"] / 1e3,
            "samples": lat["count"], "command": r["command"]}
def rate(r):
    p = r["plan"]; pub_s = p["hold_s"] - 3.0
    return {"online": r["result"]["online_at_end"], "published": r["publishing"]["published"],
            "publish_errors": r["publishing"]["errors"], "publish_s": pub_s,
            "rate": r["publishing"]["published"] / pub_s,
            "ack_p99_ms": r["latency_us"]["publish_ack"]["p99_us"] / 1e3,
            "missing": r["delivery"]["totals"]["missing"], "duplicates": r["delivery"]["totals"]["duplicates"],
            "command": r["command"]}
single_fan = fan(rep("single-fanout"))
single_rate = rate(rep("single-many"))
doc = {"date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), "n": n, "m": m, "k": k,
       "single_node": {"fanout": single_fan, "many_channels": single_rate}, "modes": {}}
for mode in modes:
    cl_fan = {x: fan(rep(f"{mode}-fanout-{x}")) for x in "abc"}
    cl_p99 = max(v["p99_ms"] for v in cl_fan.values())
    cl_rates = [rate(rep(f"{mode}-many-{i}")) for i in (1, 2, 3)]
    cl_rate = sum(r["rate"] for r in cl_rates)
    kill = rep(f"{mode}-kill")
    kd = kill["delivery"]["totals"]
    back = open(f"{tmp}/{mode}-kill-back-s").read().strip()
    doc["environment"] = kill["environment"]
    doc["modes"][mode] = {
        "fanout": {"cluster": cl_fan, "cluster_p99_ms": cl_p99, "ratio": cl_p99 / single_fan["p99_ms"]},
        "many_channels": {"cluster": cl_rates, "cluster_rate": cl_rate, "ratio": cl_rate / single_rate["rate"]},
        "killed_node": {"back_s": None if back == "null" else float(back),
                        "missing": kd["missing"], "duplicates": kd["duplicates"], "reordered": kd["reordered"],
                        "server_gaps": kd["server_gaps"], "published": kill["publishing"]["published"],
                        "delivered_to_all": kill["delivery"]["delivered_to_all"], "command": kill["command"]}}
if "single" in doc["modes"] and "cluster" in doc["modes"]:
    s, c = doc["modes"]["single"], doc["modes"]["cluster"]
    doc["redis_cluster_vs_one_redis"] = {
        "fanout_p99_ratio": c["fanout"]["cluster_p99_ms"] / s["fanout"]["cluster_p99_ms"],
        "many_channels_rate_ratio": c["many_channels"]["cluster_rate"] / s["many_channels"]["cluster_rate"]}
json.dump(doc, open(out, "w"), indent=1)
print(f"\n# cluster vs single node ({doc['date_utc']})")
for mode, d in doc["modes"].items():
    f, mc, kn, cl_fan, cl_rates = d["fanout"], d["many_channels"], d["killed_node"], d["fanout"]["cluster"], d["many_channels"]["cluster"]
    print(f"## broker: {'one redis-server' if mode == 'single' else 'Redis Cluster, 3 masters'}")
    print(f"fan-out of one message to {n:,} SSE subscribers: single node p99 {single_fan['p99_ms']:.0f} ms "
          f"(online {single_fan['online']:,}); cluster p99 {f['cluster_p99_ms']:.0f} ms (A/B/C: "
          + ", ".join(f"{x} {v['p99_ms']:.0f} ms, online {v['online']:,}, received {v['received']:,}, dup {v['duplicates']}, reord {v['reordered']}"
                      for x, v in cl_fan.items())
          + f"); published {cl_fan['a']['published']} on A (B and C expect {cl_fan['a']['published'] * (n // 3):,} each); ratio {f['ratio']:.2f} (target ≤ 1.5: {'met' if f['ratio'] <= 1.5 else 'NOT met'})")
    print(f"publish rate to {m:,} channels, one subscriber each: single node {single_rate['rate']:,.0f}/s "
          f"(ack p99 {single_rate['ack_p99_ms']:.1f} ms, missing {single_rate['missing']}); cluster {mc['cluster_rate']:,.0f}/s ("
          + ", ".join(f"{r['rate']:,.0f}/s ack p99 {r['ack_p99_ms']:.1f} ms missing {r['missing']} dup {r['duplicates']}" for r in cl_rates)
          + f"); ratio {mc['ratio']:.2f} (target ≥ 0.5: {'met' if mc['ratio'] >= 0.5 else 'NOT met'})")
    print(f"killed node: {k:,} subscribers of B back on C after {kn['back_s']} s; published {kn['published']}; "
          f"missing {kn['missing']}, duplicates {kn['duplicates']}, reordered {kn['reordered']}, "
          f"server gaps {kn['server_gaps']}, delivered to all: {kn['delivered_to_all']}")
if "redis_cluster_vs_one_redis" in doc:
    r = doc["redis_cluster_vs_one_redis"]
    print(f"Redis Cluster vs one Redis, same run: fan-out p99 ratio {r['fanout_p99_ratio']:.2f}, "
          f"many-channel publish rate ratio {r['many_channels_rate_ratio']:.2f}")
PY
