#!/usr/bin/env bash
# Runs each fuzz target for a bounded time: the network parsers in crates/c1m-proto/fuzz
# (HTTP head and framing, chunked bodies, TCP SUB line, WebSocket frames and handshake) and the
# master<->worker ipc codec in crates/c1m-server/fuzz.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default: 60 s, every target
# Works on the stable toolchain: cargo-fuzz needs -Z flags, which RUSTC_BOOTSTRAP=1 allows.
# Any single allocation over 64 MiB counts as a crash (no input-driven unbounded allocation).
# Findings land in crates/CRATE/fuzz/artifacts/TARGET/; replay one with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET fuzz/artifacts/TARGET/crash-…  (in crates/CRATE)
# The same properties also run in plain `cargo test` (crates/c1m-proto/tests/ws_stress.rs and
# http_stress.rs, crates/c1m-server/tests/ipc_stress.rs: 100k-500k generated inputs each).
# scripts/test.sh runs the HTTP/line targets 10 s each.
set -euo pipefail
secs=${1:-60}
shift || true
root="$(cd "$(dirname "$0")/.." && pwd)"
crates=(c1m-proto c1m-server)
export RUSTC_BOOTSTRAP=1

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

# "crate target" lines for every target of every fuzz crate.
declare -A crate_of
for c in "${crates[@]}"; do
  while read -r t; do crate_of[$t]=$c; done < <(cd "$root/crates/$c" && cargo fuzz list)
done
if (($# == 0)); then
  targets=("${!crate_of[@]}")
else
  targets=("$@")
fi

status=0
for t in "${targets[@]}"; do
  c=${crate_of[$t]:-}
  if [ -z "$c" ]; then
    echo "no fuzz target named $t (have: ${!crate_of[*]})" >&2
    exit 2
  fi
  cd "$root/crates/$c"
  mkdir -p "fuzz/corpus/$t" "fuzz/seeds/$t" fuzz/target
  log="fuzz/target/fuzz-$t.log"
  echo "== $t: ${secs}s (log: crates/$c/$log)"
  # New inputs go to the first corpus dir (not committed); seeds/ holds checked-in examples.
  if cargo fuzz run "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=1024 -malloc_limit_mb=64 \
      -max_len=8192 -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^Done [0-9]+ runs|stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$log" || true
    echo "   $t: no crash"
  else
    status=1
    tail -40 "$log"
    echo "   $t: FINDING (see crates/$c/fuzz/artifacts/$t/)"
  fi
done
exit $status
