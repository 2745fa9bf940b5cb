#!/usr/bin/env bash
# failover.sh: the outage a Redis failover costs c1m's publishers and subscribers, per kind of
# failover, measured by the failover tests themselves (crates/c1m/tests/serve_redis_failover.rs:
# two `c1m serve` nodes, 3 channels, a publisher per channel posting every 20 ms to alternating
# nodes, an SSE and a WebSocket subscriber per channel on each node):
#   - Redis Cluster, 3 masters + 3 replicas, cluster-node-timeout 1 s: CLUSTER FAILOVER on a
#     replica; kill -9 of a master (its replica takes over);
#   - one Redis + replica + 3 Sentinels (down-after-milliseconds 1 s, --broker
#     redis+sentinel://): SENTINEL failover; then kill -9 of the new master.
# Publishers' outage: the longest time on a channel with no acknowledged publish (the 503s in
# between are counted). Subscribers' outage: the longest time any subscriber went without a
# message. Each run also checks the delivery rule (every acknowledged publish delivered once, in
# order, or covered by a gap event) and fails if it is broken.
#
# Usage: bench/failover.sh      (needs redis-server 7+, redis-cli; scripts/install-test-deps.sh)
# Writes bench/out/failover.txt (environment, the figures and the raw test output).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
out=bench/out/failover.txt
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
{
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "kernel: $(uname -r); cpus: $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "redis: $(redis-server --version)"
} >"$out"
# One test at a time: the figures are not shared with another test's CPU use.
cargo test --release -p c1m --test suite serve_redis_failover:: -- --test-threads=1 \
    --nocapture >"$raw" 2>&1 || { cat "$raw" >&2; echo "failover tests failed" >&2; exit 1; }
{
    echo
    echo "kind: publishers' outage / subscribers' outage / acknowledged / refused (503) / gaps / resumes"
    grep -E '^(CLUSTER FAILOVER|kill -9 of a master|SENTINEL failover|kill -9 of the Sentinel master):' "$raw" |
        sed -E 's/Outage \{ publish_gap: ([^,]+), subscriber_stall: ([^,]+), acked: ([0-9]+), refused: ([0-9]+), gaps: ([0-9]+), resumes: ([0-9]+) \}/\1 \/ \2 \/ \3 \/ \4 \/ \5 \/ \6/'
    echo
    echo "--- raw output"
    grep -vE '^serve: |^[0-9T:.-]+Z +(INFO|WARN)' "$raw"
} >>"$out"
sed -n '1,/^--- raw output/p' "$out"
