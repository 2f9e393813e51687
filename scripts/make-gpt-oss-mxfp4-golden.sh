#!/usr/bin/env bash
# gpt-oss in MXFP4 as mlx-lm converts it: the tiny float gpt-oss (the
# write_tiny_model example) through mlx-lm 0.32.2's `convert --q-mode mxfp4`
# into crates/engine/tests/fixtures/gpt_oss_mxfp4/, and mlx-lm's logits and
# greedy ids on that folder into crates/engine/tests/goldens/tiny_gpt_oss_mxfp4_mlx_lm.json
# (scripts/goldens/gpt_oss_mxfp4.py). Idempotent. MLX on the CPU with
# OpenBLAS preloaded when installed, the BLAS our binaries link.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '\033[1mmake-gpt-oss-mxfp4-golden:\033[0m %s\n' "$*" >&2; }

scripts/ref-venv.sh
work="$(mktemp -d "${TMPDIR:-/tmp}/gpt-oss-mxfp4.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Same flags as the test build, so nothing rebuilds with other features.
cargo build -q --workspace --all-targets
target/debug/examples/write_tiny_model "$work" >/dev/null

openblas="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 .*(x86-64|AArch64)/ && !found {found = $NF} END {print found}')"
if [ -n "$openblas" ]; then
  log "preloading $openblas"
  export LD_PRELOAD="$openblas${LD_PRELOAD:+:$LD_PRELOAD}"
fi
log "converting with mlx-lm and recording its outputs"
PYTHONPATH="$ROOT/scripts/goldens" "$ROOT/.venv-ref/bin/python" scripts/goldens/gpt_oss_mxfp4.py \
  "$work/gpt_oss/float" crates/engine/tests/fixtures/gpt_oss_mxfp4 \
  crates/engine/tests/goldens/tiny_gpt_oss_mxfp4_mlx_lm.json
