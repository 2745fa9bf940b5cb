#!/usr/bin/env bash
# fleet.sh: `c1m bench --agents` with three agents beside the same load from one agent, on one
# machine, each "box" a network namespace this script creates: a server namespace (a bridge,
# `c1m serve`, the coordinator) and three agent namespaces, each with SOURCES addresses of its
# own on 10.213.9.0/24 and a `c1m bench-agent`. The same bench command runs with the three
# agents and with the first one alone, alternated ROUNDS times. Nothing leaves the namespaces;
# they are deleted on exit (their links and bridge with them).
#
# Usage: bench/fleet.sh [N]   (default 60000 subscribers on one channel)
# Env: ROUNDS (2), RATE (20000 new connections/s over all agents), HOLD (30s), EVERY (5s),
#      DRAIN (8s), SOURCES (4 source addresses per agent: one agent alone needs more than one
#      source's 28K ports for 60,000), C1M (binary; built when unset). Needs root (ip netns).
# Writes bench/out/fleet-N.json (each run's figures and both last reports) and prints a table.
set -euo pipefail
N=${1:-60000}
ROUNDS=${ROUNDS:-2}
RATE=${RATE:-20000}
HOLD=${HOLD:-30s}
EVERY=${EVERY:-5s}
DRAIN=${DRAIN:-8s}
SOURCES=${SOURCES:-4}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary
c1m_binary
TMP=$(mktemp -d)
TAG="c1mfleet$$"
SERVER_NS="${TAG}s"
SERVER_IP=10.213.9.1
PORT=18790
on_exit "rm -rf '$TMP'"
cleanup_ns() {
    local ns
    for ns in "$SERVER_NS" "${TAG}a0" "${TAG}a1" "${TAG}a2"; do
        # Processes first: a namespace with live processes stays until they exit.
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -TERM 2>/dev/null || true
    done
    sleep 1
    for ns in "$SERVER_NS" "${TAG}a0" "${TAG}a1" "${TAG}a2"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
}
on_exit cleanup_ns

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# --- the "boxes" ---
ip netns add "$SERVER_NS"
in_ns "$SERVER_NS" ip link set lo up
in_ns "$SERVER_NS" ip link add br0 type bridge
in_ns "$SERVER_NS" ip addr add "$SERVER_IP/24" dev br0
in_ns "$SERVER_NS" ip link set br0 up
agent_first_ip() { echo "10.213.9.$((20 + 10 * $1))"; }
agent_last_ip() { echo "10.213.9.$((20 + 10 * $1 + SOURCES - 1))"; }
for i in 0 1 2; do
    ns="${TAG}a$i"
    ip netns add "$ns"
    in_ns "$ns" ip link set lo up
    ip -n "$SERVER_NS" link add "p$i" type veth peer name "e$i" netns "$ns"
    ip -n "$SERVER_NS" link set "p$i" master br0
    ip -n "$SERVER_NS" link set "p$i" up
    for k in $(seq 0 $((SOURCES - 1))); do
        in_ns "$ns" ip addr add "10.213.9.$((20 + 10 * i + k))/24" dev "e$i"
    done
    in_ns "$ns" ip link set "e$i" up
    # A load box reuses its TIME-WAIT ports for new connections (this namespace's own
    # setting): back-to-back runs of 60,000 from one box otherwise run out of ports
    # (EADDRNOTAVAIL) while the last run's sockets wait out their 60 s.
    in_ns "$ns" sysctl -qw net.ipv4.tcp_tw_reuse=1
done
head -c 32 /dev/urandom | base64 >"$TMP/token"
KEY="fleet-bench-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"

# --- the server and the agents ---
in_ns "$SERVER_NS" "$C1M" serve --listen "$SERVER_IP:$PORT" --workers 4 --max-conns $((N * 3 / 2)) \
    --publish-key "$KEY" >"$TMP/serve.log" 2>&1 &
track_pid $!
AGENTS=()
for i in 0 1 2; do
    port=$((7070 + i))
    in_ns "${TAG}a$i" "$C1M" bench-agent --listen "$(agent_first_ip $i):$port" \
        --token-file "$TMP/token" --source "$(agent_first_ip $i)-$(agent_last_ip $i)" \
        >"$TMP/agent-$i.log" 2>&1 &
    track_pid $!
    AGENTS+=("agent://$(agent_first_ip $i):$port")
done
for _ in $(seq 100); do
    in_ns "$SERVER_NS" curl -fsS -o /dev/null "http://$SERVER_IP:$PORT/healthz" 2>/dev/null && break
    sleep 0.2
done
sleep 1

run_one() { # LABEL AGENTS-CSV
    local label=$1 agents=$2
    echo "== $label: $N subscribers over $agents" >&2
    timeout 600 ip netns exec "$SERVER_NS" "$C1M" bench "http://$SERVER_IP:$PORT/sub/fleet" \
        --conns "$N" --rate "$RATE" --hold "$HOLD" --publish-every "$EVERY" --drain "$DRAIN" \
        --publish-key "$KEY" --agents "$agents" --agent-token-file "$TMP/token" \
        --interval 5s --report "$TMP/$label.json" >"$TMP/$label.txt" 2>&1 || true
    sed -n '/^c1m bench/,$p' "$TMP/$label.txt" >&2
    sleep 5
}

THREE=$(IFS=,; echo "${AGENTS[*]}")
ONE=${AGENTS[0]}
for round in $(seq "$ROUNDS"); do
    if ((round % 2)); then
        run_one "three-$round" "$THREE"; run_one "one-$round" "$ONE"
    else
        run_one "one-$round" "$ONE"; run_one "three-$round" "$THREE"
    fi
done

python3 - "$TMP" "$ROUNDS" "$N" "$OUT/fleet-$N.json" <<'PY'
import datetime, json, sys
tmp, rounds, n, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows, last = [], {}
for rnd in range(1, rounds + 1):
    for shape in ("three", "one"):
        r = json.load(open(f"{tmp}/{shape}-{rnd}.json"))
        res, d, lat = r["result"], r["delivery"]["totals"], r["latency_us"]["delivery"]
        fleet = r.get("fleet") or {}
        rows.append({"round": rnd, "agents": 3 if shape == "three" else 1,
                     "subscribed": res["subscribed"], "peak_online": res["peak_online"],
                     "ramp_rate": res["open_rate_avg"], "published": r["publishing"]["published"],
                     "expected": d["expected"], "received": d["received_in_window"],
                     "missing": d["missing"], "duplicates": d["duplicates"],
                     "reordered": d["reordered"], "p50_ms": lat["p50_us"] / 1e3,
                     "p99_ms": lat["p99_us"] / 1e3, "histogram_count": lat["count"],
                     "agents_lost": fleet.get("agents_lost"),
                     "clock_skew_bound_us": fleet.get("clock_skew_bound_us"),
                     "success": res["success"]})
        last[shape] = r
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
json.dump({"date_utc": date, "n": n, "rows": rows, "last_reports": last}, open(out, "w"), indent=1)
print(f"Run {date}: {n} subscribers, one channel, agents in network namespaces on one box.\n")
print("| round | agents | subscribed | ramp/s | published | received / expected | missing, dup, reordered | p50 | p99 | clock bound |")
print("|---|---|---|---|---|---|---|---|---|---|")
for v in rows:
    print(f"| {v['round']} | {v['agents']} | {v['subscribed']:,} | {v['ramp_rate']:,.0f} | {v['published']} "
          f"| {v['received']:,} / {v['expected']:,} | {v['missing']}, {v['duplicates']}, {v['reordered']} "
          f"| {v['p50_ms']:.1f} ms | {v['p99_ms']:.1f} ms | {v['clock_skew_bound_us']} µs |")
PY
