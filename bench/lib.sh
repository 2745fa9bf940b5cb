# bench/lib.sh: sourced by the bench/*.sh scripts (not run on its own). One place for what
# they all do: find the repository, build or locate the c1m binary, start `c1m serve` on
# loopback and wait for it, and clean up every process they started on exit.
#
#   source "$(dirname "$0")/lib.sh"
#   c1m_binary                      # sets C1M (builds target/release/c1m unless C1M is set)
#   start_serve LOG ARGS...         # c1m serve ARGS in the background; sets SERVE_PID
#   wait_http HOST:PORT [SECS]      # until GET /healthz answers (bounded, default 10 s)
#   on_exit 'command'               # run at exit, after the processes are stopped
#   wait_port HOST PORT [SECS]      # until a TCP connect succeeds (bounded, default 10 s)
#   stop_pid PID [SECS]             # SIGTERM, up to SECS (10) to exit, then SIGKILL (children too)
#   untrack_pid PID                 # forget a tracked process that ended and was waited for
#   tree_pss PID                    # PSS bytes of PID plus its children (a master and its workers)
#   tree_procs PID                  # how many processes tree_pss counts
#   cpu_ticks PID                   # utime + stime of PID, in clock ticks (getconf CLK_TCK)
#   wait_sockets_gone               # until under 2,000 TCP sockets are in use (bounded, 120 s)
#   work_dir                        # sets WORK: $KEEP_WORK if set (kept), else a temp dir removed at exit
#   make_cert DIR                   # DIR/cert.pem, DIR/key.pem: throw-away ECDSA P-256, SAN 127.0.0.1
#   ensure_nchan                    # installs nginx-light + libnginx-mod-nchan when missing
#   start_nchan DIR PORT WORKERS [CERT_DIR]
#                                   # nginx+nchan from its own prefix DIR (TLS with CERT_DIR's
#                                   # cert.pem/key.pem; NCHAN_LISTEN=http2 for HTTP/2, h2c
#                                   # with prior knowledge without TLS); sets NCHAN_PID
#   sysctl_raise KEY VALUE          # sysctl -w only when the live value is lower (root);
#                                   # the old value is put back by sysctl_restore
#   sysctl_raise_for_conns N        # what holding N loopback connections needs (no-op below 200K)
#   sysctl_restore                  # puts back every value raised (registered with on_exit
#                                   # at the first raise; scripts with their own EXIT trap call it)
# SYSCTL_LOG names the function the sysctl lines go to (default echo).

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
OUT="${OUT:-$BENCH_DIR/out}"
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
# A script stopped by a signal (timeout(1), Ctrl-C, a closed pipe) still runs the cleanup.
trap 'exit 130' INT TERM PIPE HUP

on_exit() { _BENCH_EXIT+=("$1"); }

# Remembers a background process to stop at exit.
track_pid() { _BENCH_PIDS+=("$1"); }

c1m_binary() {
    if [ -z "${C1M:-}" ]; then
        (cd "$ROOT" && timeout 900 cargo build --release -q -p c1m)
        C1M="$ROOT/target/release/c1m"
    fi
    # The server may be another build than the load generator (bench/ab.sh: the same bench
    # against two servers).
    SERVE_C1M=${SERVE_C1M:-$C1M}
    export C1M SERVE_C1M
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

# The benchmarks share two cores with their load generator and compare serve with peers that
# run at one priority: serve's subscriber workers stay at the load's priority unless
# C1M_WORKER_NICE (or a --worker-nice flag) says otherwise. Serve's own default, 10, would
# hand bench the CPU first and move every figure measured beside it.
start_serve() {
    local log=$1
    shift
    C1M_WORKER_NICE=${C1M_WORKER_NICE:-0} "${SERVE_C1M:-$C1M}" serve "$@" >"$log" 2>&1 &
    SERVE_PID=$!
    track_pid "$SERVE_PID"
}

wait_port() {
    local host=$1 port=$2 secs=${3:-10} i
    for i in $(seq $((secs * 10))); do
        if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "bench: nothing listens on $host:$port after ${secs}s" >&2
    return 1
}

# Stops one process we started, bounded; if it has to be killed, its children (nginx workers
# outlive a killed master) are killed too, by parent id.
stop_pid() {
    local pid=$1 secs=${2:-10}
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $((secs * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        pkill -KILL -P "$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    untrack_pid "$pid"
}

# Forgets a tracked process that has ended and been waited for, so the exit cleanup never
# signals a reused pid.
untrack_pid() {
    local keep=() p
    for p in "${_BENCH_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    _BENCH_PIDS=("${keep[@]}")
}

tree_pss() {
    local pid=$1 total=0 p kb
    for p in "$pid" $(pgrep -P "$pid" 2>/dev/null); do
        kb=$(awk '/^Pss:/ { print $2; exit }' "/proc/$p/smaps_rollup" 2>/dev/null || true)
        total=$((total + ${kb:-0} * 1024))
    done
    echo "$total"
}

tree_procs() {
    local pid=$1
    echo $(($(pgrep -P "$pid" 2>/dev/null | wc -l) + 1))
}

cpu_ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat"
}

# utime + stime of PID and its children, in clock ticks (getconf CLK_TCK per second). A
# server's workers live as long as the run, so nothing it spent is left in cutime.
tree_cpu_ticks() {
    local pid=$1 p
    for p in "$pid" $(pgrep -P "$pid" 2>/dev/null); do
        # comm (field 2) may hold spaces: count fields from the closing parenthesis.
        sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null || true
    done | awk '{ t += $12 + $13 } END { print t + 0 }'
}

# Waits (up to 120 s) until fewer than 2,000 TCP sockets are in use on the box: the last
# run's connections are closed before the next run opens its own.
wait_sockets_gone() {
    for _ in $(seq 120); do
        [ "$(awk '/^TCP:/ {print $3}' /proc/net/sockstat)" -lt 2000 ] && return 0
        sleep 1
    done
}

work_dir() {
    if [ -n "${KEEP_WORK:-}" ]; then
        WORK=$KEEP_WORK
        mkdir -p "$WORK"
    else
        WORK=$(mktemp -d)
        on_exit "rm -rf '$WORK'"
    fi
}

make_cert() {
    local dir=$1
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout "$dir/key.pem" -out "$dir/cert.pem" -subj /CN=127.0.0.1 \
        -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null
}

ensure_nchan() {
    if [ ! -e /usr/lib/nginx/modules/ngx_nchan_module.so ] || ! command -v nginx >/dev/null; then
        echo "installing nginx-light libnginx-mod-nchan (Debian packages)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light libnginx-mod-nchan >/dev/null
    fi
}

# nginx + nchan on 127.0.0.1:PORT from prefix DIR (never /etc/nginx or the system service):
# /pub/CH publishes (POST), /sub/CH subscribes (EventSource and WebSocket). WORKERS processes
# of up to 19,000 connections each (the hard nofile limit is per process), SO_REUSEPORT so
# the kernel spreads accepts over workers as it does for c1m serve's. New subscribers get only
# new messages (nchan's default replays the channel's stored history to them).
start_nchan() {
    local dir=$1 port=$2 workers=$3 certs=${4:-} tls="${NCHAN_LISTEN:-}"
    mkdir -p "$dir"
    if [ -n "$certs" ]; then
        tls="$tls ssl;
    ssl_certificate $certs/cert.pem;
    ssl_certificate_key $certs/key.pem"
    fi
    cat >"$dir/nginx.conf" <<NGINX
load_module /usr/lib/nginx/modules/ngx_nchan_module.so;
daemon off;
master_process on;
worker_processes $workers;
worker_rlimit_nofile 19500;
error_log $dir/error.log error;
pid $dir/nginx.pid;
events { worker_connections 19000; multi_accept on; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  nchan_shared_memory_size 512M;
  server {
    listen 127.0.0.1:$port reuseport backlog=65535 $tls;
    location ~ ^/pub/(.+)\$ { nchan_publisher; nchan_channel_id \$1; nchan_message_buffer_length 16; nchan_message_timeout 60s; }
    location ~ ^/sub/(.+)\$ { nchan_subscriber; nchan_channel_id \$1; nchan_subscriber_first_message newest; }
    location = /healthz { return 200 "ok\n"; }
  }
}
NGINX
    nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" &
    NCHAN_PID=$!
    track_pid "$NCHAN_PID"
}

# Kernel settings for a run: raised only when lower, restored on exit (a SIGTERM/SIGINT also
# runs the EXIT trap above, so a killed run does not leave them raised).
declare -A _SYSCTL_BEFORE=()
_SYSCTL_TRAPPED=0
sysctl_raise() {
    local k=$1 v=$2 cur
    cur=$(sysctl -n "$k" 2>/dev/null | tr '\t' ' ') || return 0
    [ -n "$cur" ] || return 0
    if [ "${cur%% *}" -lt "${v%% *}" ]; then
        if [ "$_SYSCTL_TRAPPED" = 0 ]; then
            on_exit sysctl_restore
            _SYSCTL_TRAPPED=1
        fi
        _SYSCTL_BEFORE[$k]=$cur
        sysctl -q -w "$k=$v"
        ${SYSCTL_LOG:-echo} "raised $k: $cur -> $(sysctl -n "$k" | tr '\t' ' ') (restored on exit)"
    else
        ${SYSCTL_LOG:-echo} "kept $k = $cur"
    fi
}

sysctl_restore() {
    local k
    [ "${#_SYSCTL_BEFORE[@]}" -gt 0 ] || return 0
    for k in "${!_SYSCTL_BEFORE[@]}"; do
        sysctl -q -w "$k=${_SYSCTL_BEFORE[$k]}" || echo "could not restore $k" >&2
    done
    ${SYSCTL_LOG:-echo} "restored: $(for k in "${!_SYSCTL_BEFORE[@]}"; do printf '%s=%s; ' "$k" "$(sysctl -n "$k" | tr '\t' ' ')"; done)"
    _SYSCTL_BEFORE=()
}

sysctl_raise_for_conns() {
    local n=$1
    [ "$n" -gt 200000 ] || return 0
    if [ "$(id -u)" != 0 ]; then
        echo "bench: $n connections need raised sysctls (accept queues, tcp_mem, backlog): run as root" >&2
        return 1
    fi
    sysctl_raise net.core.somaxconn 16384
    sysctl_raise net.ipv4.tcp_max_syn_backlog 16384
    sysctl_raise net.ipv4.tcp_mem "750000 1000000 1500000"
    # Loopback hands every packet to the per-CPU input backlog. Keepalive timers of connections
    # accepted in the same second fire in the same timer-wheel tick: at 1M idle connections
    # (--sse-heartbeat 0) bursts of probes overflowed the default 1000, every probe of ~336K
    # connections was dropped and serve's TCP_USER_TIMEOUT declared them dead (2026-11-26T02:58Z,
    # softnet_stat column 2 +6M, TCPAbortOnTimeout 335,983; BENCHMARKS.md "1M with the control worker").
    sysctl_raise net.core.netdev_max_backlog 65536
    if [ -e /proc/sys/net/netfilter/nf_conntrack_max ]; then
        ${SYSCTL_LOG:-echo} "nf_conntrack_count before: $(cat /proc/sys/net/netfilter/nf_conntrack_count)"
        sysctl_raise net.netfilter.nf_conntrack_max 1250000
    fi
    sysctl_raise fs.file-max $((n * 2 + 100000))
}
