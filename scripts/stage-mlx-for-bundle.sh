#!/usr/bin/env bash
# Tauri's beforeBundleCommand (macOS): copies libmlx.dylib and mlx.metallib
# from the MLX wheel in .venv/ to target/mlx-bundle/, where tauri.conf.json's
# bundle.macOS.files picks them up into Contents/Frameworks/ (MLX looks for
# mlx.metallib beside libmlx). Not run on Linux, where nothing is bundled.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(uname -s)" = Darwin ] || exit 0
lib=$(.venv/bin/python -c 'import mlx, os; print(os.path.join(os.path.dirname(mlx.__file__), "lib"))')
mkdir -p target/mlx-bundle
cp "$lib/libmlx.dylib" "$lib/mlx.metallib" target/mlx-bundle/
