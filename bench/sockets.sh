#!/usr/bin/env bash
# bench/sockets.sh N — time `c1m sockets` against `ss -tan | wc -l` and `wc -l /proc/net/tcp`
# with N loopback connections (2N sockets) held open, then clean up.
#
# The connections are made by a small Python helper, one process per PER_PROC connections
# (each process holds both ends, so 2 × PER_PROC descriptors: RLIMIT_NOFILE is 20000 per
# process on this project's machines). Each process uses its own source address in
# 127.201.0.0/16, so no source address runs out of ephemeral ports.
#
# Env: C1M=path to the c1m binary (default: build --release), PER_PROC (default 9000),
#      RUNS (timed runs per command, best kept; default 3), PEER_C1M=another c1m binary
#      (e.g. built before a change) timed in the same run as "c1m(peer)".
set -euo pipefail

N=${1:-100000}
PER_PROC=${PER_PROC:-9000}
RUNS=${RUNS:-3}
source "$(dirname "$0")/lib.sh" # ROOT, c1m_binary
c1m_binary
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

cat > "$WORK/hold.py" <<'PY'
# hold.py INDEX COUNT READY_FILE: opens COUNT loopback connections from 127.201.x.y to its
# own listener, writes READY_FILE, and holds them until SIGTERM (at most 1 hour).
import resource, signal, socket, struct, sys, time
idx, count, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
src = "127.201.%d.%d" % (idx // 250, idx % 250 + 1)
lst = socket.socket()
lst.bind((src, 0))
lst.listen(4096)
dest = lst.getsockname()
held = []
IP_BIND_ADDRESS_NO_PORT = 24  # ports chosen at connect() per 4-tuple
for _ in range(count):
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
    c.bind((src, 0))
    c.connect(dest)
    s, _ = lst.accept()
    held.append((c, s))
def reset_all(*_):
    # Close with RST (SO_LINGER 0) so N connections leave no TIME_WAIT sockets behind to
    # crowd tcp_max_tw_buckets for everyone else on the box.
    for pair in held:
        for sk in pair:
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sk.close()
    sys.exit(0)
signal.signal(signal.SIGTERM, reset_all)
open(ready, "w").write(str(len(held)))
time.sleep(3600)
PY

procs=$(( (N + PER_PROC - 1) / PER_PROC ))
left=$N
t0=$(date +%s.%N)
for ((i = 0; i < procs; i++)); do
  n=$(( left < PER_PROC ? left : PER_PROC ))
  left=$(( left - n ))
  python3 "$WORK/hold.py" "$i" "$n" "$WORK/ready.$i" &
  PIDS+=($!)
done
# Wait (bounded: 10 minutes) for every helper to report its connections.
for ((w = 0; w < 6000; w++)); do
  ready=$(ls "$WORK" | grep -c '^ready\.' || true)
  [[ $ready -ge $procs ]] && break
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || { echo "helper $p died" >&2; exit 2; }; done
  sleep 0.1
done
[[ $ready -ge $procs ]] || { echo "helpers not ready after 10 minutes" >&2; exit 2; }
t1=$(date +%s.%N)

# best_of CMD: runs CMD RUNS times; prints the fastest wall time and that run's CPU time
# (user + sys, children included), in seconds. The CPU figure is the cost itself; wall time
# also shows how busy the box was. Stdout of the last run is left in $WORK/out.
best_of() {
  local best="" cpu=""
  for ((r = 0; r < RUNS; r++)); do
    /usr/bin/time -f "%e %U %S" -o "$WORK/time" bash -c "$1" > "$WORK/out"
    read -r e u s < "$WORK/time"
    if [[ -z $best ]] || (( $(echo "$e < $best" | bc) )); then
      best=$e
      cpu=$(printf "%.2f" "$(echo "$u + $s" | bc)")
    fi
  done
  printf '%s %s\n' "$best" "$cpu"
}

echo "# c1m sockets benchmark"
echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "kernel:  $(uname -r)   cpus: $(nproc)   mem: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "held:    $N loopback connections ($((2 * N)) sockets) in $procs processes, opened in $(echo "$t1 - $t0" | bc) s"
echo "runs:    best of $RUNS (wall); cpu = user + sys of that run"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min)"
echo
printf '| %-44s | %8s | %8s | %s\n' "command" "wall s" "cpu s" "result"
printf '|%s|%s|%s|%s\n' "----------------------------------------------" "----------" "----------" "--------"
PEER_CMDS=()
if [[ -n ${PEER_C1M:-} ]]; then
  PEER_CMDS=("$PEER_C1M sockets --threads 1" "$PEER_C1M sockets --threads 2")
fi
for cmd in \
  "${PEER_CMDS[@]}" \
  "$C1M sockets" \
  "$C1M sockets --threads 1" \
  "$C1M sockets --threads 2" \
  "$C1M sockets --state estab" \
  "$C1M sockets --by lport --limit 3" \
  "ss -tan | wc -l" \
  "ss -s" \
  "wc -l /proc/net/tcp /proc/net/tcp6"; do
  read -r t c < <(best_of "$cmd")
  case $cmd in
    *" sockets --by"*) res=$(grep TOTAL "$WORK/out" | awk '{print "total " $2}') ;;
    *" sockets"*) res=$(grep TOTAL "$WORK/out" | awk '{print "total " $2}') ;;
    "ss -s") res=$(grep '^TCP:' "$WORK/out" | cut -c1-60) ;;
    "wc -l"*) res=$(tail -1 "$WORK/out" | awk '{print $1 " lines"}') ;;
    *) res="$(cat "$WORK/out") lines" ;;
  esac
  label=${cmd/${PEER_C1M:-/nonexistent}/c1m(peer)}
  printf '| %-44s | %8s | %8s | %s\n' "${label/$C1M/c1m}" "$t" "$c" "$res"
done
echo
echo "c1m sockets (by state) at the end of the run:"
"$C1M" sockets
