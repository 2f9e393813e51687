#!/usr/bin/env bash
# The families beyond llama, side by side with Python mlx-lm on the same
# folders and the same MLX CPU backend (OpenBLAS for both), float32 weights:
#   - the real Gemma 3 270M (its Q4_K_M GGUF converted by `vlm convert
#     --dtype float32`: sliding-window and global layers, vocabulary 262k);
#   - a bench-size random dense Qwen3 (0.6B's layers, 28 → 8 of them;
#     `write_tiny_model --bench-qwen3`);
#   - a bench-size random Qwen3-MoE (Qwen3-30B-A3B's shape scaled down: 128
#     experts, 8 per token; `write_tiny_model --bench-moe`);
#   - a bench-size random Gemma 4 (E2B's plan scaled down: sliding and global
#     layers, KV-shared layers, per-layer inputs; `write_tiny_model --bench-gemma4`);
#   - a bench-size random Qwen3.5 (0.8B's plan scaled down: Gated DeltaNet
#     layers with 128-wide heads, a gated full-attention layer in four;
#     `write_tiny_model --bench-qwen35`);
#   - a bench-size random gpt-oss (20b's shape scaled down: sliding (128) and
#     full layers with sinks, 32 experts, 4 per token; `write_tiny_model --bench-gpt-oss`);
#   - a bench-size random LFM2 (350M's plan scaled down: short convolutions
#     and two attention layers; `write_tiny_model --bench-family=lfm2`);
#   - a bench-size random LFM2-MoE (8B-A1B's plan scaled down: 32 experts, 4
#     per token, the first block dense; `write_tiny_model --bench-family=lfm2_moe`).
# Per model: prompt tok/s (ours: the single-stream path; mlx-lm:
# stream_generate), decode tok/s of one sequence (ours: the engine with one
# request; mlx-lm: stream_generate), and aggregate decode tok/s of 8
# sequences (ours: the engine; mlx-lm: BatchGenerator). Ours and mlx-lm
# alternate over ROUNDS rounds (this VM drifts); medians and ranges.
# Usage: scripts/bench-models.sh   (env PROMPT_TOKENS, GEN_TOKENS, ROUNDS; defaults 128, 64, 3;
#   MODELS: some of the folders above, space-separated)
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPT_TOKENS="${PROMPT_TOKENS:-128}"
GEN_TOKENS="${GEN_TOKENS:-64}"
ROUNDS="${ROUNDS:-3}"
BENCH_NAME=bench-models
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env

GEMMA=models/gemma-3-270m-f32
QWEN3=models/bench-qwen3
MOE=models/bench-qwen3-moe
GEMMA4=models/bench-gemma4
QWEN35=models/bench-qwen3_5
GPT_OSS=models/bench-gpt-oss
LFM2=models/bench-lfm2
LFM2_MOE=models/bench-lfm2_moe
bench_gemma3_270m "$GEMMA"
bench_random_model "$QWEN3" --bench-qwen3
bench_random_model "$MOE" --bench-moe
bench_random_model "$GEMMA4" --bench-gemma4
bench_random_model "$QWEN35" --bench-qwen35
bench_random_model "$GPT_OSS" --bench-gpt-oss
bench_random_model "$LFM2" --bench-family=lfm2
bench_random_model "$LFM2_MOE" --bench-family=lfm2_moe

rows="$(mktemp)"
trap 'rm -f "$rows"' EXIT
for round in $(seq "$ROUNDS"); do
  for model in ${MODELS:-"$GEMMA" "$QWEN3" "$MOE" "$GEMMA4" "$QWEN35" "$GPT_OSS" "$LFM2" "$LFM2_MOE"}; do
    bench_log "round $round/$ROUNDS, $model: ours (engine x1 and x8)"
    printf '%s\tours\t' "$model" >>"$rows"
    "$VLM" bench --model "$model" --weights float32 --concurrency 1,8 --runs 1 \
      --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS" --json | tr -d '\n' >>"$rows"
    echo >>"$rows"
    bench_log "round $round/$ROUNDS, $model: mlx-lm stream_generate"
    printf '%s\tsingle\t' "$model" >>"$rows"
    "${PY_ENV[@]}" "$PY" scripts/bench/mlx_lm_bench.py "$model" --runs 1 \
      --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS" | tr -d '\n' >>"$rows"
    echo >>"$rows"
    bench_log "round $round/$ROUNDS, $model: mlx-lm BatchGenerator x8"
    printf '%s\tbatch\t' "$model" >>"$rows"
    (cd scripts/bench && "${PY_ENV[@]}" "$PY" mlx_lm_batch.py "../../$model" --batch 8 \
      --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS") | tr -d '\n' >>"$rows"
    echo >>"$rows"
  done
done
"$PY" - "$rows" "$PROMPT_TOKENS" "$GEN_TOKENS" "$BLAS" <<'PY'
import json, statistics, sys
path, p, g, blas = sys.argv[1:]
data = {}
for line in open(path):
    model, kind, text = line.rstrip("\n").split("\t")
    data.setdefault(model, {}).setdefault(kind, []).append(json.loads(text))
med = statistics.median
span = lambda xs: f"{med(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
print(f"\nfloat32 weights, {p} prompt tokens, {g} generated per sequence, {blas}; tok/s, median (range)\n")
print("| model | what | ours | mlx-lm | ours ÷ mlx-lm |")
print("|---|---|---:|---:|---:|")
for model, d in data.items():
    runs = lambda n: [next(e for e in o["engine"] if e["concurrency"] == n) for o in d["ours"]]
    engine = lambda n, key: [r[key] for r in runs(n)]
    # Prompt speed from the single-stream path: the engine's runs reuse the
    # warm-up's prompt from the prefix cache, which is no prompt speed.
    prompt = [o["single"]["prompt_tps"] for o in d["ours"]]
    rows = [
        ("prompt, 1 sequence", prompt, [s["prompt_tps"] for s in d["single"]]),
        ("decode, 1 sequence", engine(1, "aggregate_decode_tps"), [s["decode_tps"] for s in d["single"]]),
        ("decode, 8 sequences", engine(8, "aggregate_decode_tps"), [b["aggregate_decode_tps"] for b in d["batch"]]),
    ]
    for what, ours, theirs in rows:
        print(f"| {model.split('/')[-1]} | {what} | {span(ours)} | {span(theirs)} | {med(ours) / med(theirs):.2f} |")
PY
