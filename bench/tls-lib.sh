# bench/tls-lib.sh: sourced by bench/tls-memory.sh and bench/tls-handshakes.sh (after lib.sh).
# A throw-away ECDSA P-256 certificate for 127.0.0.1 (openssl CLI), nginx + nchan over TLS
# started in the foreground under lib.sh's cleanup, and Σ PSS of a process tree.
#
#   make_cert DIR                   # DIR/cert.pem, DIR/key.pem (self-signed, SAN 127.0.0.1)
#   start_nginx DIR PORT WORKERS    # nginx + nchan with TLS on PORT; sets NGINX_PID
#   pss_tree PID                    # "BYTES PROCESSES": Σ Pss of PID and its children
#   cpu_ticks PID                   # utime + stime of PID, in clock ticks

make_cert() {
    local dir=$1
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout "$dir/key.pem" -out "$dir/cert.pem" -subj /CN=127.0.0.1 \
        -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null
}

start_nginx() {
    local dir=$1 port=$2 workers=$3
    mkdir -p "$dir/nginx/logs"
    cat >"$dir/nginx/nginx.conf" <<EOF
load_module /usr/lib/nginx/modules/ngx_nchan_module.so;
daemon off;
master_process on;
worker_processes $workers;
worker_rlimit_nofile 20000;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/logs/error.log warn;
events { worker_connections 19000; multi_accept on; }
http {
    access_log off;
    client_body_temp_path $dir/nginx/body;
    proxy_temp_path $dir/nginx/proxy;
    fastcgi_temp_path $dir/nginx/fastcgi;
    uwsgi_temp_path $dir/nginx/uwsgi;
    scgi_temp_path $dir/nginx/scgi;
    nchan_shared_memory_size 256m;
    server {
        listen 127.0.0.1:$port ssl reuseport;
        ssl_certificate $dir/cert.pem;
        ssl_certificate_key $dir/key.pem;
        location ~ ^/sub/(\w+)$ { nchan_subscriber; nchan_channel_id \$1; }
        location ~ ^/pub/(\w+)$ { nchan_publisher; nchan_channel_id \$1; }
    }
}
EOF
    nginx -p "$dir/nginx" -c "$dir/nginx/nginx.conf" >"$dir/nginx/logs/stdout" 2>&1 &
    NGINX_PID=$!
    track_pid "$NGINX_PID"
    for _ in $(seq 100); do
        code=$(curl -ks -o /dev/null -w '%{http_code}' -m 1 "https://127.0.0.1:$port/pub/probe" || true)
        if [ "$code" != "000" ] && [ -n "$code" ]; then return 0; fi
        sleep 0.1
    done
    echo "bench: nginx did not start; see $dir/nginx/logs" >&2
    return 1
}

pss_tree() {
    local root=$1 total=0 n=0 pid kb
    for pid in "$root" $(cat /proc/"$root"/task/*/children 2>/dev/null); do
        kb=$(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || true)
        [ -n "$kb" ] || continue
        total=$((total + kb * 1024)); n=$((n + 1))
    done
    echo "$total $n"
}

cpu_ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat"
}
