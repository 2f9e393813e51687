#!/usr/bin/env bash
# Records Python mlx-lm's speculative decoding (speculative_generate_step,
# greedy, a fixed number of draft tokens) on a tiny seeded target and draft,
# as the golden of crates/engine/tests/engine_tests/speculative_reference.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-lm (scripts/ref-venv.sh)
#   2. the pair from `write_tiny_model --speculative-pair` (the test writes
#      the same files with fixtures::write_speculative_pair)
#   3. scripts/goldens/speculative.py → crates/engine/tests/goldens/speculative_mlx_lm.json
# Idempotent. Runs MLX on the CPU with OpenBLAS preloaded when it is
# installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"

log "writing the tiny folders into $work"
target/debug/examples/write_tiny_model --speculative-pair "$work" >/dev/null
log "recording mlx-lm's speculative decoding"
"$ROOT/.venv-ref/bin/python" scripts/goldens/speculative.py "$work" \
  "$ROOT/crates/engine/tests/goldens/speculative_mlx_lm.json"
