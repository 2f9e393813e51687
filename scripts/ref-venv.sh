#!/usr/bin/env bash
# Creates (or reuses) .venv-ref/: the Python reference implementation, mlx-lm
# on the same MLX CPU build that our engine links, for parity goldens
# (scripts/make-goldens.sh), mlx-vlm for the vision goldens, and side-by-side benchmarks (scripts/bench.sh).
# Idempotent: installs only when the pinned versions are not already there.
# Prints nothing on stdout; source it or run it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REF_VENV="$ROOT/.venv-ref"
MLX_VERSION=0.32.2
MLX_LM_VERSION=0.32.2
# mlx-vlm: the reference for the vision-language models (Qwen2-VL / Qwen2.5-VL).
MLX_VLM_VERSION=0.7.6
# mlx-lm pulls transformers (tokenizer loading only; no torch). Pinned so the
# goldens are reproducible.
TRANSFORMERS_VERSION=5.23.0
# Pillow: the reference image processor resizes with it, and its bicubic pass
# order changed in 13.0 (the preprocessing goldens record the version).
PILLOW_VERSION=13.0.0
# gguf: reads the real Gemma 3 GGUF's vocabulary for the SentencePiece
# tokenizer golden (scripts/goldens/gemma3_270m.py).
GGUF_VERSION=0.19.0

log() { printf '\033[1mref-venv:\033[0m %s\n' "$*" >&2; }

if [ ! -x "$REF_VENV/bin/python" ]; then
  log "creating $REF_VENV"
  python3 -m venv "$REF_VENV"
fi
have() {
  "$REF_VENV/bin/python" - "$@" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    if m.version(name) != want:
        sys.exit(1)
PY
}
pkgs=("mlx==$MLX_VERSION" "mlx-cpu==$MLX_VERSION" "mlx-lm==$MLX_LM_VERSION" "mlx-vlm==$MLX_VLM_VERSION")
pkgs+=("transformers==$TRANSFORMERS_VERSION" "pillow==$PILLOW_VERSION" "gguf==$GGUF_VERSION")
if ! have "${pkgs[@]}"; then
  log "installing mlx[cpu]==$MLX_VERSION mlx-lm==$MLX_LM_VERSION mlx-vlm==$MLX_VLM_VERSION transformers==$TRANSFORMERS_VERSION into $REF_VENV"
  "$REF_VENV/bin/pip" install -q --disable-pip-version-check "mlx[cpu]==$MLX_VERSION" "mlx-lm==$MLX_LM_VERSION" \
    "mlx-vlm==$MLX_VLM_VERSION" "pillow==$PILLOW_VERSION" \
    "transformers==$TRANSFORMERS_VERSION" "gguf==$GGUF_VERSION" >&2
fi
