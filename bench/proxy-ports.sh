#!/usr/bin/env bash
# bench/proxy-ports.sh — seed 004 reproduced: a proxy in front of few backends spends its CPU in
# connect() once the ephemeral ports towards one backend address run past half of the range,
# long before they run out. Then the fix (several source addresses per backend) on the same run.
#
# Needs root and haproxy (Debian package). Three network namespaces made here and removed on
# exit, even on failure: CLI runs `c1m bench` (SSE subscribers), PROXY runs HAProxy (mode tcp,
# one thread), BACK runs two `c1m serve` backends (ports 8081 and 8082 of one address). PROXY's
# net.ipv4.ip_local_port_range is narrowed to RANGE ports, so the cliff at half of it comes at
# thousands of connections instead of 64K (this box allows 20000 descriptors per process, and
# HAProxy needs two per proxied connection). Every sysctl is set inside a namespace of ours.
#
# Phases, each ramped by a `c1m bench` at RATE connections/s and held while the next one runs:
#   A: PHASE_A connections (below half of the range per backend),
#   B: PHASE_B more (past half, up to ~75 % per backend): `c1m doctor --role proxy` runs in
#      PROXY during B's hold and should name the busiest (source, destination) pair;
# then HAProxy is restarted with two source addresses per backend and A and B are repeated.
# Reported per phase: HAProxy CPU (user+sys) per 1000 new connections, bench's subscribe
# latency (connect through HAProxy to the backend's SSE answer) p50/p99, and port use.
#
# Env: RANGE (4096), PHASE_A (3600), PHASE_B (2400), RATE (1000).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

RANGE=${RANGE:-4096}
PHASE_A=${PHASE_A:-3600}
PHASE_B=${PHASE_B:-2400}
RATE=${RATE:-1000}
PORT_LO=20000
PORT_HI=$((PORT_LO + RANGE - 1))

[ "$(id -u)" = 0 ] || { echo "proxy-ports: needs root (network namespaces)" >&2; exit 2; }
command -v haproxy >/dev/null || { echo "proxy-ports: haproxy missing (apt-get install haproxy)" >&2; exit 2; }
c1m_binary
work_dir

CLI=c1m-pp-cli-$$
PROXY=c1m-pp-proxy-$$
BACK=c1m-pp-back-$$
for ns in "$CLI" "$PROXY" "$BACK"; do
    ip netns add "$ns"
    on_exit "ip netns del $ns"
    ip -n "$ns" link set lo up
done
ip link add ppc$$ netns "$CLI" type veth peer name ppp$$ netns "$PROXY"
ip link add ppb$$ netns "$PROXY" type veth peer name ppk$$ netns "$BACK"
ip -n "$CLI" addr add 10.202.1.2/24 dev ppc$$
ip -n "$PROXY" addr add 10.202.1.1/24 dev ppp$$
ip -n "$PROXY" addr add 10.202.2.1/24 dev ppb$$
ip -n "$PROXY" addr add 10.202.2.21/24 dev ppb$$
ip -n "$PROXY" addr add 10.202.2.22/24 dev ppb$$
ip -n "$BACK" addr add 10.202.2.100/24 dev ppk$$
ip -n "$CLI" link set ppc$$ up
ip -n "$PROXY" link set ppp$$ up
ip -n "$PROXY" link set ppb$$ up
ip -n "$BACK" link set ppk$$ up
ip netns exec "$PROXY" sysctl -qw net.ipv4.ip_local_port_range="$PORT_LO $PORT_HI"

for port in 8081 8082; do
    ip netns exec "$BACK" "$C1M" serve --listen 10.202.2.100:$port --workers 1 >"$WORK/serve-$port.log" 2>&1 &
    track_pid $!
done
for port in 8081 8082; do
    for _ in $(seq 100); do ip netns exec "$BACK" curl -fsS -o /dev/null http://10.202.2.100:$port/healthz 2>/dev/null && break; sleep 0.1; done
done

# haproxy_config SOURCES...: one server line per backend and source address.
haproxy_config() {
    cat <<EOF
global
    maxconn $((PHASE_A + PHASE_B + 500))
    ulimit-n $((2 * (PHASE_A + PHASE_B) + 1000))
    nbthread 1
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend push
    bind 10.202.1.1:8080
    default_backend serve
backend serve
    balance roundrobin
EOF
    local src i=0
    for port in 8081 8082; do
        for src in "$@"; do
            i=$((i + 1))
            echo "    server s$i 10.202.2.100:$port source $src"
        done
    done
}

hz=$(getconf CLK_TCK)

# ramp NAME COUNT: opens COUNT subscribers through the proxy and keeps them for 120 s (or until
# killed); waits for the ramp; prints the phase's line.
ramp() {
    local name=$1 count=$2 before after
    before=$(cpu_ticks "$HAPROXY_PID")
    ip netns exec "$CLI" timeout 200 "$C1M" bench http://10.202.1.1:8080/sub/p -c "$count" --rate "$RATE" \
        --hold 120s --connect-timeout 30s -q --report "$WORK/bench-$name.json" >"$WORK/bench-$name.txt" 2>&1 &
    local pid=$!
    track_pid $pid
    BENCHES+=("$pid")
    # Ramp time plus slack, then until every connection is established through the proxy.
    sleep $((count / RATE + 2))
    for _ in $(seq 100); do
        [ "$(ip netns exec "$CLI" ss -Htn state established dst 10.202.1.1 | wc -l)" -ge "$((${TOTAL:-0} + count))" ] && break
        sleep 0.2
    done
    after=$(cpu_ticks "$HAPROXY_PID")
    TOTAL=$((${TOTAL:-0} + count))
    local ports
    ports=$(ip netns exec "$PROXY" ss -Htn state established src 10.202.2.0/24 | awk '{print $3 " -> " $4}' |
        sed 's/:[0-9]* ->/ ->/' | sort | uniq -c | sort -rn | head -1 | awk '{print $1}')
    CPU[$name]=$(python3 -c "import sys; print(f'{(int(sys.argv[2])-int(sys.argv[1]))/int(sys.argv[3])*1000/int(sys.argv[4])*1000:.0f}')" "$before" "$after" "$hz" "$count")
    PORTS[$name]=$ports
}

# Reads bench's subscribe percentiles once its report exists (bench writes it at exit).
subscribe_pcts() {
    python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["latency_us"]["subscribe"]
print(f'{s["p50_us"]/1000:.1f} {s["p99_us"]/1000:.1f} {s["count"]}')
EOF
}

stop_all_benches() {
    local pid
    for pid in "${BENCHES[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
    for pid in "${BENCHES[@]}"; do wait "$pid" 2>/dev/null || true; done
    BENCHES=()
    TOTAL=0
    # Until the proxy has let go of every upstream connection.
    for _ in $(seq 100); do
        [ "$(ip netns exec "$PROXY" ss -Htn src 10.202.2.0/24 | wc -l)" -eq 0 ] && break
        sleep 0.2
    done
}

declare -A CPU PORTS
BENCHES=()
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) kernel $(uname -r), $(nproc) CPUs, $(haproxy -v | head -1 | cut -d' ' -f1-3)"
echo "# proxy ip_local_port_range $PORT_LO-$PORT_HI ($RANGE ports; the connect() cliff at half: $((RANGE / 2)) per (source, backend) pair); ramp $RATE/s"
for setup in "one" "two"; do
    # Fresh addresses for the second setup: the first one's upstream sockets sit in TIME_WAIT on
    # the proxy for 60 s after the clients leave (the proxy closes them), holding their ports.
    if [ "$setup" = one ]; then sources=(10.202.2.1); else sources=(10.202.2.21 10.202.2.22); fi
    haproxy_config "${sources[@]}" >"$WORK/haproxy-$setup.cfg"
    ip netns exec "$PROXY" haproxy -db -f "$WORK/haproxy-$setup.cfg" >"$WORK/haproxy-$setup.log" 2>&1 &
    HAPROXY_PID=$!
    track_pid $HAPROXY_PID
    sleep 0.5
    kill -0 "$HAPROXY_PID" || { cat "$WORK/haproxy-$setup.log" >&2; exit 2; }
    echo
    echo "## HAProxy with ${#sources[@]} source address(es) per backend (${sources[*]})"
    ramp "$setup-A" "$PHASE_A"
    ramp "$setup-B" "$PHASE_B"
    echo "\$ c1m doctor --role proxy --only net.ephemeral-ports --interval 0s   # in PROXY, $TOTAL connections held"
    ip netns exec "$PROXY" "$C1M" doctor --role proxy --only net.ephemeral-ports --interval 0s || true
    stop_all_benches
    kill -TERM "$HAPROXY_PID"
    wait "$HAPROXY_PID" 2>/dev/null || true
    if [ "$setup" = one ]; then
        # The proxy closed its upstream sockets, so they sit in TIME_WAIT (60 s) holding their
        # ports; doctor rightly counts them. Wait them out so the second doctor run shows only
        # the fixed setup (bounded: 75 s).
        for _ in $(seq 150); do
            [ "$(ip netns exec "$PROXY" ss -Htn state time-wait | wc -l)" -eq 0 ] && break
            sleep 0.5
        done
    fi
    for phase in A B; do
        read -r p50 p99 n < <(subscribe_pcts "$WORK/bench-$setup-$phase.json")
        printf 'phase %s (+%5d, busiest pair then %5d ports = %2d%% of the range): HAProxy CPU %5d ms per 1000 connections; subscribe p50 %6.1f ms, p99 %6.1f ms (%d samples)\n' \
            "$phase" "$([ $phase = A ] && echo "$PHASE_A" || echo "$PHASE_B")" "${PORTS[$setup-$phase]}" \
            "$((100 * ${PORTS[$setup-$phase]} / RANGE))" "${CPU[$setup-$phase]}" "$p50" "$p99" "$n"
    done
done
