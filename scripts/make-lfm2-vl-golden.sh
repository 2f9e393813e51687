#!/usr/bin/env bash
# Records Python mlx-vlm's greedy tokens on our tiny seeded LFM2-VL folder,
# as the golden for crates/engine/tests/engine_tests/{lfm2_vl,vision_families}.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-vlm (scripts/ref-venv.sh)
#   2. the tiny folder lfm2_vl/float from the write_tiny_vl_model example
#      (built with the test suite's flags)
#   3. scripts/goldens/lfm2_vl.py on it and the test images in
#      crates/engine/tests/fixtures/images →
#      crates/engine/tests/goldens/lfm2_vl_mlx_vlm.{json,safetensors}
# Idempotent: rerunning rewrites the same files. Runs MLX on the CPU with
# OpenBLAS preloaded when it is installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"

record_vlm_family lfm2_vl
