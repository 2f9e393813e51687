# Shared by the scripts/make-*golden*.sh recorders (sourced, not run): what
# every recording needs before the reference runs. Sourcing it
#   - moves to the repo root and sets ROOT;
#   - defines `log MESSAGE…` (prefixed with the script's name);
#   - makes the pinned reference venv (scripts/ref-venv.sh);
#   - makes a scratch folder `$work`, removed on exit;
#   - builds the workspace with the test suite's flags (so nothing rebuilds
#     with other features; the tiny-model writers are its examples);
#   - preloads OpenBLAS when installed, the BLAS our binaries link, so the
#     reference's MLX computes as ours does.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
GOLDEN_SCRIPT="$(basename "$0" .sh)"

log() { printf '\033[1m%s:\033[0m %s\n' "$GOLDEN_SCRIPT" "$*" >&2; }

scripts/ref-venv.sh

work="$(mktemp -d "${TMPDIR:-/tmp}/$GOLDEN_SCRIPT.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "building the tiny-model writers"
cargo build -q --workspace --all-targets

# awk reads to the end: exiting at the first match would cut ldconfig off
# with SIGPIPE, which pipefail turns into this script's exit status
openblas="$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so\.0 .*(x86-64|AArch64)/ && !found {found = $NF} END {print found}')"
if [ -n "$openblas" ]; then
  log "preloading $openblas"
  export LD_PRELOAD="$openblas${LD_PRELOAD:+:$LD_PRELOAD}"
fi

# record_vlm_family FAMILY: writes the tiny vision folders (the
# write_tiny_vl_model example) and records Python mlx-vlm on them with
# scripts/goldens/FAMILY.py and the test images, into
# crates/engine/tests/goldens/FAMILY_mlx_vlm.{json,safetensors}.
record_vlm_family() {
  log "writing the tiny folders into $work"
  target/debug/examples/write_tiny_vl_model "$work" >/dev/null
  log "recording mlx-vlm outputs: $1"
  "$ROOT/.venv-ref/bin/python" "scripts/goldens/$1.py" "$work" \
    "$ROOT/crates/engine/tests/fixtures/images" "$ROOT/crates/engine/tests/goldens/$1_mlx_vlm"
}
