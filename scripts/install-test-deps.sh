#!/usr/bin/env bash
# Debian packages the tests use, installed only when missing (idempotent, quiet).
set -euo pipefail
# curl: an independent SSE client; iproute2 (ip), util-linux (unshare, prlimit): doctor live tests
# (ip also builds the network namespace of serve_operations' item8_dead_peer_reaped);
# tmux: drives `c1m top` as a terminal; python3 and gcc: bench/ helpers; chromium: the browser test;
# haproxy: the front proxy of crates/c1m/tests/serve_smuggling_haproxy.rs (fails under CI if absent).
# redis-server: the cluster broker of crates/c1m/tests/serve_cluster.rs (with haproxy in front).
needed=(curl iproute2 util-linux procps tmux python3 gcc chromium haproxy redis-server)
missing=()
for pkg in "${needed[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
