#!/usr/bin/env bash
# bench/idle-burst.sh [SUBSCRIBERS] — seed 003 reproduced: a long-lived connection that sat idle
# restarts from the initial congestion window, so the first big push after a quiet spell takes
# several round trips. Measured with tcp_slow_start_after_idle=1 (kernel default) and 0.
#
# Needs root. Two network namespaces made here and removed on exit (even on failure): the server
# side runs `c1m serve`, the client side `c1m bench` (SSE subscribers and the publisher). They
# are joined by bench/delayline.c, a user-space wire with DELAY_MS each way (this kernel has no
# netem), MTU 1500. Every `sysctl -w` here is inside a namespace made by the script, so the
# host is untouched. Bounded: each bench run has --duration, the whole script `timeout`s.
#
# For each setting it shows what `c1m doctor` and `c1m tune --check` say inside the server
# namespace, then publishes one message every EVERY (idle spells far longer than the RTO,
# ~240 ms at a 40 ms RTT) of each size in SIZES to SUBSCRIBERS subscribers, and reports delivery
# p50/p90/p99 (the first message of a run warms the window up from scratch in both settings).
#
# Congestion control: each run is made with every algorithm in CCS (cubic, the kernel default,
# and bbr). Inside a namespace only algorithms in the global net.ipv4.tcp_allowed_congestion_control
# may be chosen, so the script adds the missing ones to it and restores the old list on exit.
#
# Env: DELAY_MS (20: RTT 40 ms), SIZES ("65536 262144"), EVERY (2s), HOLD (23s), CCS
# ("cubic bbr"), KEEP_WORK (a directory to keep the logs and reports in).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SUBS=${1:-20}
DELAY_MS=${DELAY_MS:-20}
SIZES=${SIZES:-"65536 262144"}
EVERY=${EVERY:-2s}
HOLD=${HOLD:-23s}
CCS=${CCS:-"cubic bbr"}
RTT_MS=$((2 * DELAY_MS))

[ "$(id -u)" = 0 ] || { echo "idle-burst: needs root (network namespaces)" >&2; exit 2; }
c1m_binary
work_dir
gcc -O2 -Wall -o "$WORK/delayline" "$BENCH_DIR/delayline.c"

SRV=c1m-ib-srv-$$
CLI=c1m-ib-cli-$$
ip netns add "$SRV"
on_exit "ip netns del $SRV"
ip netns add "$CLI"
on_exit "ip netns del $CLI"
in_srv() { ip netns exec "$SRV" "$@"; }
in_cli() { ip netns exec "$CLI" "$@"; }

# The wire: runs at most as long as the whole script may.
"$WORK/delayline" "$SRV" ib0 "$CLI" ib0 "$DELAY_MS" 900 >"$WORK/delayline.out" 2>&1 &
DELAYLINE_PID=$!
track_pid $DELAYLINE_PID
for _ in $(seq 50); do grep -q ready "$WORK/delayline.out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$WORK/delayline.out" || { cat "$WORK/delayline.out" >&2; exit 2; }
in_srv ip link set lo up
in_cli ip link set lo up
in_srv ip addr add 10.201.0.1 peer 10.201.0.2 dev ib0
in_cli ip addr add 10.201.0.2 peer 10.201.0.1 dev ib0
# A TUN device queues 500 packets by default: 20 subscribers x 256 KB in one window overflow it
# (drops, retransmits). 10000 keeps the wire itself lossless; delayline counts its own drops.
in_srv ip link set ib0 mtu 1500 txqueuelen 10000 up
in_cli ip link set ib0 mtu 1500 txqueuelen 10000 up
# The publisher's side never restarts its window, so only the server's setting differs.
in_cli sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
allowed=$(sysctl -n net.ipv4.tcp_allowed_congestion_control)
on_exit "sysctl -qw net.ipv4.tcp_allowed_congestion_control='$allowed'"
want_allowed=$allowed
for cc in $CCS; do [[ " $want_allowed " == *" $cc "* ]] || want_allowed="$want_allowed $cc"; done
sysctl -qw net.ipv4.tcp_allowed_congestion_control="$want_allowed"

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) kernel $(uname -r), $(nproc) CPUs; RTT ${RTT_MS} ms (delayline ${DELAY_MS} ms each way), MTU 1500, $SUBS SSE subscribers, one message every $EVERY"
# Theory: slow start from the initial window of 10 segments (MSS 1448 with timestamps) doubles
# per round trip; a message of S bytes needs k rounds with 10 * (2^k - 1) >= S / 1448.
rounds() { python3 -c "import math,sys; s=math.ceil(int(sys.argv[1])/1448); k=1
while 10*(2**k-1) < s: k+=1
print(k)" "$1"; }

declare -A P50
for cc in $CCS; do
in_srv sysctl -qw net.ipv4.tcp_congestion_control="$cc"
in_cli sysctl -qw net.ipv4.tcp_congestion_control="$cc"
for setting in 1 0; do
    in_srv sysctl -qw net.ipv4.tcp_slow_start_after_idle=$setting
    echo
    echo "## $cc, server namespace: net.ipv4.tcp_slow_start_after_idle=$setting"
    if [ "$cc" = "${CCS%% *}" ]; then
        echo "\$ c1m doctor --only tcp.slow-start-after-idle --interval 0s"
        in_srv "$C1M" doctor --only tcp.slow-start-after-idle --interval 0s || true
        echo "\$ c1m tune --check --conns 1000 | grep slow_start   # tune's view of the same key"
        in_srv "$C1M" tune --check --conns 1000 2>&1 | grep -i slow_start || true
    fi
    ip netns exec "$SRV" "$C1M" serve --listen 10.201.0.1:8080 --workers 1 --publish-key idle-burst --max-payload 1048576 >"$WORK/serve-$cc-$setting.log" 2>&1 &
    serve_pid=$!
    track_pid $serve_pid
    for _ in $(seq 100); do in_srv curl -fsS -o /dev/null http://10.201.0.1:8080/healthz 2>/dev/null && break; sleep 0.1; done
    for size in $SIZES; do
        report="$WORK/bench-$cc-$setting-$size.json"
        ip netns exec "$CLI" timeout 120 "$C1M" bench "http://10.201.0.1:8080/sub/idle" -c "$SUBS" --hold "$HOLD" \
            --publish-every "$EVERY" --publish-key idle-burst --payload-size "$size" --duration 90s -q --report "$report" \
            >"$WORK/bench-$cc-$setting-$size.txt" 2>&1 || true
        read -r n p50 p90 p99 max delivered expected < <(python3 - "$report" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
d = r["latency_us"]["delivery"]
t = r["delivery"]["totals"]
print(d["count"], d["p50_us"] / 1000, d["p90_us"] / 1000, d["p99_us"] / 1000, d["max_us"] / 1000, t["received"], t["expected"])
EOF
)
        P50[$cc-$setting-$size]=$p50
        printf 'size %7d B: delivery p50 %7.1f ms  p90 %7.1f ms  p99 %7.1f ms  max %7.1f ms  (%d of %d delivered)\n' \
            "$size" "$p50" "$p90" "$p99" "$max" "$delivered" "$expected"
    done
    kill -TERM "$serve_pid"
    wait "$serve_pid" || true
done
done

echo
echo "## round trips: measured (p50 difference / RTT) against theory (rounds from the initial window - 1)"
for cc in $CCS; do
    for size in $SIZES; do
        python3 -c "import sys; a,b,rtt=map(float,sys.argv[1:4]); size,k=int(sys.argv[4]),int(sys.argv[5]); print(f'{sys.argv[6]:6s} {size:7d} B: p50 {a:.1f} ms with 1, {b:.1f} ms with 0: {(a-b)/rtt:.1f} round trips saved; slow start from 10 segments needs {k} rounds: theory {k-1} saved')" \
            "${P50[$cc-1-$size]}" "${P50[$cc-0-$size]}" "$RTT_MS" "$size" "$(rounds "$size")" "$cc"
    done
done
kill -TERM "$DELAYLINE_PID" && wait "$DELAYLINE_PID" || true
grep -v ready "$WORK/delayline.out" || true   # a drop here would be loss on the wire, not in c1m
