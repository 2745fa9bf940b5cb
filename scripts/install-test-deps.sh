#!/usr/bin/env bash
# Debian packages the tests use, installed only when missing (idempotent, quiet).
set -euo pipefail
# curl: an independent SSE client; iproute2 (ip), util-linux (unshare, prlimit): doctor live tests
# (ip also builds the network namespace of serve_operations' dead_peer_reaped);
# tmux: drives `c1m top` as a terminal; python3 and gcc: bench/ helpers; chromium: the browser test;
# haproxy: the front proxy of crates/c1m/tests/serve_smuggling_haproxy.rs (fails under CI if absent).
# openssl: `openssl s_client`, the raw-TCP-over-TLS client of crates/c1m/tests/serve_tls.rs
# (curl there is the HTTPS client); it also generates keys and signs RS256/ES256/EdDSA tokens for crates/c1m/tests/serve_auth.rs
# (with python3, through tests/auth/mint.py: an implementation independent of the server's).
# systemd (systemd-analyze verify), dpkg-dev (cargo-deb's dpkg-shlibdeps), binutils (readelf, and
# objcopy for the -dbgsym package): the packaging tests of
# crates/c1m/tests/serve_packaging.rs; nodejs (node 20 + npm): clients/js unit tests and build,
# whose output crates/c1m/tests/serve_js_client.rs loads into chromium.
# libnss3-tools (certutil): the test CA goes into Chromium's NSS database in
# crates/c1m/tests/serve_browser_auth.rs (TLS case), as a user's browser would trust a CA.
needed=(curl iproute2 util-linux procps tmux python3 gcc binutils chromium haproxy openssl systemd dpkg-dev nodejs libnss3-tools)
# nginx-light + libnginx-mod-nchan: the peer server that crates/c1m/tests/bench_nchan.rs and
# bench/peers.sh measure c1m bench against (nginx is started from a temp prefix, never the service).
needed+=(nginx-light libnginx-mod-nchan)
# redis-server: the cluster broker of crates/c1m/tests/serve_cluster.rs (with haproxy in front).
needed+=(redis-server)
# redis-tools (redis-cli; redis-server pulls it in, named so a change there cannot drop it) and
# openssl (mints the CA and server certificate of the rediss:// test): crates/c1m/tests/
# serve_cluster_auth.rs, serve_cluster_tls.rs, serve_publish_idempotency.rs (redis5).
needed+=(redis-tools openssl)
# redis-sentinel: the Sentinel failover test of crates/c1m/tests/serve_redis_failover.rs (the
# test runs the Sentinels as `redis-server --sentinel`; the package names the dependency).
needed+=(redis-sentinel)
# prometheus: its promtool checks the real /metrics body in crates/c1m/tests/serve_metrics.rs.
needed+=(prometheus)
# python3-h2: an independent HTTP/2 client (into Debian's /usr/bin/python3) that
# crates/c1m-proto/tests/h2_python.rs drives against the HTTP/2 codec over pipes, and
# crates/c1m/tests/http2/*.py against the server; python3-wsproto: the WebSocket frame codec
# of tests/http2/websocket.py (WebSocket over HTTP/2, serve_http2_websocket.rs).
needed+=(python3-h2 python3-wsproto)
missing=()
for pkg in "${needed[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian's own nodejs comes without npm (nodesource's includes it): add Debian's npm then.
if ! command -v npm >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
fi

# h2spec: the HTTP/2 conformance suite, run against h2c by crates/c1m/tests/serve_http2.rs. A Go
# module (github.com/summerwind/h2spec), built with Debian's or the machine's go into ~/go/bin;
# its latest release resolves as v2.2.1+incompatible (the proxy refuses v2.6.0).
if [ ! -x "$HOME/go/bin/h2spec" ]; then
  command -v go >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null
  go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible
fi

# cargo-deb builds the .deb that crates/c1m/tests/serve_packaging.rs checks extracted into a temp
# directory (never installed on the host).
# Installed once per machine (skipped when present, like cargo-fuzz in scripts/fuzz.sh);
# measured: 11m05s to compile its 69 crates on the shared 2-core dev box (load average ~27:
# five engineers building); not measured on an idle box. The packaging tests then take ~7 s.
command -v cargo-deb >/dev/null || cargo install cargo-deb --locked
