#!/usr/bin/env bash
# Records mlx-vlm's Qwen2-VL image preprocessing (the reference) of our test images, as
# goldens for crates/engine/tests/engine_tests/vision_preprocess.rs:
#   1. .venv-ref/ with the pinned mlx-vlm, transformers, Pillow (scripts/ref-venv.sh)
#   2. scripts/goldens/qwen_vl_preprocess.py: writes any missing test image
#      crates/engine/tests/fixtures/images/pre_* (never overwrites), then
#      crates/engine/tests/goldens/pre_pixels.safetensors + pre_goldens.json
# Idempotent: rerunning rewrites the same goldens from the same committed images.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '\033[1mmake-preprocess-goldens:\033[0m %s\n' "$*" >&2; }

scripts/ref-venv.sh
log "running mlx-vlm's image processor"
"$ROOT/.venv-ref/bin/python" scripts/goldens/qwen_vl_preprocess.py \
  crates/engine/tests/fixtures/images crates/engine/tests/goldens
log "wrote crates/engine/tests/goldens/pre_pixels.safetensors and pre_goldens.json"
