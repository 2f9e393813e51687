#!/usr/bin/env bash
# Records Python mlx-lm's speculative decoding (speculative_generate_step,
# greedy, a fixed number of draft tokens) on a tiny seeded target and draft,
# as the golden of crates/engine/tests/engine_tests/speculative_reference.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-lm (scripts/ref-venv.sh)
#   2. the pair from `write_tiny_model --speculative-pair` (the test writes
#      the same files with engine::testing::write_speculative_pair)
#   3. scripts/goldens/speculative.py → crates/engine/tests/goldens/speculative_mlx_lm.json
# Idempotent. Runs MLX on the CPU with OpenBLAS preloaded when it is
# installed, the BLAS our binaries link.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '\033[1mmake-speculative-golden:\033[0m %s\n' "$*" >&2; }

scripts/ref-venv.sh

work="$(mktemp -d "${TMPDIR:-/tmp}/speculative-golden.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "writing the tiny pair into $work"
# Same flags as the test build, so nothing rebuilds with other features.
cargo build -q --workspace --all-targets
target/debug/examples/write_tiny_model --speculative-pair "$work" >/dev/null

openblas="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 .*(x86-64|AArch64)/ && !found {found = $NF} END {print found}')"
if [ -n "$openblas" ]; then
  export LD_PRELOAD="$openblas${LD_PRELOAD:+:$LD_PRELOAD}"
fi
log "recording mlx-lm's speculative decoding"
"$ROOT/.venv-ref/bin/python" scripts/goldens/speculative.py "$work" \
  "$ROOT/crates/engine/tests/goldens/speculative_mlx_lm.json"
