#!/usr/bin/env bash
# Records Python mlx-vlm's multi-token-prediction speculative decoding on a
# tiny seeded Qwen3.5 with an `mtp.*` head, as the golden of
# crates/engine/tests/engine_tests/speculative_mtp_reference.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-vlm (scripts/ref-venv.sh)
#   2. the target from `write_tiny_model --mtp-target` (the test writes the
#      same files with engine::testing::write_mtp_target)
#   3. scripts/goldens/speculative_mtp.py: mlx-vlm's splitter writes the head
#      alone, then its MTP rounds run with it →
#      crates/engine/tests/goldens/speculative_mtp_mlx_vlm.json
# Idempotent. Runs MLX on the CPU with OpenBLAS preloaded when it is
# installed, the BLAS our binaries link.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '\033[1mmake-speculative-mtp-golden:\033[0m %s\n' "$*" >&2; }

scripts/ref-venv.sh

work="$(mktemp -d "${TMPDIR:-/tmp}/speculative-mtp-golden.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "writing the tiny target into $work"
# Same flags as the test build, so nothing rebuilds with other features.
cargo build -q --workspace --all-targets
target/debug/examples/write_tiny_model --mtp-target "$work" >/dev/null

openblas="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 .*(x86-64|AArch64)/ && !found {found = $NF} END {print found}')"
if [ -n "$openblas" ]; then
  export LD_PRELOAD="$openblas${LD_PRELOAD:+:$LD_PRELOAD}"
fi
log "recording mlx-vlm's MTP speculative decoding"
"$ROOT/.venv-ref/bin/python" scripts/goldens/speculative_mtp.py "$work" \
  "$ROOT/crates/engine/tests/goldens/speculative_mtp_mlx_vlm.json"
