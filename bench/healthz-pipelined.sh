#!/usr/bin/env bash
# healthz-pipelined.sh: what a client pipelining health checks costs serve. One connection
# sends N `GET /healthz` back to back (written in one go, read to the last answer) to serve
# on `--workers 1`, for SERVE_A and SERVE_B alternately. Figures per run: wall time, the
# answers counted (every one must be `200`), and serve's CPU per check (utime + stime of its
# process tree over the run / N), master and worker together: each check is a round trip
# between them.
# Usage: SERVE_A=/path/old SERVE_B=/path/new bench/healthz-pipelined.sh [N]   (default 40000)
# Env: ROUNDS (3), PORT (18695).
set -euo pipefail
N=${1:-40000}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-18695}
source "$(dirname "$0")/lib.sh" # OUT, work_dir, track_pid, stop_pid, tree_cpu_ticks
: "${SERVE_A:?SERVE_A=binary}" "${SERVE_B:?SERVE_B=binary}"
work_dir
HZ=$(getconf CLK_TCK)
OUTF="$OUT/healthz-pipelined-$N-$(date -u +%Y%m%dT%H%MZ).txt"
echo "# healthz-pipelined: $N checks on one connection, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUTF"

client() { # -> "answers A ok O seconds S"
    timeout 300 python3 - "$PORT" "$N" <<'PY'
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(30)
req = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
t0 = time.monotonic()
s.sendall(req * n)
buf, answers, ok = b"", 0, 0
while answers < n:
    chunk = s.recv(1 << 16)
    if not chunk:
        break
    buf += chunk
    while True:
        head_end = buf.find(b"\r\n\r\n")
        if head_end < 0:
            break
        head = buf[:head_end].decode("latin-1")
        length = 0
        for line in head.split("\r\n")[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v)
        if len(buf) < head_end + 4 + length:
            break
        answers += 1
        ok += head.startswith("HTTP/1.1 200")
        buf = buf[head_end + 4 + length:]
print(f"answers {answers} ok {ok} seconds {time.monotonic() - t0:.2f}")
PY
}

serve_run() { # LABEL BINARY ROUND
    local label=$1 bin=$2 round=$3 spid before after line
    "$bin" serve --listen "127.0.0.1:$PORT" --workers 1 >"$WORK/serve-$label.log" 2>&1 &
    spid=$!
    track_pid "$spid"
    wait_http "127.0.0.1:$PORT" 30
    sleep 1
    before=$(tree_cpu_ticks "$spid")
    line=$(client)
    after=$(tree_cpu_ticks "$spid")
    echo "round $round $label: $line; serve cpu $(((after - before) * 1000000 / HZ / N)) us/check" | tee -a "$OUTF"
    stop_pid "$spid" 30
}

for round in $(seq "$ROUNDS"); do
    serve_run A "$SERVE_A" "$round"
    serve_run B "$SERVE_B" "$round"
done
echo "raw: $OUTF"
