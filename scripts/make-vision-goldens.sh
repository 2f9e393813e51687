#!/usr/bin/env bash
# Records Python mlx-vlm's outputs on our tiny seeded vision-language folders,
# as goldens for crates/engine/tests/engine_tests/parity_mlx_vlm.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-vlm (scripts/ref-venv.sh)
#   2. the tiny folders ({qwen2_vl,qwen2_5_vl,qwen3_5,qwen3_vl,qwen3_vl_moe,gemma3,gemma4}/{float,q4}) from the
#      write_tiny_vl_model example (built with the test suite's flags)
#   3. scripts/goldens/{qwen_vl,gemma3_vl,gemma4_vl}.py on them and the test images in
#      crates/engine/tests/fixtures/images/qwen_parity_* and exif_* (written by
#      scripts/goldens/exif_jpegs.py when missing) →
#      crates/engine/tests/goldens/{qwen_vl,qwen3_5_vl,qwen3_vl,qwen3_vl_moe,gemma3_vl,gemma4_vl}_mlx_vlm.{json,safetensors}
# Usage: make-vision-goldens.sh [qwen2|qwen3_5|qwen3_vl|qwen3_vl_moe|gemma3|gemma4]   (default: all)
# Idempotent: rerunning rewrites the same files. Runs MLX on the CPU with
# OpenBLAS preloaded when it is installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"
GOLDENS="$ROOT/crates/engine/tests/goldens"
IMAGES="$ROOT/crates/engine/tests/fixtures/images"

log "writing the tiny folders into $work"
target/debug/examples/write_tiny_vl_model "$work" >/dev/null
# phone-style EXIF JPEGs and the reference's view of them (kept when present)
(cd scripts/goldens && "$ROOT/.venv-ref/bin/python" exif_jpegs.py "$IMAGES")
for family in ${1:-qwen2 qwen3_5 qwen3_vl qwen3_vl_moe gemma3 gemma4}; do
  if [ "$family" = gemma3 ] || [ "$family" = gemma4 ]; then
    log "recording mlx-vlm outputs: $family"
    "$ROOT/.venv-ref/bin/python" "scripts/goldens/${family}_vl.py" "$work" "$IMAGES" "$GOLDENS/${family}_vl_mlx_vlm"
    continue
  fi
  case "$family" in
    qwen2) stem="$GOLDENS/qwen_vl_mlx_vlm" ;;
    qwen3_5) stem="$GOLDENS/qwen3_5_vl_mlx_vlm" ;;
    qwen3_vl) stem="$GOLDENS/qwen3_vl_mlx_vlm" ;;
    qwen3_vl_moe) stem="$GOLDENS/qwen3_vl_moe_mlx_vlm" ;;
    *) echo "unknown family $family (qwen2, qwen3_5, qwen3_vl, qwen3_vl_moe, gemma3, gemma4)" >&2; exit 2 ;;
  esac
  log "recording mlx-vlm outputs: $family"
  "$ROOT/.venv-ref/bin/python" scripts/goldens/qwen_vl.py "$work" "$IMAGES" "$stem" "$family"
done
