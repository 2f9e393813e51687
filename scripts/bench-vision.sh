#!/usr/bin/env bash
# Vision benchmark: the vision-feature cache (encode on a miss vs a hit), time
# to first token for an image asked about twice, and our image prompt time
# against Python mlx-vlm (scripts/bench/mlx_vlm_image_bench.py) on the same
# checkpoint, image and prompt, the same MLX CPU build and the same BLAS.
#
# No vision-language weights can be downloaded here, so the checkpoint is a
# random bench-size Qwen2-VL written by our own writer (`write_tiny_vl_model
# --bench`: Qwen2-0.5B's language model with a 640-wide, 16-block vision
# tower) into models/bench-qwen2-vl; both implementations load that folder.
# The image is a seeded 640×480 noise PNG (936 patches, 234 image tokens).
#
# Usage: scripts/bench-vision.sh [--runs R]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "bench-vision: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_NAME=bench-vision
. scripts/lib/bench-common.sh
bench_python_env
bench_build_vlm # the test suite's flags build the checkpoint writer too
bench_vl_model
MODEL="$VL_MODEL"
IMAGE=models/bench-640x480.png
if [ ! -f "$IMAGE" ]; then
  "$PY" - "$IMAGE" <<'PY'
import sys
import numpy as np
from PIL import Image
pixels = (np.random.default_rng(0).random((480, 640, 3)) * 255).astype("uint8")
Image.fromarray(pixels).save(sys.argv[1])
PY
fi

bench_log "ours: vlm bench --image"
target/debug/vlm bench --model "$MODEL" --image "$IMAGE" --runs "$RUNS"

bench_log "mlx-vlm on the same folder and image"
"${PY_ENV[@]}" "$PY" scripts/bench/mlx_vlm_image_bench.py "$MODEL" "$IMAGE" "$RUNS"
