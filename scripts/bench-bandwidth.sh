#!/usr/bin/env bash
# One stream's decode against the memory-bandwidth limit (issue 36): for each
# model, float32 weights, decode tok/s of one sequence (ours: the engine with
# one request, as a chat streams; mlx-lm: stream_generate), the bytes a token
# reads, and the fraction of bandwidth ÷ bytes that each reaches; bandwidth
# measured here through the same MLX and OpenBLAS (scripts/bench/decode_bandwidth.py).
# The models: the default SmolLM2 135M and the real Gemma 3 270M (converted
# to float32 folders) and the bench-size random folders (written if missing).
# Usage: scripts/bench-bandwidth.sh   (env MODELS: folders under models/; GEN_TOKENS, default 64)
set -euo pipefail
cd "$(dirname "$0")/.."
GEN_TOKENS="${GEN_TOKENS:-64}"
BENCH_NAME=bench-bandwidth
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env
bench_default_model models/smollm2-135m-f32 float32
bench_gemma3_270m models/gemma-3-270m-f32
bench_random_model models/bench-qwen3-moe --bench-moe
bench_random_model models/bench-gemma4 --bench-gemma4
bench_random_model models/bench-qwen3_5 --bench-qwen35
bench_random_model models/bench-gpt-oss --bench-gpt-oss
MODELS="${MODELS:-smollm2-135m-f32 gemma-3-270m-f32 bench-qwen3-moe bench-gemma4 bench-qwen3_5 bench-gpt-oss}"

speeds=()
for model in $MODELS; do
  bench_log "$model: ours, one stream through the engine"
  ours="$("$VLM" bench --model "models/$model" --weights float32 --prompt-tokens 32 --gen-tokens "$GEN_TOKENS" \
    --runs 0 --concurrency 1 --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["engine"][0]["aggregate_decode_tps"])')"
  bench_log "$model: mlx-lm stream_generate"
  theirs="$("${PY_ENV[@]}" "$PY" scripts/bench/mlx_lm_bench.py "models/$model" --prompt-tokens 32 \
    --gen-tokens "$GEN_TOKENS" --runs 1 | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["decode_tps"])')"
  speeds+=("models/$model=$ours:$theirs")
done
"${PY_ENV[@]}" "$PY" scripts/bench/decode_bandwidth.py "${speeds[@]}"
echo "($BLAS)"
