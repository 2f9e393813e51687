#!/usr/bin/env bash
# Records Python mlx-lm's outputs on our tiny seeded folders (llama, qwen3,
# qwen3_moe, gemma3_text, gemma4_text(_moe), qwen3_5(_moe), lfm2; float and
# 4-bit; lfm2 also batched), as goldens for
# crates/engine/tests/engine_tests/parity_mlx_lm.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-lm (scripts/ref-venv.sh)
#   2. the tiny folders from the write_tiny_model example
#   3. scripts/goldens/tiny_models.py → crates/engine/tests/goldens/tiny_*_mlx_lm.json
# `make-goldens.sh lfm2 ...` records only the families named (and not the
# real Gemma 3 270M). Idempotent: rerunning rewrites the same JSON. Runs MLX on the CPU with
# OpenBLAS preloaded when it is installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"
OUT="$ROOT/crates/engine/tests/goldens"

log "writing the tiny folders into $work"
target/debug/examples/write_tiny_model "$work" >/dev/null
log "recording mlx-lm outputs"
"$ROOT/.venv-ref/bin/python" scripts/goldens/tiny_models.py "$work" "$OUT" "$@"
if [ $# -gt 0 ]; then
  exit 0
fi

log "the real Gemma 3 270M: SentencePiece encodings and mlx-lm greedy ids on its converted folder"
scripts/fetch-gemma3-270m.sh
target/debug/vlm convert models/gemma-3-270m-q4_k_m.gguf "$work/gemma3-270m" --dtype float32 >/dev/null
"$ROOT/.venv-ref/bin/python" scripts/goldens/gemma3_270m.py models/gemma-3-270m-q4_k_m.gguf "$work/gemma3-270m" \
  "$OUT/gemma3_270m_mlx_lm.json"
