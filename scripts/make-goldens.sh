#!/usr/bin/env bash
# Records Python mlx-lm's outputs on our tiny seeded llama folders, as goldens
# for crates/engine/tests/parity_mlx_lm.rs:
#   1. .venv-ref/ with the pinned mlx[cpu] + mlx-lm (scripts/ref-venv.sh)
#   2. the tiny folders (float, q4) from `cargo run -p engine --example write_tiny_model`
#   3. scripts/goldens/tiny_llama.py → crates/engine/tests/goldens/tiny_llama_mlx_lm.json
# Idempotent: rerunning rewrites the same JSON. Runs MLX on the CPU with
# OpenBLAS preloaded when it is installed, the BLAS our binaries link.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT="$ROOT/crates/engine/tests/goldens/tiny_llama_mlx_lm.json"

log() { printf '\033[1mmake-goldens:\033[0m %s\n' "$*" >&2; }

scripts/ref-venv.sh

work="$(mktemp -d "${TMPDIR:-/tmp}/tiny-goldens.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "writing the tiny llama folders into $work"
cargo run -q -p engine --example write_tiny_model -- "$work" >/dev/null

openblas="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 .*x86-64|libopenblas\.so\.0 .*AArch64/ {print $NF; exit}')"
if [ -n "$openblas" ]; then
  log "preloading $openblas"
  export LD_PRELOAD="$openblas${LD_PRELOAD:+:$LD_PRELOAD}"
fi
log "recording mlx-lm outputs"
"$ROOT/.venv-ref/bin/python" scripts/goldens/tiny_llama.py "$work" "$OUT"
