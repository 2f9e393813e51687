#!/usr/bin/env bash
# A float linear layer's product with its weight as stored ([out, in], read
# transposed, as mlx-lm and the engine compute it) against input-major
# ([in, out] row-major), through the MLX CPU build and the OpenBLAS our
# binary links, one BLAS thread, weights cold (docs/performance.md,
# "Weight layout").
# Prints a Markdown table (scripts/bench/weight_layout.py).
# Usage: scripts/bench-weight-layout.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_NAME=bench-weight-layout
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
OPENBLAS_NUM_THREADS=1 "${PY_ENV[@]}" "$PY" scripts/bench/weight_layout.py
echo "($BLAS, one thread)"
