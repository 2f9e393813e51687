#!/usr/bin/env bash
# Records Python mlx-lm's QuantizedKVCache greedy ids, and its own highest
# logits at each step, on the default model converted to float32, as the
# golden of crates/engine/tests/engine_tests/kv_quantization.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-lm (scripts/ref-venv.sh)
#   2. the default model's GGUF converted by `vlm convert --dtype float32`
#      (what the test loads with WeightFormat::Float32)
#   3. scripts/goldens/kv_quant.py → crates/engine/tests/goldens/kv_quant_mlx_lm.json
# Idempotent on one machine; another CPU may pick other tokens at near-ties
# (the golden names the machine that recorded it). Runs MLX on the CPU with
# OpenBLAS preloaded when it is installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"

gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$gguf" ] || scripts/fetch-default-model.sh
log "converting $gguf to float32 in $work"
target/debug/vlm convert "$gguf" "$work/default-f32" --dtype float32 >/dev/null
log "recording mlx-lm's quantized-KV greedy ids and top logits"
"$ROOT/.venv-ref/bin/python" scripts/goldens/kv_quant.py "$work/default-f32" \
  "$ROOT/crates/engine/tests/goldens/kv_quant_mlx_lm.json"
