#!/usr/bin/env bash
# Records Python mlx-lm's log-probabilities of a prompt's own tokens (what
# `echo` + `logprobs` on /v1/completions reports, and evaluation harnesses
# score answers with) on tiny seeded folders, as the golden of
# crates/engine/tests/engine_tests/prompt_logprobs.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-lm (scripts/ref-venv.sh)
#   2. the tiny folders from the write_tiny_model example (the test writes
#      the same files with fixtures::write_tiny_family, seed 11)
#   3. scripts/goldens/prompt_logprobs.py → crates/engine/tests/goldens/prompt_logprobs_mlx_lm.json
# Idempotent. Runs MLX on the CPU with OpenBLAS preloaded when it is
# installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"

log "writing the tiny folders into $work"
target/debug/examples/write_tiny_model "$work" >/dev/null
log "recording mlx-lm's prompt log-probabilities"
"$ROOT/.venv-ref/bin/python" scripts/goldens/prompt_logprobs.py "$work" \
  "$ROOT/crates/engine/tests/goldens/prompt_logprobs_mlx_lm.json"
