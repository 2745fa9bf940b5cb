#!/usr/bin/env bash
# presence-memory.sh: bytes per presence member, on loopback only.
#
#   master per member  = (PSS of the serve master at N members − at 0) / N
#   workers per member = (Σ PSS of the workers at N − at 0) / N   (the subscriber itself
#                        included; compare bench/serve-memory.sh for a subscriber without)
#
# N SSE subscribers of one channel held idle by `c1m bench` (it spreads them over its own
# processes, each under RLIMIT_NOFILE); serve runs with --presence and a per-channel cap
# above N, without --join-leave (N joins each fanned out to N subscribers is not what is
# measured here). The target carries a token (sub "user-000001", info {"name":"Ann"}), but
# `c1m bench` does not send the target's query string as of this script (checked: the
# members come out anonymous), so the figure is for anonymous members; a named member adds
# its user and info text and their two allocations.
#
# Usage: bench/presence-memory.sh [N]   (default 100000)
# Env: RATE (bench --rate, 20000), PORT (18380), WORKERS (serve --workers, auto), C1M.
# Writes bench/out/presence-memory-N.json and prints it. Every step is time-bounded.
set -euo pipefail
N=${1:-100000}
RATE=${RATE:-20000}
PORT=${PORT:-18380}
WORKERS=${WORKERS:-auto}
SETTLE=${SETTLE:-5}
source "$(dirname "$0")/lib.sh" # BENCH_DIR, ROOT, OUT, c1m_binary
TMP=$(mktemp -d)
SPID=""
BPID=""
cleanup() {
    if [ -n "$BPID" ]; then kill -TERM "$BPID" 2>/dev/null || true; wait "$BPID" 2>/dev/null || true; fi
    if [ -n "$SPID" ]; then
        kill -TERM "$SPID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SPID" 2>/dev/null || true
        wait "$SPID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
c1m_binary
BENCH_C1M="$TMP/c1m-bench"
cp "$C1M" "$BENCH_C1M"

head -c 48 /dev/urandom | base64 | tr -d '\n' >"$TMP/secret"
TOKEN=$(python3 "$ROOT/crates/c1m/tests/auth/mint.py" HS256 "$TMP/secret" \
    "{\"exp\": $(( $(date +%s) + 3600 )), \"channels\": [\"room\"], \"sub\": \"user-000001\", \"info\": {\"name\": \"Ann\"}}")

pss_of() { awk '/^Pss:/ {print $2 * 1024}' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
sample() { # master PSS, Σ workers' PSS
    local w=0 pid
    for pid in $(cat "/proc/$SPID/task/$SPID/children" 2>/dev/null); do w=$((w + $(pss_of "$pid"))); done
    echo "$(pss_of "$SPID") $w"
}
status() { timeout 5 curl -s "http://127.0.0.1:$PORT/status" || echo '{}'; }
members() { status | python3 -c 'import json,sys; print(json.load(sys.stdin).get("presence",{}).get("members",-1))' 2>/dev/null || echo -1; }

"$C1M" serve --listen "127.0.0.1:$PORT" --workers "$WORKERS" --auth optional --jwt-key "$TMP/secret" \
    --presence --presence-max-members $((N * 2)) >"$TMP/serve.log" 2>&1 &
SPID=$!
for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
    sleep 0.1
done
sleep 3
read -r M0 W0 < <(sample)
HOLD=$(( N / RATE + 30 + SETTLE ))
timeout $((HOLD * 3 + 120)) "$BENCH_C1M" bench "http://127.0.0.1:$PORT/sub/room?token=$TOKEN" --proto sse \
    --conns "$N" --rate "$RATE" --hold "${HOLD}s" --interval 5s --report "$TMP/bench.json" >"$TMP/bench.txt" 2>&1 &
BPID=$!
ok=0
for _ in $(seq 1 $((HOLD * 4))); do
    if [ "$(members)" -ge "$N" ]; then ok=1; break; fi
    kill -0 "$BPID" 2>/dev/null || break
    sleep 0.5
done
sleep "$SETTLE"
read -r M1 W1 < <(sample)
S1=$(status)
kill -TERM "$BPID" 2>/dev/null || true
wait "$BPID" || true
BPID=""
mkdir -p "$OUT"
python3 - "$N" "$M0" "$W0" "$M1" "$W1" "$ok" "$S1" >"$OUT/presence-memory-$N.json" <<'PY'
import json, sys
n, m0, w0, m1, w1 = (int(x) for x in sys.argv[1:6])
ok, s1 = sys.argv[6] == "1", json.loads(sys.argv[7] or "{}")
print(json.dumps({
    "n": n, "reached": ok, "presence_at_sample": s1.get("presence"),
    "master_pss_zero": m0, "master_pss_n": m1, "master_bytes_per_member": (m1 - m0) / n,
    "workers_pss_zero": w0, "workers_pss_n": w1, "workers_bytes_per_subscriber": (w1 - w0) / n,
    "presence_bytes_counted_per_member": (s1.get("presence", {}).get("bytes", 0)) / n,
}, indent=1))
PY
cat "$OUT/presence-memory-$N.json"
