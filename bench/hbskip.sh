#!/usr/bin/env bash
# hbskip.sh: what skipping the SSE heartbeat of streams sent other bytes within the interval
# does to the subscribe ramp. Two binaries in the same run,
# alternating, ROUNDS rounds each, in two scenarios:
#   quiet: N SSE subscribers, nothing published (every stream gets heartbeats once silent);
#   busy:  the same with a message to all every 2 s from the start (--publish-from-start), so
#          every stream receives bytes more often than the interval.
# serve runs with --sse-heartbeat HB (default 5s, so several intervals pass during the ramp).
# Per run: bench's ramp rate (subscribers/s, ramp seconds), serve's /status heartbeats
# (sent/skipped; absent in binaries before the counters) and the sendto() calls of the serve
# processes while bench ran (`perf stat -e syscalls:sys_enter_sendto -p` master + workers: a
# socket write() in Rust's std is a send(); this counts heartbeats for a binary without the
# counters; it also holds the responses' heads and ~8 link frames per worker per second, and
# not fan-out sends that go through io_uring). /proc/PID/io syscw does not count send().
#
# Usage: bench/hbskip.sh [N]   (default 200000)
# Env: BASE (the binary to compare with, default /tmp/c1m-main), C1M (ours: built if unset),
#      HB (5s), ROUNDS (2), RATE (0 = closed loop, as bench/run-1m.sh), HOLD (15s),
#      SCENARIOS ("quiet busy"), PORT (18580).
# Writes bench/out/hbskip-N.json (figures), bench/out/hbskip-N.txt (raw: each run's bench
# summary and /status) and prints a markdown table.
set -euo pipefail
N=${1:-200000}
BASE=${BASE:-/tmp/c1m-main}
HB=${HB:-5s}
ROUNDS=${ROUNDS:-2}
RATE=${RATE:-0}
HOLD=${HOLD:-15s}
SCENARIOS=${SCENARIOS:-quiet busy}
PORT=${PORT:-18580}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary
c1m_binary
TMP=$(mktemp -d)
: >"$OUT/hbskip-$N.txt" # every run's bench summary and final /status, appended
SPID=""
on_exit 'stop_pid "$SPID" 10; rm -rf "$TMP"'


run() { # $1 scenario, $2 label (base|ours), $3 binary, $4 round
    local scen=$1 label=$2 bin=$3 round=$4 name="$1-$2-$4" pub=()
    [ "$scen" = busy ] && pub=(--publish-every 2s --publish-from-start --drain 2s)
    "$bin" serve --listen "127.0.0.1:$PORT" --max-conns $((N * 3 / 2)) --sse-heartbeat "$HB" \
        >"$TMP/$name.serve.log" 2>&1 &
    SPID=$!
    track_pid "$SPID"
    wait_http "127.0.0.1:$PORT" 20
    sleep 1
    local load pids ppid
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    pids=$(echo "$SPID" $(pgrep -P "$SPID") | tr ' ' ,)
    perf stat -x, -e syscalls:sys_enter_sendto -p "$pids" -o "$TMP/$name.perf" &
    ppid=$!
    # /status every second: heartbeats counted while messages were still being published
    # (after the last one every stream falls silent and rightly gets heartbeats again).
    (while :; do echo "$(timeout 2 curl -s "http://127.0.0.1:$PORT/status")"; sleep 1; done) >"$TMP/$name.polls" 2>/dev/null &
    local poller=$!
    timeout 600 "$C1M" bench "http://127.0.0.1:$PORT/sub/news" --proto sse --conns "$N" \
        --rate "$RATE" --channels 1 --hold "$HOLD" "${pub[@]}" --interval 5s \
        --report "$TMP/$name.json" >"$TMP/$name.txt" 2>&1 || true
    kill "$poller" 2>/dev/null || true
    wait "$poller" 2>/dev/null || true
    kill -INT "$ppid" 2>/dev/null || true
    wait "$ppid" 2>/dev/null || true
    timeout 5 curl -s "http://127.0.0.1:$PORT/status" >"$TMP/$name.status.json" || echo '{}' >"$TMP/$name.status.json"
    echo "$load $(awk -F, '/sendto/ { print $1 }' "$TMP/$name.perf")" >"$TMP/$name.extra"
    stop_pid "$SPID" 10
    SPID=""
    { echo "== $name ($bin, load before: $load)"; sed -n '/^c1m bench/,$p' "$TMP/$name.txt" | grep -v '^ *[0-9.]*s '
      echo "status: $(cat "$TMP/$name.status.json")"; } >>"$OUT/hbskip-$N.txt"
    echo "$name: $(grep -E 'ramp [0-9]' "$TMP/$name.txt" | head -1)"
    sleep 3
}

for scen in $SCENARIOS; do
    for round in $(seq 1 "$ROUNDS"); do
        run "$scen" base "$BASE" "$round"
        run "$scen" ours "$C1M" "$round"
    done
done

python3 - "$TMP" "$N" "$HB" "$ROUNDS" "$SCENARIOS" "$OUT/hbskip-$N.json" "$BASE" "$C1M" <<'PY'
import json, sys, datetime
tmp, n, hb, rounds, scens, out, base, ours = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5].split(), sys.argv[6], sys.argv[7], sys.argv[8]
rows = []
for scen in scens:
    for rnd in range(1, rounds + 1):
        for label in ("base", "ours"):
            name = f"{scen}-{label}-{rnd}"
            try:
                r = json.load(open(f"{tmp}/{name}.json"))
            except Exception:
                r = {"result": {}, "errors_total": None, "command": None}
            try:
                st = json.load(open(f"{tmp}/{name}.status.json"))
            except Exception:
                st = {}
            load, writes = open(f"{tmp}/{name}.extra").read().strip().rsplit(" ", 1)
            hbs = st.get("heartbeats") or {}
            # The first poll that saw the last message published and delivered to all: the
            # heartbeats counted up to then were written while the streams were busy.
            polls = []
            for line in open(f"{tmp}/{name}.polls"):
                try:
                    polls.append(json.loads(line))
                except Exception:
                    pass
            pub_final = (st.get("messages") or {}).get("published") or 0
            at_last = next((p for p in polls if pub_final and (p.get("messages") or {}).get("published") == pub_final), None)
            hb_busy = ((at_last or {}).get("heartbeats") or {}).get("sent") if at_last else None
            res = r["result"]
            rows.append({"scenario": scen, "round": rnd, "binary": label,
                         "rate": res.get("open_rate_avg"), "ramp_s": res.get("ramp_s"),
                         "online": res.get("online_at_end"), "errors": r.get("errors_total"),
                         "hb_sent": hbs.get("sent"), "hb_skipped": hbs.get("skipped"),
                         "hb_sent_until_last_publish": hb_busy,
                         "sendto_calls": int(writes), "load_before": load,
                         "delivered": (st.get("messages") or {}).get("delivered"),
                         "published": (st.get("messages") or {}).get("published"),
                         "command": r.get("command")})
doc = {"date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), "n": n,
       "serve_command": f"c1m serve --listen 127.0.0.1:PORT --max-conns {n * 3 // 2} --sse-heartbeat {hb}",
       "base": base, "ours": ours, "rows": rows}
json.dump(doc, open(out, "w"), indent=1)
print(f"\n# heartbeat skipping, {n:,} SSE subscribers, --sse-heartbeat {hb} ({doc['date_utc']})")
print(f"bench: {next((r['command'] for r in rows if r['command']), '?')}")
print("| scenario | round | binary | ramp | ramp time | online | errors | heartbeats sent / skipped (/status, end) | heartbeats sent until the last publish | serve sendto() calls | serve published / delivered | load before |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
f = lambda x, fmt="{:,.0f}": "–" if x is None else fmt.format(x)
for r in rows:
    print(f"| {r['scenario']} | {r['round']} | {r['binary']} | {f(r['rate'])}/s | {f(r['ramp_s'], '{:.1f}')} s | {f(r['online'])} | {f(r['errors'])} "
          f"| {f(r['hb_sent'])} / {f(r['hb_skipped'])} | {f(r['hb_sent_until_last_publish'])} | {r['sendto_calls']:,} | {f(r['published'])} / {f(r['delivered'])} | {r['load_before']} |")
for scen in scens:
    for rnd in range(1, rounds + 1):
        b = next(r for r in rows if (r["scenario"], r["round"], r["binary"]) == (scen, rnd, "base"))
        o = next(r for r in rows if (r["scenario"], r["round"], r["binary"]) == (scen, rnd, "ours"))
        if b["rate"] and o["rate"]:
            print(f"{scen} round {rnd}: ramp ours/base = {o['rate'] / b['rate']:.2f}; sendto() calls ours/base = {o['sendto_calls'] / max(b['sendto_calls'], 1):.2f}")
PY
