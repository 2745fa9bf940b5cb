#!/usr/bin/env bash
# syscalls-ab.sh: system calls and context switches that serve spends per keep-alive publish
# and per subscribe, two builds side by side (loopback only). Counts, not times: they hold
# on a noisy box where a rate does not, so a change to the read or wake-up path shows here
# first. Each run: a fresh serve on its default flags (the fd limit's layout: a master, a
# control worker, the subscriber workers), one SSE subscriber (curl) and a keep-alive
# publisher (python, one request at a time) sending PUBLISHES messages, then bench's naive C
# client (bench/blockconnect.c) opening SUBSCRIBES SSE subscribers (and closing them as it
# exits: the subscribe phase counts both ends of a connection). `perf stat --per-thread`
# counts each serve process over each phase; the control worker is the one holding the
# publish inbox socket (`@c1m-publish-<master pid>` in /proc/net/unix).
# Usage: SERVE_A=<c1m> SERVE_B=<c1m> bench/syscalls-ab.sh [PUBLISHES] [SUBSCRIBES]
#        (default 5000 and 20000)
# Env: ROUNDS (1), PORT (18695).
set -euo pipefail
PUBLISHES=${1:-5000}
SUBSCRIBES=${2:-20000}
ROUNDS=${ROUNDS:-1}
PORT=${PORT:-18695}
: "${SERVE_A:?SERVE_A=<c1m binary>}" "${SERVE_B:?SERVE_B=<c1m binary>}"
source "$(dirname "$0")/lib.sh" # OUT, work_dir, track_pid, stop_pid, wait_http, wait_sockets_gone
command -v perf >/dev/null || {
    echo "syscalls-ab.sh needs perf (linux-perf)" >&2
    exit 2
}
work_dir
gcc -O2 -Wall -o "$WORK/blockconnect" "$BENCH_DIR/blockconnect.c"
OUTF="$OUT/syscalls-ab-$(date -u +%Y%m%dT%H%MZ).txt"
echo "# syscalls-ab: $PUBLISHES keep-alive publishes to a channel of one SSE subscriber, then $SUBSCRIBES naive SSE subscribes; serve on default flags; A=$SERVE_A B=$SERVE_B; $(nproc) CPUs, kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ)" | tee "$OUTF"

EVENTS=raw_syscalls:sys_enter,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,context-switches

# The keep-alive publisher: one connection, each request waits for its answer.
publish() { # COUNT
    python3 - "$PORT" "$1" <<'PY'
import socket, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(10)
for i in range(count):
    body = b"m%d" % i
    s.sendall(b"POST /pub/ab HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            sys.exit("the server closed the publisher's connection")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        sys.exit("publish refused: %r" % head[:80])
    length = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
    while len(rest) < length:
        rest += s.recv(4096)
PY
}

# Counts EVENTS per serve process while COMMAND runs; prints one line per role.
count_during() { # LABEL PHASE OPS SERVE_PID CONTROL_PID COMMAND...
    local label=$1 phase=$2 ops=$3 spid=$4 control=$5 pids stat
    shift 5
    pids=$( (echo "$spid"; pgrep -P "$spid") | paste -sd,)
    stat="$WORK/stat-$label-$phase.txt"
    perf stat --per-thread -x, -e "$EVENTS" -p "$pids" -o "$stat" &
    local perf_pid=$!
    sleep 0.5
    "$@" >/dev/null
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    python3 - "$stat" "$spid" "$control" "$ops" "$label" "$phase" <<'PY' | tee -a "$OUTF"
import collections, sys
path, master, control, ops, label, phase = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
roles = collections.defaultdict(collections.Counter)
for line in open(path):
    f = line.strip().split(",")
    if len(f) < 4 or not f[0] or line.startswith("#"):
        continue
    pid = f[0].rsplit("-", 1)[-1]
    try:
        value = int(f[1])
    except ValueError:
        continue
    role = "master" if pid == master else "control" if pid == control else "workers"
    event = f[3].split(":")[-1].replace("sys_enter_", "")
    event = "syscalls" if event == "sys_enter" else event
    roles[role][event] += value
    roles["all"][event] += value
for role in ("master", "control", "workers", "all"):
    c = roles[role]
    print(f"{label} {phase} {role:8}: " + ", ".join(
        f"{e} {c[e] / ops:.2f}" for e in ("syscalls", "recvfrom", "epoll_wait", "context-switches")) + " per op")
PY
}

run() { # LABEL BINARY ROUND
    local label=$1 bin=$2 spid control ino p curl_pid
    "$bin" serve --listen "127.0.0.1:$PORT" >"$WORK/serve-$label.log" 2>&1 &
    spid=$!
    track_pid "$spid"
    wait_http "127.0.0.1:$PORT" 30
    sleep 3 # every worker is up and has reported
    ino=$(awk -v name="@c1m-publish-$spid" '$8 == name { print $7; exit }' /proc/net/unix)
    control=none
    for p in $(pgrep -P "$spid"); do
        if ls -l "/proc/$p/fd" 2>/dev/null | grep -q "socket:\[$ino\]"; then control=$p; fi
    done
    curl -sN -H 'Accept: text/event-stream' "http://127.0.0.1:$PORT/sub/ab" >/dev/null &
    curl_pid=$!
    sleep 1
    echo "round $3 $label: serve $spid, control worker $control, $(pgrep -P "$spid" | wc -l) workers" | tee -a "$OUTF"
    count_during "$label" publish "$PUBLISHES" "$spid" "$control" publish "$PUBLISHES"
    kill "$curl_pid" 2>/dev/null || true
    count_during "$label" subscribe "$SUBSCRIBES" "$spid" "$control" \
        timeout 120 "$WORK/blockconnect" 127.0.0.1 "$PORT" "$SUBSCRIBES" 2 127.0.1.1 2 /sub/news
    stop_pid "$spid" 30
    wait_sockets_gone
}

for round in $(seq "$ROUNDS"); do
    run A "$SERVE_A" "$round"
    run B "$SERVE_B" "$round"
done
echo "raw: $OUTF"
