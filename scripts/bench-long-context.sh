#!/usr/bin/env bash
# Long prompts, ours against Python mlx-lm on the same folders and the same
# MLX CPU backend (OpenBLAS for both), float32 weights: bench-size random
# Gemma 4 (sliding, global and KV-shared layers) and Qwen3.5 (Gated DeltaNet
# layers and a full-attention layer in four), as scripts/bench-models.sh
# writes them, with their context raised to 40k (a copy of the config; the
# weights are hard links).
# Per model and prompt length:
#   - prompt tok/s and peak MLX memory of one cold prompt (ours: the
#     single-stream path, chunks of 512; mlx-lm: stream_generate, chunks of 2048);
#   - the next turn's time to first token through the prompt cache (ours:
#     the engine's prefix cache, `vlm bench --turn2-words`, a chat whose first
#     message makes about that many tokens, then a short question; mlx-lm:
#     the same token counts through make_prompt_cache).
# Ours and mlx-lm alternate over ROUNDS rounds; medians and ranges.
# Usage: scripts/bench-long-context.sh   (env LENGTHS, default "8192 32768";
#   ROUNDS, default 1; MODELS: some of bench-gemma4 bench-qwen3_5)
set -euo pipefail
cd "$(dirname "$0")/.."
LENGTHS="${LENGTHS:-8192 32768}"
ROUNDS="${ROUNDS:-1}"
BENCH_NAME=bench-long-context
. scripts/lib/bench-common.sh
bench_build_vlm
bench_python_env

for model in ${MODELS:-bench-gemma4 bench-qwen3_5}; do
  bench_random_model "models/$model" "--${model/bench-qwen3_5/bench-qwen35}"
  long="models/$model-long"
  if [ ! -f "$long/config.json" ]; then
    mkdir -p "$long.tmp"
    for f in model.safetensors tokenizer.json tokenizer_config.json; do ln -f "models/$model/$f" "$long.tmp/$f"; done
    "$PY" - "models/$model/config.json" "$long.tmp/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
for part in (config, config.get("text_config", {})):
    if "max_position_embeddings" in part:
        part["max_position_embeddings"] = 40960
json.dump(config, open(sys.argv[2], "w"), indent=1)
PY
    rm -rf "$long" && mv "$long.tmp" "$long"
  fi
done

rows="$(mktemp)"
trap 'rm -f "$rows"' EXIT
for round in $(seq "$ROUNDS"); do
  for model in ${MODELS:-bench-gemma4 bench-qwen3_5}; do
    long="models/$model-long"
    for n in $LENGTHS; do
      bench_log "round $round/$ROUNDS, $model, $n tokens: ours, one cold prompt"
      printf '%s\t%s\tours\t' "$model" "$n" >>"$rows"
      "$VLM" bench --model "$long" --weights float32 --prompt-tokens "$n" --gen-tokens 2 --runs 1 \
        --concurrency 0 --json | tr -d '\n' >>"$rows"
      echo >>"$rows"
      bench_log "round $round/$ROUNDS, $model, $n tokens: mlx-lm, one cold prompt"
      printf '%s\t%s\tmlx\t' "$model" "$n" >>"$rows"
      "${PY_ENV[@]}" "$PY" scripts/bench/mlx_lm_bench.py "$long" --prompt-tokens "$n" --gen-tokens 2 \
        --runs 1 --warmup 0 | tr -d '\n' >>"$rows"
      echo >>"$rows"
      # the bench chat's words make about 7.4 tokens each with these tokenizers
      words=$((n * 10 / 74))
      bench_log "round $round/$ROUNDS, $model, $n tokens: ours, the next turn ($words words)"
      turn="$("$VLM" bench --model "$long" --weights float32 --turn2-words "$words" --runs 0 \
        --concurrency 0 --json | tr -d '\n')"
      printf '%s\t%s\toursturn\t%s\n' "$model" "$n" "$turn" >>"$rows"
      read -r cached new < <("$PY" -c 'import json,sys; t=json.loads(sys.argv[1])["turn2"][0]; print(t["cached_tokens"], t["prompt_tokens"]-t["cached_tokens"])' "$turn")
      bench_log "round $round/$ROUNDS, $model, $n tokens: mlx-lm, the next turn ($cached cached + $new)"
      printf '%s\t%s\tmlxturn\t' "$model" "$n" >>"$rows"
      (cd scripts/bench && "${PY_ENV[@]}" "$PY" mlx_lm_next_turn.py "../../$long" --cached "$cached" --new "$new") \
        | tr -d '\n' >>"$rows"
      echo >>"$rows"
    done
  done
done
"$PY" - "$rows" "$BLAS" <<'PY'
import json, statistics, sys
path, blas = sys.argv[1:]
data = {}
for line in open(path):
    model, n, kind, text = line.rstrip("\n").split("\t")
    data.setdefault((model, int(n)), {}).setdefault(kind, []).append(json.loads(text))
med = statistics.median
span = lambda xs, f="{:.0f}": f"{f.format(med(xs))} ({f.format(min(xs))}-{f.format(max(xs))})"
mb = lambda b: b / 1e6
print(f"\nfloat32 weights, {blas}; median (range)\n")
print("| model | prompt | prompt tok/s, ours | mlx-lm | ratio | peak MB, ours | mlx-lm | next turn | TTFT s, ours | mlx-lm |")
print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
for (model, n), d in sorted(data.items()):
    ours = [o["single"]["prompt_tps"] for o in d["ours"]]
    theirs = [m["prompt_tps"] for m in d["mlx"]]
    peak_ours = [mb(o["single"]["peak_memory_bytes"]) for o in d["ours"]]
    peak_theirs = [mb(m["peak_memory_bytes"]) for m in d["mlx"]]
    turns = [o["turn2"][0] for o in d["oursturn"]]
    shape = f"{turns[0]['cached_tokens']} cached + {turns[0]['prompt_tokens'] - turns[0]['cached_tokens']}"
    print(
        f"| {model} | {n} | {span(ours)} | {span(theirs)} | {med(ours) / med(theirs):.2f} "
        f"| {span(peak_ours)} | {span(peak_theirs)} | {shape} "
        f"| {span([t['ttft_secs'] for t in turns], '{:.2f}')} | {span([m['ttft_secs'] for m in d['mlxturn']], '{:.2f}')} |"
    )
PY
