#!/usr/bin/env bash
# abuse.sh: the abuse suite — every request, peer behaviour and signal that once broke
# c1m serve, replayed against servers it starts on loopback (bench/abuse.py holds the cases).
# Prints one line per case (sent | expected | seen) and a summary: worker deaths and messages
# lost without a gap event, both must be 0. Exit 0 when every case holds.
# Usage: bench/abuse.sh   Env: PORT (first of 8 ports, default 18700), C1M (binary to test),
# ONLY (comma-separated case names, e.g. ONLY=item2,item7).
# Writes bench/out/abuse.txt; server logs in bench/out/abuse-*.log. Takes about a minute.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
c1m_binary
LOG_DIR="$OUT" python3 "$BENCH_DIR/abuse.py" "$C1M" | tee "$OUT/abuse.txt"
exit "${PIPESTATUS[0]}"
