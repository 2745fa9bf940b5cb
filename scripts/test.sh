#!/usr/bin/env bash
# The project's test command (README's second line; .ci/run calls it).
# Installs what the tests need on a fresh machine, then runs format, lint and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-test-deps.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --workspace --release -- --test-threads=2
