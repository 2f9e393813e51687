#!/usr/bin/env bash
# Records Python mlx-vlm's prompts, pixels and greedy tokens on our tiny
# seeded Mistral 3 folder, as the golden for
# crates/engine/tests/engine_tests/{mistral3,vision_families}.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-vlm (scripts/ref-venv.sh)
#   2. the tiny folder mistral3/float from the write_tiny_vl_model example
#      (built with the test suite's flags)
#   3. scripts/goldens/mistral3.py on it and the test images in
#      crates/engine/tests/fixtures/images →
#      crates/engine/tests/goldens/mistral3_mlx_vlm.{json,safetensors}
# Idempotent: rerunning rewrites the same files. Runs MLX on the CPU with
# OpenBLAS preloaded when it is installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"

record_vlm_family mistral3
