#!/usr/bin/env bash
# upgrade.sh: replace the c1m binary under N held SSE subscribers, and for contrast
# the same with a plain restart and client resume. Loopback only.
#
# Both runs are `c1m bench --scenario reconnect-storm`: N SSE subscribers on one channel (bench
# spreads them over source addresses 127.0.0.2, .3, … as --per-source requires), a publisher
# at MSG_RATE msg/s (--publish-rate), and at RESTART_AFTER into the hold bench runs the
# --restart-cmd and reports what the subscribers saw: connections dropped, time until all are
# back and caught up, messages lost or duplicated, delivery latency.
#   upgrade:  the command is `c1m upgrade MASTER` (SIGUSR2: the master hands listeners,
#             connections and hub to the binary at its path, here a copy of the same build).
#   restart:  the command stops the server (SIGTERM) and starts it again on the same port;
#             subscribers reconnect (--reconnect) with Last-Event-ID. The in-memory history
#             starts empty, so resumes get gap events: that is what a restart costs.
#   kill-worker: the command kills one serve worker with SIGKILL (the subscriber worker holding
#             the most connections) and waits until the master has restarted it; its
#             subscribers are cut, reconnect (to the other workers and the new one) with
#             Last-Event-ID and are replayed what they missed from the master's history.
#   kill-master: the command kills the master with SIGKILL, then records what the workers do
#             (each dies with its master: PR_SET_PDEATHSIG, and its link to the master reads
#             EOF), what a publish and /healthz get, and which sockets are left on the port;
#             then, as a supervisor would (systemd Restart=), starts serve again (SUPERVISE=1,
#             after SUPERVISE_DELAY) so the run shows whether and how the subscribers come back
#             (the new hub's history is empty: a resume gets a gap notice).
# The hand-over time is the old master's `took_ms` log figure (SIGUSR2 to commit). What the
# kill commands saw is in bench/out/upgrade-N-MODE-events.txt and in the summary.
#
# Above 200,000 connections the script raises the sysctls a 1M run needs (bench/lib.sh
# sysctl_raise_for_conns, root) and restores them on exit. CONTROL=1 (the default) serves
# publishes and /status on an admin listener (PORT+2, the control worker, which holds no
# subscriber) so the publisher and the kill commands are not queued behind the fan-outs; with
# NICE (19) as serve --worker-nice and bench --load-nice, as bench/run-1m.sh does.
#
# Usage: flock /work/locks/bench.lock bench/upgrade.sh [N]     (default 190000)
# Env: RATE (connects/s, 40000; 0 = as fast as bench's in-flight cap), MSG_RATE (100), MSG_EVERY
#      (unset), DRAIN (15s: publishing stops this long before the hold ends, so late deliveries
#      are not counted lost), HOLD (40s), RESTART_AFTER (15s), PORT (18390),
#      MODES ("upgrade restart"; also kill-worker, kill-master), MAX_CONNS (N * 3 / 2),
#      CONTROL (1), NICE (19), UPGRADE_TIMEOUT (serve --upgrade-timeout, 120s), SUPERVISE (1),
#      SUPERVISE_DELAY (2 s, the RestartSec of dist/c1m.service), TAG, C1M (binary), KEEP_WORK
#      (keep logs there).
# Writes bench/out/upgrade-N-MODE.{json,txt}, bench/out/upgrade-N-MODE-progress.txt and
# bench/out/upgrade-N[-TAG].txt (summary).
set -euo pipefail
N=${1:-190000}
RATE=${RATE:-40000}
MSG_RATE=${MSG_RATE:-100}
# MSG_EVERY (e.g. 2s) publishes one message that often instead of MSG_RATE per second.
MSG_EVERY=${MSG_EVERY:-}
DRAIN=${DRAIN:-15s}
HOLD=${HOLD:-40s}
RESTART_AFTER=${RESTART_AFTER:-15s}
PORT=${PORT:-18390}
MODES=${MODES:-upgrade restart}
MAX_CONNS=${MAX_CONNS:-$((N * 3 / 2))}
CONTROL=${CONTROL:-1}
UPGRADE_TIMEOUT=${UPGRADE_TIMEOUT:-120s}
NICE=${NICE:-19}
SUPERVISE=${SUPERVISE:-1}
SUPERVISE_DELAY=${SUPERVISE_DELAY:-2}
for mode in $MODES; do
    case $mode in upgrade | restart | kill-worker | kill-master) ;;
    *) echo "upgrade.sh: unknown mode $mode (upgrade, restart, kill-worker, kill-master)" >&2; exit 2 ;;
    esac
done
source "$(dirname "$0")/lib.sh" # OUT, c1m_binary, work_dir, stop_pid, track_pid, wait_http, sysctl_*
sysctl_raise_for_conns "$N"
c1m_binary
work_dir
# The server runs from its own copy: the upgrade starts "the binary now at its path".
cp "$C1M" "$WORK/c1m"
SERVE="$WORK/c1m"
ADDR="127.0.0.1:$PORT"
API=$ADDR # where /status and /pub are served
SERVE_ARGS=(serve --listen "$ADDR" --max-conns "$MAX_CONNS" --history-size 10000 --upgrade-timeout "$UPGRADE_TIMEOUT")
BENCH_NICE=()
if [ "$CONTROL" = 1 ]; then
    API="127.0.0.1:$((PORT + 2))"
    SERVE_ARGS+=(--admin-listen "$API" --admin-publish --worker-nice "$NICE")
    BENCH_NICE=(--load-nice "$NICE")
fi

master_pid() { curl -fsS -m 10 "http://$API/status" | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])'; }

# Lets the sockets of the previous mode go before the next one starts (bounded).
wait_sockets_gone() {
    local inuse
    for _ in $(seq 180); do
        inuse=$(awk '/^TCP:/ {print $3}' /proc/net/sockstat)
        [ "$inuse" -lt 20000 ] && return 0
        sleep 1
    done
    echo "upgrade.sh: $inuse TCP sockets still in use after 180 s" >&2
}

# Servers started by a restart command are not our children: their pids go in a file and
# are stopped at exit.
on_exit 'for p in $(cat "$WORK"/pids 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done; sleep 1; for p in $(cat "$WORK"/pids 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done'

start_server() { # $1 = log
    "$SERVE" "${SERVE_ARGS[@]}" >>"$1" 2>&1 &
    echo $! >>"$WORK/pids"
    wait_http "$API" 30
}

cat >"$WORK/restart.sh" <<EOF
#!/usr/bin/env bash
# Plain restart: stop (SIGTERM, bounded), start again on the same port.
set -e
pid=\$(tail -n 1 "$WORK/pids")
kill -TERM "\$pid"
for _ in \$(seq 200); do kill -0 "\$pid" 2>/dev/null || break; sleep 0.05; done
"$SERVE" ${SERVE_ARGS[*]} >>"$WORK/serve-restart.log" 2>&1 &
echo \$! >>"$WORK/pids"
for _ in \$(seq 300); do curl -fsS -o /dev/null "http://$API/healthz" 2>/dev/null && exit 0; sleep 0.05; done
exit 1
EOF
chmod +x "$WORK/restart.sh"

# kill -9 of one worker: the subscriber worker with the most connections (never the control
# worker, which holds none). Waits (bounded, 120 s) until the master reports a new pid in that
# slot that answers, and notes the times in the events file (EVENTS, set per mode).
cat >"$WORK/kill-worker.sh" <<EOF
#!/usr/bin/env bash
set -u
ev() { echo "\$(date -u +%H:%M:%S.%3N) \$*" >>"\$EVENTS"; }
status() { curl -fsS -m 10 "http://$API/status"; }
pick=\$(status | python3 -c 'import json, sys
ws = [w for w in json.load(sys.stdin)["workers"] if w.get("role") != "control"]
w = max(ws, key=lambda w: w["connections"])
print(w["index"], w["pid"], w["connections"], sum(x["connections"] for x in ws))') || { ev "no /status: nothing killed"; exit 1; }
read -r idx wpid conns total <<<"\$pick"
t0=\$(date +%s%N)
kill -KILL "\$wpid" || { ev "kill -9 \$wpid failed"; exit 1; }
ev "killed worker \$idx (pid \$wpid) with SIGKILL: it held \$conns of \$total subscriber connections"
deadline=\$((\$(date +%s) + 120))
while [ "\$(date +%s)" -lt "\$deadline" ]; do
    new=\$(status 2>/dev/null | python3 -c 'import json, sys
w = json.load(sys.stdin)["workers"][int(sys.argv[1])]
print(w["pid"], w["answering"], w["connections"])' "\$idx" 2>/dev/null) || new=""
    read -r npid ans nconns <<<"\${new:-0 False 0}"
    if [ "\$npid" != 0 ] && [ "\$npid" != "\$wpid" ] && [ "\$ans" = True ]; then
        ev "worker \$idx restarted by the master as pid \$npid, answering after \$(( (\$(date +%s%N) - t0) / 1000000 )) ms (\$nconns connections)"
        exit 0
    fi
    sleep 0.1
done
ev "worker \$idx not back after 120 s"
exit 1
EOF
chmod +x "$WORK/kill-worker.sh"

# kill -9 of the master. Records what its workers do (polled every 20 ms, bounded 60 s), what a
# publish and /healthz get once they are gone, and what still listens on the port; then, with
# SUPERVISE=1, starts serve again as a supervisor would and waits for it (bounded, 120 s).
cat >"$WORK/kill-master.sh" <<EOF
#!/usr/bin/env bash
set -u
ev() { echo "\$(date -u +%H:%M:%S.%3N) \$*" >>"\$EVENTS"; }
ms() { echo \$(( (\$(date +%s%N) - t0) / 1000000 )); }
m=\$(tail -n 1 "$WORK/master")
workers=\$(pgrep -P "\$m" | tr '\n' ' ')
nw=\$(echo \$workers | wc -w)
t0=\$(date +%s%N)
kill -KILL "\$m" || { ev "kill -9 \$m failed"; exit 1; }
ev "killed the master (pid \$m) with SIGKILL; it had \$nw worker processes"
half=""
deadline=\$((\$(date +%s) + 60))
while [ "\$(date +%s)" -lt "\$deadline" ]; do
    alive=0
    for w in \$workers; do
        # A worker that exited but is not yet reaped by its new parent is gone for the clients.
        if [ -e "/proc/\$w" ] && ! grep -q '^State:.*Z' "/proc/\$w/status" 2>/dev/null; then alive=\$((alive + 1)); fi
    done
    [ -z "\$half" ] && [ \$((alive * 2)) -le "\$nw" ] && { half=1; ev "half of the workers gone after \$(ms) ms"; }
    [ "\$alive" = 0 ] && break
    sleep 0.02
done
ev "worker processes still running: \$alive of \$nw, \$(ms) ms after the kill"
ev "publish now: \$(curl -s -m 5 -o /dev/null -w 'HTTP %{http_code} %{errormsg}' --data-binary x "http://$API/pub/news" 2>&1)"
ev "healthz now: \$(curl -s -m 5 -o /dev/null -w 'HTTP %{http_code} %{errormsg}' "http://$API/healthz" 2>&1)"
ev "sockets on port $PORT now: listening \$(ss -Htln "sport = :$PORT" | wc -l), established \$(ss -Htn state established "sport = :$PORT" | wc -l)"
[ "$SUPERVISE" = 1 ] || exit 0
sleep "$SUPERVISE_DELAY"
ev "supervisor: starting serve again (after $SUPERVISE_DELAY s)"
setsid "$SERVE" ${SERVE_ARGS[*]} >>"$WORK/serve-kill-master-2.log" 2>&1 </dev/null &
echo \$! >>"$WORK/pids"
deadline=\$((\$(date +%s) + 120))
while [ "\$(date +%s)" -lt "\$deadline" ]; do
    if curl -fsS -m 2 -o /dev/null "http://$API/healthz" 2>/dev/null; then
        ev "supervisor: the new serve (pid \$!) answers \$(ms) ms after the kill"
        exit 0
    fi
    sleep 0.1
done
ev "supervisor: the new serve does not answer after 120 s"
exit 1
EOF
chmod +x "$WORK/kill-master.sh"

if [ -n "$MSG_EVERY" ]; then PUBLISH=(--publish-every "$MSG_EVERY"); else PUBLISH=(--publish-rate "$MSG_RATE"); fi
SUMMARY="$OUT/upgrade-$N${TAG:+-$TAG}.txt"
{
    echo "# bench/upgrade.sh $N  $(date -u +%FT%TZ)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# host: kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), nofile $(ulimit -Sn)/$(ulimit -Hn), nice $(nice), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)"
    echo "# serve: ${SERVE_ARGS[*]}"
    echo "# bench: --conns $N --rate $RATE --hold $HOLD --drain $DRAIN --restart-after $RESTART_AFTER ${PUBLISH[*]} ${BENCH_NICE[*]}"
} >"$SUMMARY"

for mode in $MODES; do
    log="$WORK/serve-$mode.log"
    : >"$log"
    wait_sockets_gone
    start_server "$log"
    pid=$(master_pid)
    echo "$pid" >>"$WORK/master"
    export EVENTS="$OUT/upgrade-$N-$mode-events.txt"
    : >"$EVENTS"
    case $mode in
    upgrade) cmd="'$SERVE' upgrade $pid --timeout 120s" ;;
    restart) cmd="'$WORK/restart.sh'" ;;
    *) cmd="'$WORK/$mode.sh'" ;;
    esac
    echo "$pid" >>"$WORK/pids"
    echo "== $mode: master $pid, $N subscribers, ${PUBLISH[*]}, restart cmd: $cmd"
    load_before=$(cut -d' ' -f1 /proc/loadavg)
    set +e
    timeout 2400 "$C1M" bench "http://$ADDR/sub/news" --proto sse --conns "$N" --rate "$RATE" \
        --scenario reconnect-storm --restart-cmd "$cmd" --restart-after "$RESTART_AFTER" \
        --hold "$HOLD" --drain "$DRAIN" "${PUBLISH[@]}" --publish-url "http://$API/pub/{ch}" \
        --interval 1s "${BENCH_NICE[@]}" \
        --report "$OUT/upgrade-$N-$mode.json" >"$OUT/upgrade-$N-$mode.txt" 2>&1
    code=$?
    set -e
    {
        echo "## $mode (bench exit $code, load before $load_before, after $(cut -d' ' -f1 /proc/loadavg))"
        sed -n '/^c1m bench/,$p' "$OUT/upgrade-$N-$mode.txt" | grep -v '^ *[0-9.]*s ' || true
        if [ "$mode" = upgrade ]; then
            # One line per step; the per-worker lines only counted (76 workers at 1M).
            grep -h "upgrade:" "$log" | grep -v "worker{" | sed 's/^[^ ]* *//' || true
            echo "per-worker upgrade lines: $(grep -c 'worker{.*upgrade:' "$log" || true)"
        fi
        if [ "$mode" = kill-worker ] || [ "$mode" = kill-master ]; then
            cat "$EVENTS"
            grep -h -E "worker exited|restarting|master link lost" "$WORK"/serve-"$mode"*.log | sed 's/^[^ ]* *//' | head -20 || true
        fi
    } | tee -a "$SUMMARY"
    # The figures the issue asks for, from bench's report: connections closed, messages lost or
    # duplicated, delivery p99 per 1 s interval before the restart vs around it.
    python3 - "$OUT/upgrade-$N-$mode.json" "$mode" <<'PY' | tee -a "$SUMMARY"
import json, sys
r = json.load(open(sys.argv[1]))
s, d, res = r["scenario"], r["delivery"], r["result"]
at = res["ramp_s"] + s["restart_after_s"]
cmd = s["restart_cmd"]["secs"]
before = [t["delivery_p99_us"] for t in r["timeline"] if at - 6 <= t["t_s"] < at]
during = [t["delivery_p99_us"] for t in r["timeline"] if at <= t["t_s"] <= at + cmd + 3]
ms = lambda v: f"{v / 1000:.0f} ms" if v else "n/a"
print(f"figures {sys.argv[2]}: restart cmd {cmd:.2f} s (exit {s['restart_cmd']['exit_code']}) · "
      f"connections dropped {s['dropped']} · lost {s['lost']} · duplicates {s['duplicates']} · "
      f"missing {d['totals'].get('missing')} · gapped {s['gapped']} · publishes refused {r['publishing']['errors']}")
print(f"figures {sys.argv[2]}: delivery p99 per second: before (6 s) max {ms(max(before, default=0))}, "
      f"around the restart max {ms(max(during, default=0))}; published {r['publishing']['published']} "
      f"at {r['publishing_rate_per_s']:.1f}/s")
PY
    # Progress lines around the restart: delivery latency before vs during.
    grep -E '^ *[0-9.]+s ' "$OUT/upgrade-$N-$mode.txt" >"$WORK/progress-$mode.txt" || true
    echo "progress lines: $WORK/progress-$mode.txt" >>"$SUMMARY"
    cp "$WORK/progress-$mode.txt" "$OUT/upgrade-$N-$mode-progress.txt"
    pid=$(master_pid 2>/dev/null || true)
    [ -n "$pid" ] && echo "$pid" >>"$WORK/pids"
    for p in $(cat "$WORK/pids"); do kill -TERM "$p" 2>/dev/null || true; done
    # Until every master has exited (bounded, 60 s, then SIGKILL): /healthz stops answering
    # while a master still drains, and the port stays claimed until it exits, so the next
    # mode's serve would be refused ("port already served").
    for _ in $(seq 600); do
        alive=0
        for p in $(cat "$WORK/pids"); do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for p in $(cat "$WORK/pids"); do kill -KILL "$p" 2>/dev/null || true; done
    sleep 2
    : >"$WORK/pids"
done
echo "summary: $SUMMARY"
