#!/usr/bin/env bash
# gpt-oss in MXFP4 as mlx-lm converts it: the tiny float gpt-oss (the
# write_tiny_model example) through mlx-lm 0.32.2's `convert --q-mode mxfp4`
# into crates/engine/tests/fixtures/gpt_oss_mxfp4/, and mlx-lm's logits and
# greedy ids on that folder into crates/engine/tests/goldens/tiny_gpt_oss_mxfp4_mlx_lm.json
# (scripts/goldens/gpt_oss_mxfp4.py). Idempotent. MLX on the CPU with
# OpenBLAS preloaded when installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"

log "writing the tiny folders into $work"
target/debug/examples/write_tiny_model "$work" >/dev/null
log "converting with mlx-lm and recording its outputs"
PYTHONPATH="$ROOT/scripts/goldens" "$ROOT/.venv-ref/bin/python" scripts/goldens/gpt_oss_mxfp4.py \
  "$work/gpt_oss/float" crates/engine/tests/fixtures/gpt_oss_mxfp4 \
  crates/engine/tests/goldens/tiny_gpt_oss_mxfp4_mlx_lm.json
