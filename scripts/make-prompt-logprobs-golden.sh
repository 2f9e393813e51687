#!/usr/bin/env bash
# Records Python mlx-lm's log-probabilities of a prompt's own tokens (what
# `echo` + `logprobs` on /v1/completions reports, and evaluation harnesses
# score answers with) on tiny seeded folders, as the golden of
# crates/engine/tests/engine_tests/prompt_logprobs.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-lm (scripts/ref-venv.sh)
#   2. the tiny folders from the write_tiny_model example (the test writes
#      the same files with engine::testing::write_tiny_family, seed 11)
#   3. scripts/goldens/prompt_logprobs.py → crates/engine/tests/goldens/prompt_logprobs_mlx_lm.json
# Idempotent. Runs MLX on the CPU with OpenBLAS preloaded when it is
# installed, the BLAS our binaries link.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '\033[1mmake-prompt-logprobs-golden:\033[0m %s\n' "$*" >&2; }

scripts/ref-venv.sh

work="$(mktemp -d "${TMPDIR:-/tmp}/prompt-logprobs-golden.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "writing the tiny folders into $work"
# Same flags as the test build, so nothing rebuilds with other features.
cargo build -q --workspace --all-targets
target/debug/examples/write_tiny_model "$work" >/dev/null

openblas="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 .*(x86-64|AArch64)/ && !found {found = $NF} END {print found}')"
if [ -n "$openblas" ]; then
  export LD_PRELOAD="$openblas${LD_PRELOAD:+:$LD_PRELOAD}"
fi
log "recording mlx-lm's prompt log-probabilities"
"$ROOT/.venv-ref/bin/python" scripts/goldens/prompt_logprobs.py "$work" \
  "$ROOT/crates/engine/tests/goldens/prompt_logprobs_mlx_lm.json"
