#!/usr/bin/env bash
# MXFP4 blocks as gguf-py (llama.cpp's Python package) quantizes and
# dequantizes them, into crates/engine/tests/goldens/gguf_mxfp4_gguf_py.json
# (scripts/goldens/gguf_mxfp4.py), for the GGUF import's layout check.
# Idempotent; needs no build and no MLX.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/ref-venv.sh
.venv-ref/bin/python scripts/goldens/gguf_mxfp4.py crates/engine/tests/goldens/gguf_mxfp4_gguf_py.json
