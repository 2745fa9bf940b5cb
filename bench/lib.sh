# bench/lib.sh: sourced by the bench/*.sh scripts (not run on its own). One place for what
# they all do: find the repository, build or locate the c1m binary, start `c1m serve` on
# loopback and wait for it, and clean up every process they started on exit.
#
#   source "$(dirname "$0")/lib.sh"
#   c1m_binary                      # sets C1M (builds target/release/c1m unless C1M is set)
#   start_serve LOG ARGS...         # c1m serve ARGS in the background; sets SERVE_PID
#   wait_http HOST:PORT [SECS]      # until GET /healthz answers (bounded, default 10 s)
#   on_exit 'command'               # run at exit, after the processes are stopped

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
OUT="$BENCH_DIR/out"
mkdir -p "$OUT"
_BENCH_PIDS=()
_BENCH_EXIT=()

_bench_cleanup() {
    local pid cmd
    for pid in "${_BENCH_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${_BENCH_PIDS[@]}"; do
        # Bounded: a process that ignores SIGTERM for 15 s is killed.
        for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    for cmd in "${_BENCH_EXIT[@]}"; do eval "$cmd" || true; done
}
trap _bench_cleanup EXIT

on_exit() { _BENCH_EXIT+=("$1"); }

# Remembers a background process to stop at exit.
track_pid() { _BENCH_PIDS+=("$1"); }

c1m_binary() {
    if [ -z "${C1M:-}" ]; then
        (cd "$ROOT" && timeout 900 cargo build --release -q -p c1m)
        C1M="$ROOT/target/release/c1m"
    fi
    export C1M
}

wait_http() {
    local addr=$1 secs=${2:-10} i
    for i in $(seq $((secs * 10))); do
        if curl -fsS -o /dev/null "http://$addr/healthz" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "bench: nothing answers on http://$addr/healthz after ${secs}s" >&2
    return 1
}

start_serve() {
    local log=$1
    shift
    "$C1M" serve "$@" >"$log" 2>&1 &
    SERVE_PID=$!
    track_pid "$SERVE_PID"
}
