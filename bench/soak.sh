#!/usr/bin/env bash
# soak.sh: hold subscribers for a long time while a share of them leaves and comes back with
# resume, publishers write to many channels and a one-to-all channel gets a message every
# second; checks that nothing is lost or duplicated and that the server leaks nothing.
# Loopback only; every process it starts is stopped at exit.
#
# Two c1m bench processes against one c1m serve:
# - churn: SUBS SSE subscribers over CHANNELS channels, CHURN of them per second closed and
#   reopened with their last id (--churn-resume: every message published while one was away
#   must reach it by replay), PUBS publishes per second round-robin over the channels; a
#   reconnect that fails (a subscribe timeout on a saturated box) is retried with backoff
#   (--reconnect), still resuming from its last id;
# - fan-out: FANOUT_SUBS SSE subscribers of one channel, one message to all of them per second.
# Verdict (exit 0 only if all hold):
# - both benches: every due message delivered exactly once, in order, nothing missing;
# - after both have left: the server's connection count is 0 and its process tree holds as
#   many file descriptors as before the run (a leaked socket, pipe or file shows here);
# - runs of at least FLAT_MIN: after WARMUP (a fraction of the run), the server's RSS and
#   fd count stay within FLAT_PCT % of their first post-warm-up value (median of the first
#   and of the last tenth of the samples). Shorter runs report the drift without judging it.
#
# Usage: bench/soak.sh [DURATION]   (default 60m)
# Env: SUBS (100000), CHANNELS (1000), CHURN (1000), PUBS (1000), FANOUT_SUBS (2000),
#      EVERY (10s: server samples), WARMUP (0.2), FLAT_PCT (2), FLAT_MIN (600: seconds),
#      HISTORY (100: --history-size; each channel's history is full after HISTORY / (PUBS /
#      CHANNELS) seconds, which must fall inside the warm-up or the RSS still grows by design),
#      PORT (18400), SERVE_ARGS (more flags for c1m serve), BENCH_ARGS (more flags for both
#      c1m bench runs), C1M (binary), OUT_DIR.
# Writes OUT_DIR (default bench/out/soak-<UTC time>): churn.json and fanout.json (bench
# reports), fds.csv (t_s, fds, rss_bytes of the server tree), rss-by-process.csv (t_s, pid,
# rss_bytes: which process a change in the total belongs to), summary.json, soak.svg.
set -euo pipefail
DURATION=${1:-60m}
SUBS=${SUBS:-100000}
CHANNELS=${CHANNELS:-1000}
CHURN=${CHURN:-1000}
PUBS=${PUBS:-1000}
FANOUT_SUBS=${FANOUT_SUBS:-2000}
EVERY=${EVERY:-10s}
WARMUP=${WARMUP:-0.2}
FLAT_PCT=${FLAT_PCT:-2}
FLAT_MIN=${FLAT_MIN:-600}
HISTORY=${HISTORY:-100}
PORT=${PORT:-18400}
SERVE_ARGS=${SERVE_ARGS:-}
BENCH_ARGS=${BENCH_ARGS:-}
source "$(dirname "$0")/lib.sh" # ROOT, OUT, c1m_binary, start_serve, wait_http, stop_pid
c1m_binary
DIR=${OUT_DIR:-$OUT/soak-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$DIR"
log() { echo "soak: $*" >&2; }

secs_of() { # 90s, 10m, 2h, or plain seconds
    local v=$1
    case $v in
    *ms) echo 1 ;; *s) echo "${v%s}" ;; *m) echo $((${v%m} * 60)) ;; *h) echo $((${v%h} * 3600)) ;; *) echo "$v" ;;
    esac
}
HOLD_S=$(secs_of "$DURATION")

tree_fds() { # open descriptors of the server's master and workers
    local total=0 p n
    for p in "$SERVE_PID" $(pgrep -P "$SERVE_PID" 2>/dev/null); do
        n=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
        total=$((total + n))
    done
    echo "$total"
}
# Each server process's RSS, one "pid,bytes" line per process (the sampler sums them).
rss_by_process() {
    local p kb
    for p in "$SERVE_PID" $(pgrep -P "$SERVE_PID" 2>/dev/null); do
        kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)
        echo "$p,$((${kb:-0} * 1024))"
    done
}

# History deep enough that a client away for a while resumes by replay, not by a gap.
# shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
start_serve "$DIR/serve.log" --listen "127.0.0.1:$PORT" --history-size "$HISTORY" \
    --max-conns $((SUBS + FANOUT_SUBS + 10000)) $SERVE_ARGS
wait_http "127.0.0.1:$PORT" 20
sleep 1
# wait_http would also be answered by another server on the port: this one must be alive.
kill -0 "$SERVE_PID" 2>/dev/null || { cat "$DIR/serve.log" >&2; exit 2; }
# The workers' sockets to one another open within their first beats: count once that settled.
FDS_BEFORE=$(tree_fds)
for _ in $(seq 20); do
    sleep 0.5
    n=$(tree_fds)
    [ "$n" = "$FDS_BEFORE" ] && break
    FDS_BEFORE=$n
done
log "serve pid $SERVE_PID, $FDS_BEFORE fds before the run; holding $SUBS + $FANOUT_SUBS for ${HOLD_S}s"

echo "t_s,fds,rss_bytes" >"$DIR/fds.csv"
echo "t_s,pid,rss_bytes" >"$DIR/rss-by-process.csv"
START=$(date +%s)
(
    while kill -0 "$SERVE_PID" 2>/dev/null; do
        t=$(($(date +%s) - START))
        rows=$(rss_by_process)
        total=$(echo "$rows" | awk -F, '{ s += $2 } END { print s + 0 }')
        echo "$t,$(tree_fds),$total" >>"$DIR/fds.csv"
        echo "$rows" | sed "s/^/$t,/" >>"$DIR/rss-by-process.csv"
        sleep "$(secs_of "$EVERY")"
    done
) &
SAMPLER=$!
track_pid "$SAMPLER"

# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
"$C1M" bench "http://127.0.0.1:$PORT/sub/soak" --scenario churn --churn-resume $BENCH_ARGS \
    --conns "$SUBS" --rate 5000 --channels "$CHANNELS" --churn-rate "$CHURN" \
    --publish-rate "$PUBS" --hold "${HOLD_S}s" --drain 5s --server-every "$EVERY" --reconnect -q \
    --report "$DIR/churn.json" >"$DIR/churn.txt" 2>&1 &
CHURN_PID=$!
track_pid "$CHURN_PID"
# shellcheck disable=SC2086
"$C1M" bench "http://127.0.0.1:$PORT/sub/everyone" --scenario fanout $BENCH_ARGS \
    --conns "$FANOUT_SUBS" --rate 2000 --publish-every 1s --hold "${HOLD_S}s" --drain 5s --reconnect -q \
    --report "$DIR/fanout.json" >"$DIR/fanout.txt" 2>&1 &
FANOUT_PID=$!
track_pid "$FANOUT_PID"
set +e
wait "$CHURN_PID"
CHURN_RC=$?
wait "$FANOUT_PID"
FANOUT_RC=$?
set -e
log "churn bench exit $CHURN_RC, fan-out bench exit $FANOUT_RC"

# Every client has left: the server must be back to no connections and its fd count.
AFTER_CONNS=""
for _ in $(seq 300); do
    AFTER_CONNS=$(curl -fsS "http://127.0.0.1:$PORT/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"]["total"])' || echo "?")
    [ "$AFTER_CONNS" = 0 ] && break
    sleep 0.1
done
sleep 1
FDS_AFTER=$(tree_fds)
stop_pid "$SAMPLER" 2
curl -fsS "http://127.0.0.1:$PORT/status" >"$DIR/status-after.json" || true

python3 - "$DIR" "$CHURN_RC" "$FANOUT_RC" "$AFTER_CONNS" "$FDS_BEFORE" "$FDS_AFTER" \
    "$WARMUP" "$FLAT_PCT" "$FLAT_MIN" "$HOLD_S" <<'PY'
import csv, json, statistics, sys
d, churn_rc, fanout_rc, after_conns, fds_before, fds_after = sys.argv[1:7]
warmup, flat_pct, flat_min, hold_s = float(sys.argv[7]), float(sys.argv[8]), float(sys.argv[9]), float(sys.argv[10])
churn = json.load(open(f"{d}/churn.json"))
fanout = json.load(open(f"{d}/fanout.json"))
rows = [r for r in csv.DictReader(open(f"{d}/fds.csv"))]
t = [float(r["t_s"]) for r in rows]
series = {"fds": [int(r["fds"]) for r in rows], "rss_bytes": [int(r["rss_bytes"]) for r in rows]}
# Judged over the hold only: after warm-up, before the benches close their connections.
end = hold_s
keep = [i for i, x in enumerate(t) if warmup * end <= x <= end]

def drift(values):
    v = [values[i] for i in keep]
    if len(v) < 10:
        return None
    tenth = max(1, len(v) // 10)
    first, last = statistics.median(v[:tenth]), statistics.median(v[-tenth:])
    return {"first": first, "last": last, "min": min(v), "max": max(v),
            "drift_pct": 100.0 * (last - first) / first if first else None}

flat = {k: drift(v) for k, v in series.items()}
judged = hold_s >= flat_min
flat_ok = all(f is not None and abs(f["drift_pct"]) <= flat_pct for f in flat.values()) if judged else None

def delivery(r):
    x = r["delivery"]["totals"]
    keys = ("expected", "received", "missing", "duplicates", "reordered", "server_gaps")
    return {"delivered_to_all": r["delivery"]["delivered_to_all"], **{k: x.get(k) for k in keys}}

summary = {
    "hold_s": hold_s,
    "churn": {"exit": int(churn_rc), "delivery": delivery(churn), "scenario": churn.get("scenario")},
    "fanout": {"exit": int(fanout_rc), "delivery": delivery(fanout)},
    "after": {"connections": after_conns, "fds_before": int(fds_before), "fds_after": int(fds_after)},
    "flatness": {"judged": judged, "limit_pct": flat_pct, "warmup": warmup, **flat, "ok": flat_ok},
    "server_timeline_samples": len(churn.get("server_timeline", [])),
}
checks = {
    "churn_delivered_exactly_once": int(churn_rc) == 0,
    "fanout_delivered_exactly_once": int(fanout_rc) == 0,
    "no_connection_left": after_conns == "0",
    "fds_back_to_before": int(fds_after) <= int(fds_before),
    "flat_after_warmup": flat_ok is not False,
}
summary["checks"] = checks
summary["ok"] = all(checks.values())
json.dump(summary, open(f"{d}/summary.json", "w"), indent=1)

# Memory and descriptors over time, one SVG (no plotting library needed).
W, H, P = 900, 360, 50
def poly(xs, ys, color):
    if not xs:
        return ""
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or 1
    pts = " ".join(f"{P + (W - 2 * P) * x / (end or 1):.1f},{H - P - (H - 2 * P) * (y - lo) / span:.1f}" for x, y in zip(xs, ys))
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>' \
           f'<text x="{W - P + 4}" y="{H - P - (H - 2 * P) * (ys[-1] - lo) / span:.0f}" fill="{color}" font-size="11">{ys[-1]:,}</text>'
shown = [i for i, x in enumerate(t) if x <= end]
t = [t[i] for i in shown]
rss_mib = [round(series["rss_bytes"][i] / 1048576, 1) for i in shown]
series["fds"] = [series["fds"][i] for i in shown]
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W + 60}" height="{H}" font-family="sans-serif">',
       f'<text x="{P}" y="20" font-size="13">c1m serve over a {hold_s:.0f} s soak: RSS (MiB, blue) and open fds (red), each scaled to its own range; warm-up ends at {warmup * end:.0f} s</text>',
       f'<line x1="{P}" y1="{H - P}" x2="{W - P}" y2="{H - P}" stroke="#888"/>',
       f'<line x1="{P + (W - 2 * P) * warmup}" y1="{P}" x2="{P + (W - 2 * P) * warmup}" y2="{H - P}" stroke="#bbb" stroke-dasharray="4"/>',
       poly(t, rss_mib, "#1f5fbf"), poly(t, series["fds"], "#c0392b"),
       f'<text x="{P}" y="{H - P + 20}" font-size="11">0 s</text><text x="{W - P - 30}" y="{H - P + 20}" font-size="11">{end:.0f} s</text></svg>']
open(f"{d}/soak.svg", "w").write("\n".join(svg))
print(json.dumps(summary, indent=1))
sys.exit(0 if summary["ok"] else 1)
PY
