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
# The hand-over time is the old master's `took_ms` log figure (SIGUSR2 to commit).
#
# Usage: flock /work/locks/bench.lock bench/upgrade.sh [N]     (default 190000)
# Env: RATE (connects/s, 40000), MSG_RATE (100), MSG_EVERY (unset), DRAIN (15s: publishing stops
#      this long before the hold ends, so late deliveries are not counted lost), HOLD (40s),
#      RESTART_AFTER (15s), PORT (18390),
#      MODES ("upgrade restart"), C1M (binary), KEEP_WORK (keep logs there).
# Writes bench/out/upgrade-N-{upgrade,restart}.{json,txt} and bench/out/upgrade-N.txt (summary).
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
source "$(dirname "$0")/lib.sh" # OUT, c1m_binary, work_dir, stop_pid, track_pid, wait_http
c1m_binary
work_dir
# The server runs from its own copy: the upgrade starts "the binary now at its path".
cp "$C1M" "$WORK/c1m"
SERVE="$WORK/c1m"
ADDR="127.0.0.1:$PORT"
SERVE_ARGS=(serve --listen "$ADDR" --max-conns $((N * 3 / 2)) --history-size 10000)

master_pid() { curl -fsS "http://$ADDR/status" | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])'; }

# Servers started by a restart command are not our children: their pids go in a file and
# are stopped at exit.
on_exit 'for p in $(cat "$WORK"/pids 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done; sleep 1; for p in $(cat "$WORK"/pids 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done'

start_server() { # $1 = log
    "$SERVE" "${SERVE_ARGS[@]}" >>"$1" 2>&1 &
    echo $! >>"$WORK/pids"
    wait_http "$ADDR" 30
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
for _ in \$(seq 300); do curl -fsS -o /dev/null "http://$ADDR/healthz" 2>/dev/null && exit 0; sleep 0.05; done
exit 1
EOF
chmod +x "$WORK/restart.sh"

if [ -n "$MSG_EVERY" ]; then PUBLISH=(--publish-every "$MSG_EVERY"); else PUBLISH=(--publish-rate "$MSG_RATE"); fi
SUMMARY="$OUT/upgrade-$N${TAG:+-$TAG}.txt"
{
    echo "# bench/upgrade.sh $N  $(date -u +%FT%TZ)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# serve: ${SERVE_ARGS[*]}"
    echo "# bench: --conns $N --rate $RATE --hold $HOLD --drain $DRAIN --restart-after $RESTART_AFTER ${PUBLISH[*]}"
} >"$SUMMARY"

for mode in $MODES; do
    log="$WORK/serve-$mode.log"
    : >"$log"
    start_server "$log"
    pid=$(master_pid)
    if [ "$mode" = upgrade ]; then
        cmd="'$SERVE' upgrade $pid --timeout 120s"
    else
        cmd="'$WORK/restart.sh'"
    fi
    echo "$pid" >>"$WORK/pids"
    echo "== $mode: master $pid, $N subscribers, ${PUBLISH[*]}, restart cmd: $cmd"
    load_before=$(cut -d' ' -f1 /proc/loadavg)
    set +e
    timeout 900 "$C1M" bench "http://$ADDR/sub/news" --proto sse --conns "$N" --rate "$RATE" \
        --scenario reconnect-storm --restart-cmd "$cmd" --restart-after "$RESTART_AFTER" \
        --hold "$HOLD" --drain "$DRAIN" "${PUBLISH[@]}" --interval 1s \
        --report "$OUT/upgrade-$N-$mode.json" >"$OUT/upgrade-$N-$mode.txt" 2>&1
    code=$?
    set -e
    {
        echo "## $mode (bench exit $code, load before $load_before, after $(cut -d' ' -f1 /proc/loadavg))"
        sed -n '/^c1m bench/,$p' "$OUT/upgrade-$N-$mode.txt" | grep -v '^ *[0-9.]*s ' || true
        if [ "$mode" = upgrade ]; then
            grep -h "upgrade:" "$log" | sed 's/^[^ ]* *//' || true
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
      f"at {r['publishing_rate_per_s']:.0f}/s")
PY
    # Progress lines around the restart: delivery latency before vs during.
    grep -E '^ *[0-9.]+s ' "$OUT/upgrade-$N-$mode.txt" >"$WORK/progress-$mode.txt" || true
    echo "progress lines: $WORK/progress-$mode.txt" >>"$SUMMARY"
    cp "$WORK/progress-$mode.txt" "$OUT/upgrade-$N-$mode-progress.txt"
    pid=$(master_pid 2>/dev/null || true)
    [ -n "$pid" ] && echo "$pid" >>"$WORK/pids"
    for p in $(cat "$WORK/pids"); do kill -TERM "$p" 2>/dev/null || true; done
    for _ in $(seq 100); do curl -fsS -o /dev/null "http://$ADDR/healthz" 2>/dev/null || break; sleep 0.1; done
    sleep 2
    : >"$WORK/pids"
done
echo "summary: $SUMMARY"
