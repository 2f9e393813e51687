#!/usr/bin/env bash
# Records Python mlx-vlm's multi-token-prediction speculative decoding on a
# tiny seeded Qwen3.5 with an `mtp.*` head, as the golden of
# crates/engine/tests/engine_tests/speculative_mtp_reference.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-vlm (scripts/ref-venv.sh)
#   2. the target from `write_tiny_model --mtp-target` (the test writes the
#      same files with fixtures::write_mtp_target)
#   3. scripts/goldens/speculative_mtp.py: mlx-vlm's splitter writes the head
#      alone, then its MTP rounds run with it →
#      crates/engine/tests/goldens/speculative_mtp_mlx_vlm.json
# Idempotent. Runs MLX on the CPU with OpenBLAS preloaded when it is
# installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"

log "writing the tiny folders into $work"
target/debug/examples/write_tiny_model --mtp-target "$work" >/dev/null
log "recording mlx-vlm's MTP speculative decoding"
"$ROOT/.venv-ref/bin/python" scripts/goldens/speculative_mtp.py "$work" \
  "$ROOT/crates/engine/tests/goldens/speculative_mtp_mlx_vlm.json"
