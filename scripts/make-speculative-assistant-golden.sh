#!/usr/bin/env bash
# Records Python mlx-vlm's speculative decoding with a Gemma 4 assistant
# drafter on the tiny Gemma 4, as the golden of
# crates/engine/tests/engine_tests/speculative_assistant_reference.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-vlm (scripts/ref-venv.sh)
#   2. the target and its assistant from `write_tiny_model --gemma4-assistant`
#      (the test writes the same files with fixtures::write_tiny_family,
#      write_gemma4_echo_assistant, write_gemma4_assistant and
#      write_gemma4_centroid_assistant: the last with the E2B / E4B
#      assistants' centroid-routed head)
#   3. scripts/goldens/speculative_assistant.py: mlx-vlm's assistant rounds →
#      crates/engine/tests/goldens/speculative_assistant_mlx_vlm.json
# Idempotent. Runs MLX on the CPU with OpenBLAS preloaded when it is
# installed, the BLAS our binaries link.
source "$(dirname "$0")/lib/golden.sh"

log "writing the tiny folders into $work"
target/debug/examples/write_tiny_model --gemma4-assistant "$work" >/dev/null
log "recording mlx-vlm's speculative decoding with the assistant"
"$ROOT/.venv-ref/bin/python" scripts/goldens/speculative_assistant.py "$work" \
  "$ROOT/crates/engine/tests/goldens/speculative_assistant_mlx_vlm.json"
