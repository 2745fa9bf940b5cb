#!/usr/bin/env bash
# run-1m.sh: the 1,000,000 run. N (default 1,000,000) SSE subscribers held by c1m bench against
# c1m serve on the same box (loopback only), a few messages delivered to all of them, and
# while they are held: c1m sockets timed against `ss -tan | wc -l`, serve's memory per
# connection from /proc/PID/smaps_rollup (and /status), a trimmed `c1m doctor`.
#
# Kernel settings: `c1m doctor --conns N` and `c1m tune --conns N --check` are recorded
# first; only what the run needs is raised with `sysctl -w` (accept/SYN queues for the ramp,
# tcp_mem for 1M sockets with data queued at once during fan-out, nf_conntrack_max when the
# conntrack module is loaded); the previous values are restored on exit (trap EXIT).
#
# Publisher: c1m bench's own publisher gives up on a publish after 5 s (hard-coded read
# timeout) and then reuses the sequence number; at 1M subscribers c1m serve acknowledges a
# publish only after the receiving worker has fanned it out locally (> 5 s here), so every
# publish "failed" while being delivered to all (first try, 2026-11-22T05:19Z: 4 publishes,
# 4,000,000 received, counted as 1,000,000 + 3,000,000 duplicates). So by default
# (PUBLISHER=curl) this script publishes MSGS messages itself with curl (120 s timeout), each
# payload a bench stamp `c1mb 0 SEQ SEND_US` with SEQ = 1, 2, ...: bench's subscribers parse
# them exactly like their own publisher's, measure delivery latency from SEND_US, and count
# duplicates, reordering and sequence jumps; bench's "expected" stays 0 (it only counts its own
# acknowledged publishes), so zero loss is shown by received = in-window = MSGS x N with no
# duplicate (each subscriber can hold each SEQ at most once). PUBLISHER=bench uses bench's.
#
# Floor (FLOOR=1, the default): before serve starts, the same N connections are opened with
# bench/blockconnect.c (plain blocking connect() in PROCS processes) against bench/holdlisten.c
# (accept-and-hold, SO_REUSEPORT), in the same run and at the same scale: serve's subscribe
# ramp is quoted as a ratio to that rate. The subscribe floor (SUBFLOOR=1, the default) then
# does the same with one request and one response head per connection (blockconnect PATH ->
# holdlisten sse): the naive-C cost of a subscribe's wire work, a second ratio. SERVEFLOOR=1
# (the default) then runs that same naive client against c1m serve (its own instance): serve's
# accept path without bench, a third ratio. PERF=1 records a system-wide profile (perf record
# -a -g, PERF_SECS s from PERF_AT s (5) into each ramp; PERF_AT=0 for ramps shorter than that) of both ramps and draws flame graphs
# (bench/flamegraph.py) to bench/out/ramp-{floor-connect,floor-subscribe,serve-naive,serve}-N.svg.
# SCHED=1 records the scheduler during the ack probe (perf sched, SCHED_AT / SCHED_SECS) and
# writes each process group's wake-up-to-run delay to bench/out/sched-N.txt (bench/sched-delay.py).
# serve's own publish_ack / fan_out histograms (/status, server side) are logged beside
# bench's publish_ack (client side), to tell the server's share of an ack from the box's.
#
# RATE 0 = as fast as bench's in-flight cap allows (closed loop, like the floor's blocking
# connects): the ramp to compare with the floor. An open-model RATE far above what the box can
# accept overflows the listen queues and the ramp collapses into SYN retries (2026-11-23T16:47Z:
# 60,000/s offered on a box that accepted ~9,000/s).
#
# Usage: bench/run-1m.sh [N] [RATE]   (defaults 1000000, 40000)
# Env: PROBE_RATE (10 publishes/s to a channel of one beside the fan-outs, PUBLISHER=bench;
#      0 = no probe), TAG (suffix for the output names), BENCH_BIN (the binary bench runs from; C1M), PUBLISHER (curl|bench), MSGS (3, curl mode), HOLD (180s), EVERY (30s), DRAIN (70s: publishing stops this long before the hold
#      ends; the socket timing runs in that quiet window), MAX_CONNS (1000000, serve's own
#      default: 53 workers of 19,812 here, whose 5 % spread slack held 1M with no refusal on
#      2026-11-22; 1500000 forced 80 workers, 27 more processes' fixed cost, ~8 B per
#      connection at 1M: BENCHMARKS.md "A worker's fixed cost down by a quarter"), PORT (18480), C1M,
#      SERVE_ARGS (more flags for c1m serve, e.g. "--sse-heartbeat 0"),
#      CONTROL (1: serve with --admin-listen PORT+2 --admin-publish, so publishes and /status
#      go to the control worker, which holds no subscriber; 0: serve on its default flags,
#      everything on PORT, publishes passed to the control worker by serve itself),
#      NICE (CONTROL=1: 19, as serve --worker-nice and bench --load-nice, so the control path
#      and bench's publisher run first on the saturated box. At 1M, 5 left the master and the
#      control worker ~6 % of the CPU against ~100 runnable processes: publish acks p99 18.6 and
#      199.9 ms; 19: 2.0 ms. BENCHMARKS "1M end to end with the smaller workers". CONTROL=0:
#      10, as bench --load-nice only, matching serve's own default for its workers).
# Writes bench/out/sse-N.{json,svg,txt} and bench/out/run-N.txt (settings, timings, memory).
set -euo pipefail
N=${1:-1000000}
RATE=${2:-40000}
HOLD=${HOLD:-180s}
EVERY=${EVERY:-30s}
DRAIN=${DRAIN:-70s}
MAX_CONNS=${MAX_CONNS:-1000000}
PUBLISHER=${PUBLISHER:-curl}
MSGS=${MSGS:-3}
PORT=${PORT:-18480}
SERVE_ARGS=${SERVE_ARGS:-}
CONTROL=${CONTROL:-1}
CTL_ARGS=""
API=127.0.0.1:$PORT # where /status and /pub are served
if [ "$CONTROL" = 1 ]; then
    NICE=${NICE:-19}
    API=127.0.0.1:$((PORT + 2))
    CTL_ARGS="--admin-listen $API --admin-publish --worker-nice $NICE"
else
    NICE=${NICE:-10} # serve's own --worker-nice default; bench's load matches it
fi
BENCH_NICE=(--load-nice "$NICE")
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary
HERE=$BENCH_DIR
TMP=$(mktemp -d)
TAG=${TAG:-}
LOG="$OUT/run-$N$TAG.txt"
SPID=""
BPID=""
LPID=""
cleanup() {
    if [ -n "$LPID" ]; then kill -- -"$LPID" 2>/dev/null || true; wait "$LPID" 2>/dev/null || true; fi
    if [ -n "$BPID" ]; then kill -TERM "$BPID" 2>/dev/null || true; wait "$BPID" 2>/dev/null || true; fi
    if [ -n "${PROBE_PID:-}" ]; then kill -TERM "$PROBE_PID" 2>/dev/null || true; wait "$PROBE_PID" 2>/dev/null || true; fi
    stop_pid "$SPID" 30
    sysctl_restore
    rm -rf "$TMP"
}
trap cleanup EXIT

c1m_binary
# bench runs from its own copy of the binary, so it takes no PSS share of serve's text pages
# (that lowered serve's per-connection figure; see bench/serve-memory.sh). BENCH_BIN: another
# build's bench against this serve (an A/B of the load generator alone).
BENCH_C1M="$TMP/c1m-bench"
cp "${BENCH_BIN:-$C1M}" "$BENCH_C1M"
secs() { local d=$1; case $d in *ms) echo 0 ;; *s) echo "${d%s}" ;; *m) echo $(( ${d%m} * 60 )) ;; *) echo "$d" ;; esac; }
log() { echo "$*" | tee -a "$LOG"; }

: >"$LOG"
log "# run-1m: $N SSE subscribers, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
log "host: kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), nofile $(ulimit -Sn)/$(ulimit -Hn), load $(cut -d' ' -f1-3 /proc/loadavg)"
log ""
log "## before: c1m doctor --conns $N (per-process lines trimmed)"
timeout 60 "$C1M" doctor --conns "$N" 2>&1 | grep -Ev '^ +pid [0-9]+|^ +fix: prlimit --pid' | tee -a "$LOG" || true
log ""
log "## before: c1m tune --conns $N --check"
timeout 60 "$C1M" tune --conns "$N" --check 2>&1 | tee -a "$LOG" || true

log ""
log "## settings for the run (restored on exit)"
SYSCTL_LOG=log
sysctl_raise_for_conns "$N"

# Profiles the whole box for PERF_SECS seconds (background); flame graph drawn by perf_done.
PERF=${PERF:-0}
PERF_SECS=${PERF_SECS:-10}
PERF_AT=${PERF_AT:-5}
PERF_PID=""
perf_start() {
    [ "$PERF" = 1 ] || return 0
    perf record -q -a -g -F 499 -o "$TMP/perf-$1.data" -- sleep "$PERF_SECS" >/dev/null 2>&1 &
    PERF_PID=$!
}
perf_done() {
    [ -n "$PERF_PID" ] || return 0
    wait "$PERF_PID" 2>/dev/null || true
    PERF_PID=""
    perf script -i "$TMP/perf-$1.data" 2>/dev/null |
        python3 "$HERE/flamegraph.py" "$OUT/ramp-$1-$N$TAG.svg" "$1 ramp to $N, whole box, perf -a -g -F 499, ${PERF_SECS}s" \
            --collapsed "$OUT/ramp-$1-$N$TAG.collapsed.txt" | tee -a "$LOG"
}

# Lets the 2N sockets of a finished ramp go before the next one (bounded wait).
wait_sockets_gone() {
    for _ in $(seq 1 120); do
        inuse=$(awk '/^TCP:/ {print $3}' /proc/net/sockstat)
        [ "$inuse" -lt 20000 ] && break
        sleep 1
    done
}

# One floor run: KIND connect (blocking connect+accept, holdlisten never reads) or subscribe
# (the same plus c1m bench's SSE request and serve's 124-byte response head per connection:
# the naive-C cost of what a subscribe does on the wire). Sets FLOOR_OUT to its rate.
floor_run() {
    local kind=$1 path="" mode=""
    if [ "$kind" = subscribe ]; then path=/sub/news; mode=sse; fi
    log ""
    log "## floor ($kind): bench/blockconnect.c -> bench/holdlisten.c, $N connections, same run"
    setsid "$TMP/holdlisten" 127.0.0.1 "$FPORT" "$LPROCS" $mode &
    LPID=$!
    sleep 1
    log "floor load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    perf_start "floor-$kind"
    timeout 300 "$TMP/blockconnect" 127.0.0.1 "$FPORT" "$N" "$CPROCS" 127.0.1.1 "$SRCS" $path >"$TMP/floor.txt" 2>&1 || true
    log "floor ($kind): blockconnect 127.0.0.1 $FPORT $N $CPROCS 127.0.1.1 $SRCS $path (holdlisten $LPROCS processes $mode): $(cat "$TMP/floor.txt")"
    FLOOR_OUT=$(awk '/rate/ {print $NF}' "$TMP/floor.txt")
    kill -- -"$LPID" 2>/dev/null || true
    wait "$LPID" 2>/dev/null || true
    LPID=""
    perf_done "floor-$kind"
    wait_sockets_gone
    log "sockstat after the floor: $(grep TCP: /proc/net/sockstat)"
}

# Serve's own accept path (SERVEFLOOR=1, the default with FLOOR=1): the subscribe floor's
# naive-C client (blockconnect PATH) against c1m serve itself, the same flags as the run's but
# on FPORT, in an instance of its own stopped afterwards. Beside the subscribe floor it is the
# server-only ratio: the same client, so neither bench's user-space work nor its 50-odd
# processes are in it. Sets SERVE_NAIVE_RATE.
serve_naive_run() {
    log ""
    log "## serve's accept path: bench/blockconnect.c /sub/news -> c1m serve, $N connections, same run"
    # The floor's holdlisten processes may still be closing their sockets: serve refuses a
    # port another program listens on, and the client would then reach the dying floor.
    for _ in $(seq 120); do
        [ -z "$(ss -Hltn "sport = :$FPORT" 2>/dev/null)" ] && break
        sleep 1
    done
    # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
    "$C1M" serve --listen "127.0.0.1:$FPORT" --max-conns "$MAX_CONNS" $SERVE_ARGS >"$TMP/serve-naive.log" 2>&1 &
    SPID=$!
    wait_port 127.0.0.1 "$FPORT" 30
    sleep 5
    if ! kill -0 "$SPID" 2>/dev/null; then
        log "serve (naive client) did not start: $(tail -3 "$TMP/serve-naive.log")"
    fi
    log "serve (naive client) load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    perf_start serve-naive
    timeout 300 "$TMP/blockconnect" 127.0.0.1 "$FPORT" "$N" "$CPROCS" 127.0.1.1 "$SRCS" /sub/news >"$TMP/floor.txt" 2>&1 || true
    log "serve (naive client): blockconnect 127.0.0.1 $FPORT $N $CPROCS 127.0.1.1 $SRCS /sub/news -> c1m serve --max-conns $MAX_CONNS $SERVE_ARGS: $(cat "$TMP/floor.txt")"
    SERVE_NAIVE_RATE=$(awk '/rate/ {print $NF}' "$TMP/floor.txt")
    perf_done serve-naive
    stop_pid "$SPID" 30
    SPID=""
    wait_sockets_gone
    log "sockstat after serve (naive client): $(grep TCP: /proc/net/sockstat)"
}

FLOOR_RATE=""
SUB_FLOOR_RATE=""
SERVE_NAIVE_RATE=""
if [ "${FLOOR:-1}" = 1 ]; then
    gcc -O2 -Wall -o "$TMP/holdlisten" "$HERE/holdlisten.c"
    gcc -O2 -Wall -o "$TMP/blockconnect" "$HERE/blockconnect.c"
    HARD=$(ulimit -Hn)
    LPROCS=$(( (N + 14999) / 15000 + 2 ))
    CPROCS=$(( (N + HARD - 101) / (HARD - 100) ))
    SRCS=$(( (N + 11999) / 12000 ))
    FPORT=$((PORT + 1)) # not serve's port: the floor's closing sockets must not hold it
    floor_run connect
    FLOOR_RATE=$FLOOR_OUT
    if [ "${SUBFLOOR:-1}" = 1 ]; then
        floor_run subscribe
        SUB_FLOOR_RATE=$FLOOR_OUT
    fi
    if [ "${SERVEFLOOR:-1}" = 1 ]; then serve_naive_run; fi
fi

log ""
log "## run"
# shellcheck disable=SC2086 # SERVE_ARGS and CTL_ARGS are lists of flags
"$C1M" serve --listen "127.0.0.1:$PORT" --max-conns "$MAX_CONNS" $CTL_ARGS $SERVE_ARGS >"$TMP/serve.log" 2>&1 &
SPID=$!
for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
    sleep 0.1
done
sleep 5
pss_sum() {
    local total=0 n=0 pid kb
    for pid in "$SPID" $(cat "/proc/$SPID/task/$SPID/children" 2>/dev/null); do
        kb=$(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || true)
        [ -n "$kb" ] || continue
        total=$((total + kb * 1024)); n=$((n + 1))
    done
    echo "$total $n"
}
status() { timeout 10 curl -s "http://$API/status" || echo '{}'; }

# The publish-ack probe (PUBLISHER=bench, PROBE_RATE > 0): beside the fan-outs to N, a second
# bench holds one subscriber of channel `ackprobe` and publishes PROBE_RATE messages a second
# to it through the same address as the fan-out's publishes, for the publishing window
# (HOLD - DRAIN; from the hold's start: serve reached N, or its count stalled at 90 % of N
# or more). Most of its publishes land while a fan-out to N runs, so its publish_ack
# histogram is the ack p99 at N with hundreds of samples (the fan-out's own publishes are a
# handful).
PROBE_RATE=${PROBE_RATE:-10}
PROBE_PID=""
ack_probe_start() { # SECONDS_INTO_THE_HOLD
    [ "$PROBE_RATE" != 0 ] || return 0
    local window=$(( $(secs "$HOLD") - $(secs "$DRAIN") - $1 ))
    # Its subscribe may wait out a fan-out to N in its worker: a minute, not bench's 10 s.
    "$BENCH_C1M" bench "http://127.0.0.1:$PORT/sub/ackprobe" --proto sse --conns 1 --channels 1 \
        --connect-timeout 60s --hold "${window}s" --publish-rate "$PROBE_RATE" --publish-url "http://$API/pub/{ch}" \
        --report "$OUT/ackprobe-$N$TAG.json" "${BENCH_NICE[@]}" -q >"$TMP/ackprobe.txt" 2>&1 &
    PROBE_PID=$!
    head -1 /proc/stat >"$TMP/probe-cpu0"
    (sleep "$window"; head -1 /proc/stat >"$TMP/probe-cpu1") &
    sched_start
    log "ack probe: 1 subscriber of ackprobe, $PROBE_RATE publishes/s for ${window}s beside the fan-outs (report $OUT/ackprobe-$N$TAG.json)"
}
# SCHED=1: `perf sched record` of the whole box for SCHED_SECS (20) from SCHED_AT (30) s into
# the probe's window (so across a fan-out or two), then each process group's scheduling delay
# (wake-up to run; bench/sched-delay.py): serve's master and control worker (the publish's
# path), its subscriber workers, the probe's publisher (bench coordinator) and its workers.
# Written to bench/out/sched-N$TAG.txt; SCHED_KEEP=FILE keeps the raw timehist there too.
SCHED=${SCHED:-0}
SCHED_AT=${SCHED_AT:-30}
SCHED_SECS=${SCHED_SECS:-20}
SCHED_PID=""
sched_start() {
    [ "$SCHED" = 1 ] || return 0
    (
        sleep "$SCHED_AT"
        status | python3 -c '
import json, sys
w = json.load(sys.stdin).get("workers", [])
print("control=" + ",".join(str(x["pid"]) for x in w if x.get("role") == "control"))
print("subscriber-workers=" + ",".join(str(x["pid"]) for x in w if x.get("role") != "control"))
' >"$TMP/sched-groups.txt" || true
        echo "master=$SPID" >>"$TMP/sched-groups.txt"
        echo "probe-publisher=$PROBE_PID" >>"$TMP/sched-groups.txt"
        echo "probe-workers=$(cat /proc/"$PROBE_PID"/task/*/children 2>/dev/null | tr ' ' ',')" >>"$TMP/sched-groups.txt"
        echo "bench-load=$BPID,$(cat /proc/"$BPID"/task/*/children 2>/dev/null | tr ' ' ',')" >>"$TMP/sched-groups.txt"
        perf sched record -q -a -o "$TMP/sched.data" -- sleep "$SCHED_SECS" >/dev/null 2>&1
    ) &
    SCHED_PID=$!
}
sched_done() {
    [ -n "$SCHED_PID" ] || return 0
    wait "$SCHED_PID" 2>/dev/null || true
    SCHED_PID=""
    {
        echo "# scheduling delay (wake-up to run) per process group, perf sched record -a, ${SCHED_SECS}s from ${SCHED_AT}s into the ack probe's window"
        perf sched timehist -i "$TMP/sched.data" >"$TMP/timehist.txt" 2>/dev/null || true
        if [ -n "${SCHED_KEEP:-}" ]; then cp "$TMP/timehist.txt" "$SCHED_KEEP"; fi
        # shellcheck disable=SC2046
        python3 "$HERE/sched-delay.py" "$TMP/timehist.txt" $(cat "$TMP/sched-groups.txt")
    } | tee "$OUT/sched-$N$TAG.txt" | tee -a "$LOG"
}
ack_probe_done() {
    [ -n "$PROBE_PID" ] || return 0
    wait "$PROBE_PID" || true
    PROBE_PID=""
    # Time the hypervisor gave this VM's CPUs to others (steal) stalls every process at once.
    python3 - "$TMP/probe-cpu0" "$TMP/probe-cpu1" <<'PY' | tee -a "$LOG"
import sys
try:
    a, b = ([int(x) for x in open(f).read().split()[1:9]] for f in sys.argv[1:3])
except (OSError, ValueError):
    print("CPU time during the ack probe's window: not read"); sys.exit(0)
d = [y - x for x, y in zip(a, b)]
print(f"CPU time during the ack probe's window: steal {d[7] / max(sum(d), 1) * 100:.1f} %, softirq {d[6] / max(sum(d), 1) * 100:.1f} %, idle {d[3] / max(sum(d), 1) * 100:.1f} %")
PY
    python3 - "$OUT/ackprobe-$N$TAG.json" <<'PY' | tee -a "$LOG"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"ack probe: no report ({e})"); sys.exit(0)
a = r["latency_us"].get("publish_ack", {})
t = r["delivery"]["totals"]
if a.get("count"):
    print(f"ack probe (bench, client side, publishes beside the fan-outs): p50 {a['p50_us']/1e3:.1f} ms, p99 {a['p99_us']/1e3:.1f} ms, max {a['max_us']/1e3:.1f} ms ({a['count']} publishes); delivered {t['received']}, missing {t.get('missing', '?')}")
else:
    print("ack probe: no publish acknowledged")
PY
}
jget() { python3 -c "import json,sys
try: d=json.load(sys.stdin)
except Exception: d={}
for k in '$1'.split('.'): d=d.get(k,{}) if isinstance(d,dict) else {}
print(d if d!={} else -1)"; }
read -r P0 NP0 < <(pss_sum)
S0=$(status)
W=$(echo "$S0" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))' 2>/dev/null || echo "?")
log "serve: c1m serve --listen 127.0.0.1:$PORT --max-conns $MAX_CONNS $CTL_ARGS $SERVE_ARGS: $W workers, $NP0 processes; PSS at 0 connections: ours $P0 B, /status $(echo "$S0" | jget memory.pss_bytes) B"
log "meminfo before: $(awk '/MemAvailable|^Slab/ {printf "%s %d MiB; ", $1, $2/1024}' /proc/meminfo)"
BCMD=("$BENCH_C1M" bench "http://127.0.0.1:$PORT/sub/news" --proto sse --conns "$N" --rate "$RATE" \
      --channels 1 --hold "$HOLD" --interval 10s --duration "${DURATION:-900s}" --report "$OUT/sse-$N$TAG.json" --plot "$OUT/sse-$N$TAG.svg" \
      --status-url "http://$API/status" "${BENCH_NICE[@]}")
if [ "$PUBLISHER" = bench ]; then BCMD+=(--publish-every "$EVERY" --drain "$DRAIN" --publish-url "http://$API/pub/{ch}"); fi
log "bench: ${BCMD[*]}"
T0=$(date +%s)
log "serve ramp load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
timeout 1500 "${BCMD[@]}" >"$TMP/bench.txt" 2>&1 &
BPID=$!
if [ "$PERF" = 1 ]; then sleep "$PERF_AT"; perf_start serve; fi

# Wait for the ramp (serve counts N connections), then for the quiet window (drain).
# A ramp that ends a few connections short (bench's connect/subscribe timeouts; it does not
# reconnect) still gets the held measurements once serve's count has stopped growing for
# STALL_S seconds at 99.9 % of N or more: bench's hold has started by then. Memory is divided
# by the count serve holds, so the figures stay per connection.
reached=0
STALL_S=${STALL_S:-15}
last=0
still=0
flat=0
flat_at=0
RATE_INT=${RATE%.*}
for _ in $(seq 1 $(( RATE_INT > 0 ? N / RATE_INT * 4 + 120 : 600 ))); do
    c=$(status | jget connections.total)
    if [ "$c" -ge "$N" ]; then reached=1; break; fi
    if [ "$c" -eq "$last" ]; then still=$((still + 1)); else still=0; last=$c; fi
    if [ "$still" -ge "$STALL_S" ] && [ $((c * 1000)) -ge $((N * 999)) ]; then reached=1; break; fi
    # A ramp that stalls short of that (bench gave up on some attempts) is in its hold too:
    # the count stays within 0.01 % of N (serve counts /status pollers and refused
    # connections too) for STALL_S seconds.
    d=$((c - flat_at)); d=${d#-}
    if [ "$d" -le $((N / 10000)) ]; then flat=$((flat + 1)); else flat=0; flat_at=$c; fi
    if [ "$flat" -ge "$STALL_S" ] && [ $((c * 10)) -ge $((N * 9)) ] && [ "$PUBLISHER" = bench ]; then
        [ -n "$PROBE_PID" ] || ack_probe_start "$STALL_S"
    fi
    kill -0 "$BPID" 2>/dev/null || break
    sleep 1
done
TR=$(date +%s)
log "serve connections reached $N: $([ $reached = 1 ] && echo "yes ($c held)" || echo NO) after $((TR - T0)) s (status polled every 1 s)"
perf_done serve
if [ $reached = 1 ]; then
    if [ "$PUBLISHER" = bench ]; then
        [ -n "$PROBE_PID" ] || ack_probe_start 0
        quiet=$(( $(secs "$HOLD") - $(secs "$DRAIN") + 10 ))
        log "waiting ${quiet}s for the publishes to finish (quiet window = the drain)"
        for _ in $(seq 1 "$quiet"); do kill -0 "$BPID" 2>/dev/null || break; sleep 1; done
    else
        sleep 5
        log ""
        log "## publishes (curl, payload = bench stamp, channel news)"
        for m in $(seq 1 "$MSGS"); do
            t=$(date +%s)
            body="c1mb 0 $m $(date +%s%6N)"
            r=$(timeout 130 curl -s -m 120 -o "$TMP/pub.out" -w '%{http_code} %{time_total}' \
                --data-binary "$body" "http://$API/pub/news" || true)
            log "publish $m at $(date -u +%H:%M:%S): HTTP/time ${r:-none} answer $(cat "$TMP/pub.out" 2>/dev/null)"
            [ "$m" = "$MSGS" ] || sleep $(( $(secs "$EVERY") - ($(date +%s) - t) > 0 ? $(secs "$EVERY") - ($(date +%s) - t) : 0 ))
        done
        log "waiting $(secs "$EVERY") s for the last fan-out to land"
        for _ in $(seq 1 "$(secs "$EVERY")"); do kill -0 "$BPID" 2>/dev/null || break; sleep 1; done
    fi
    log "meminfo held: $(awk '/MemAvailable|^Slab/ {printf "%s %d MiB; ", $1, $2/1024}' /proc/meminfo)"
    log "sockstat: $(grep TCP: /proc/net/sockstat)"
    read -r P1 NP1 < <(pss_sum)
    S1=$(status)
    C1=$(echo "$S1" | jget connections.total)
    log "serve memory held: $C1 connections; PSS ours $P1 B ($NP1 processes), /status $(echo "$S1" | jget memory.pss_bytes) B"
    if [ "${C1:-0}" -gt 0 ] 2>/dev/null; then
        log "serve memory per connection: total $(( P1 / C1 )) B; growth (PSS at N - PSS at 0) / N = $(( (P1 - P0) / N )) B"
    else # bench already ended (HOLD shorter than the publishes) or /status did not answer
        log "serve memory per connection: not measured here, serve holds ${C1:-?} connections (see bench's memory line)"
    fi
    log "serve latency histograms (server side, /status): publish_ack $(echo "$S1" | jget latency.publish_ack); fan_out $(echo "$S1" | jget latency.fan_out); publish_to_write $(echo "$S1" | jget latency.publish_to_write)"
    log ""
    log "## c1m sockets vs ss while held (wall s, user+sys s; best of 2, or 1 run when > 15 s)"
    for cmd in "$C1M sockets" "$C1M sockets --threads 1" "$C1M sockets --threads 2" "ss -tan | wc -l" "ss -s"; do
        best=""; cpu=""
        for _ in 1 2; do
            /usr/bin/time -f "%e %U %S" -o "$TMP/time" timeout 300 bash -c "$cmd" >"$TMP/sockout" 2>&1 || true
            read -r e u s <"$TMP/time" || true
            if [ -z "$best" ] || python3 -c "import sys; sys.exit(0 if $e < $best else 1)"; then
                best=$e; cpu=$(python3 -c "print(f'{$u + $s:.2f}')")
            fi
            # one run only when it is slow: the quiet window is short
            python3 -c "import sys; sys.exit(0 if $e > 15 else 1)" && break
        done
        res=$(grep -E '^TOTAL|^TCP:' "$TMP/sockout" | awk '{print $1 " " $2}' || true)
        [ -n "$res" ] || res="$(tail -1 "$TMP/sockout") lines"
        log "| ${cmd/$C1M/c1m} | ${best} s | ${cpu} s | $res |"
    done
    timeout 60 "$C1M" sockets 2>&1 | tee -a "$LOG" || true
    log ""
    log "## during hold: c1m doctor --conns $N (per-process lines trimmed)"
    timeout 120 "$C1M" doctor --conns "$N" 2>&1 | grep -Ev '^ +pid [0-9]+|^ +fix: prlimit --pid' | tee -a "$LOG" || true
fi
wait "$BPID" || log "bench exit status $?"
BPID=""
ack_probe_done
sched_done
# Server-side histograms also when the ramp fell short (the held section above was skipped).
S2=$(status)
log "serve latency histograms at the end (server side, /status): publish_ack $(echo "$S2" | jget latency.publish_ack); fan_out $(echo "$S2" | jget latency.fan_out)"
sed -n '/^c1m bench/,$p' "$TMP/bench.txt" >"$OUT/sse-$N$TAG.txt" || true
cat "$OUT/sse-$N$TAG.txt" | tee -a "$LOG"
python3 - "$OUT/sse-$N$TAG.json" "$N" "$MSGS" "$PUBLISHER" "$FLOOR_RATE" "$SUB_FLOOR_RATE" "$SERVE_NAIVE_RATE" <<'PY' | tee -a "$LOG"
import json, sys
r = json.load(open(sys.argv[1])); n, msgs, pub = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
t = r["delivery"]["totals"]; d = r["latency_us"]["delivery"]
print(f"delivery totals: {json.dumps(t)}")
print(f"delivery latency: p50 {d['p50_us']/1e3:.0f} ms, p99 {d['p99_us']/1e3:.0f} ms, max {d['max_us']/1e3:.0f} ms ({d['count']:,} samples)")
a = r["latency_us"].get("publish_ack", {})
if a.get("count"):
    print(f"publish ack (bench, client side): p50 {a['p50_us']/1e3:.1f} ms, p99 {a['p99_us']/1e3:.1f} ms, max {a['max_us']/1e3:.1f} ms ({a['count']} publishes)")
res = r["result"]
print(f"ramp: {res['ramp_s'] or 0:.1f} s, {res['open_rate_avg'] or 0:,.0f} subscribers/s")
floor = sys.argv[5] if len(sys.argv) > 5 else ""
if floor and res["open_rate_avg"]:
    print(f"ramp vs floor (same run): {res['open_rate_avg']:,.0f} / {float(floor):,.0f} = {res['open_rate_avg'] / float(floor):.2f}x")
sub = sys.argv[6] if len(sys.argv) > 6 else ""
if sub and res["open_rate_avg"]:
    print(f"ramp vs subscribe floor (same run): {res['open_rate_avg']:,.0f} / {float(sub):,.0f} = {res['open_rate_avg'] / float(sub):.2f}x")
naive = sys.argv[7] if len(sys.argv) > 7 else ""
if naive and sub:
    print(f"serve's accept path, naive client (same run): {float(naive):,.0f} / subscribe floor {float(sub):,.0f} = {float(naive) / float(sub):.2f}x"
          + (f", / connect floor {float(floor):,.0f} = {float(naive) / float(floor):.2f}x" if floor else ""))
if pub == "curl":
    ok = (t["received"] == t["received_in_window"] == msgs * n and t["duplicates"] == 0
          and t["reordered"] == 0 and t["wrong_channel"] == 0 and t["server_gaps"] == 0
          and r["result"]["online_at_end"] == n)
    print(f"zero loss (received = in-window = {msgs} x {n:,}, no duplicate/reorder/gap, all online at end): {'YES' if ok else 'NO'}")
PY
log ""
log "serve log (tail):"
tail -20 "$TMP/serve.log" | tee -a "$LOG"
log "dmesg (last 20 lines mentioning TCP/memory/conntrack/oom):"
(dmesg 2>/dev/null | tail -300 | grep -Ei 'tcp: |conntrack|oom|out of memory|too many|socket' | grep -v 'Command line' | tail -20 || true) | tee -a "$LOG"
log "nstat: $(nstat -az 2>/dev/null | grep -E 'TcpExtListenOverflows|TcpExtListenDrops|TcpExtTCPAbortOnMemory|TcpExtTCPMemoryPressures |TcpExtTCPTimeWaitOverflow' | awk '{printf "%s %s; ", $1, $2}')"
