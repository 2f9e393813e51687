#!/usr/bin/env bash
# Records Python mlx-vlm's greedy tokens on our tiny seeded SmolVLM2 folder,
# as the golden for crates/engine/tests/engine_tests/smolvlm.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-vlm (scripts/ref-venv.sh)
#   2. the tiny folder smolvlm/float from the write_tiny_vl_model example
#      (built with the test suite's flags)
#   3. scripts/goldens/smolvlm.py on it and the test images in
#      crates/engine/tests/fixtures/images →
#      crates/engine/tests/goldens/smolvlm_mlx_vlm.{json,safetensors}
# Idempotent: rerunning rewrites the same file. Runs MLX on the CPU with
# OpenBLAS preloaded when it is installed, the BLAS our binaries link.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '\033[1mmake-smolvlm-golden:\033[0m %s\n' "$*" >&2; }

scripts/ref-venv.sh

work="$(mktemp -d "${TMPDIR:-/tmp}/smolvlm-golden.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "writing the tiny folders into $work"
cargo build -q --workspace --all-targets
target/debug/examples/write_tiny_vl_model "$work" >/dev/null

# awk reads to the end: exiting at the first match would cut ldconfig off
# with SIGPIPE, which pipefail turns into this script's exit status
openblas="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 .*(x86-64|AArch64)/ && !found {found = $NF} END {print found}')"
if [ -n "$openblas" ]; then
  log "preloading $openblas"
  export LD_PRELOAD="$openblas${LD_PRELOAD:+:$LD_PRELOAD}"
fi
log "recording mlx-vlm outputs: smolvlm"
"$ROOT/.venv-ref/bin/python" scripts/goldens/smolvlm.py "$work" \
  "$ROOT/crates/engine/tests/fixtures/images" "$ROOT/crates/engine/tests/goldens/smolvlm_mlx_vlm"
