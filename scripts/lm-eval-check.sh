#!/usr/bin/env bash
# lm-eval (EleutherAI's evaluation harness, from PyPI) scores a tiny
# multiple-choice task (scripts/lm_eval/tiny_mc.jsonl, 24 questions) through
# `vlm serve`'s /v1/completions — `--model local-completions`: each choice's
# log-likelihood from `echo` + `logprobs` over context + choice, as token ids
# from the model folder's own tokenizer — and then the same task through
# mlx-lm's own loglikelihood (mlx_lm/evaluate.py's `mlxlm` model) on the same
# float32 weights (models/smollm2-135m-f32, SmolLM2-135M; scripts/bench.sh
# makes it with `vlm convert`). Prints both accuracy tables and the largest
# difference between the two sides' per-choice log-likelihoods.
#
# Not part of scripts/test.sh nor CI: it installs lm-eval, mlx-lm and their
# dependencies from PyPI into a throwaway venv ($LM_EVAL_VENV, default
# /tmp/lm-eval-venv), and runs offline after that.
#
#   scripts/lm-eval-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODEL=${MODEL:-models/smollm2-135m-f32}
VENV=${LM_EVAL_VENV:-/tmp/lm-eval-venv}

log() { printf '\033[1mlm-eval-check:\033[0m %s\n' "$*" >&2; }

[ -f "$MODEL/config.json" ] || { echo "no $MODEL (scripts/bench.sh converts it)" >&2; exit 1; }
if [ ! -x "$VENV/bin/lm_eval" ] || ! "$VENV/bin/python" -c "import mlx_lm, transformers" 2>/dev/null; then
  log "installing lm-eval and mlx-lm into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "lm_eval[api]==0.4.13" "mlx-cpu==0.32.2" "mlx==0.32.2" "mlx-lm==0.32.2" \
    "transformers==5.23.0"
fi

cargo build --workspace --all-targets  # the test build's flags: nothing rebuilds twice
WORK=$(mktemp -d)
trap '[ -n "${PID:-}" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
sed "s|@DATA@|$ROOT/scripts/lm_eval/tiny_mc.jsonl|" scripts/lm_eval/tiny_mc.yaml.in >"$WORK/tiny_mc.yaml"

target/debug/vlm serve --model "$MODEL" --port 0 >"$WORK/serve.log" 2>&1 &
PID=$!
URL=""
for _ in $(seq 1 600); do
  URL=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$WORK/serve.log" | head -n 1)
  [ -n "$URL" ] && break
  kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve.log" >&2; exit 1; }
  sleep 0.2
done
[ -n "$URL" ] || { cat "$WORK/serve.log" >&2; exit 1; }
SERVED=$(curl -s "$URL/v1/models" | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
log "vlm serve at $URL ($SERVED)"

export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log "lm-eval through vlm serve (local-completions)"
"$VENV/bin/lm_eval" --model local-completions \
  --model_args "model=$SERVED,base_url=$URL/v1/completions,tokenizer_backend=huggingface,tokenizer=$ROOT/$MODEL,tokenized_requests=True,num_concurrent=1,max_retries=1" \
  --tasks tiny_mc --include_path "$WORK" --log_samples --output_path "$WORK/ours" | tee "$WORK/ours.txt"

log "the same task through mlx-lm's own loglikelihood"
"$VENV/bin/python" scripts/lm_eval/run_mlx_lm.py --model mlxlm-ref \
  --model_args "path_or_hf_repo=$ROOT/$MODEL" --batch_size 1 \
  --tasks tiny_mc --include_path "$WORK" --log_samples --output_path "$WORK/mlx_lm" | tee "$WORK/mlx_lm.txt"

"$VENV/bin/python" - "$WORK/ours" "$WORK/mlx_lm" <<'PY'
import glob, json, sys
def samples(folder):
    path = sorted(glob.glob(f"{folder}/**/samples_tiny_mc_*.jsonl", recursive=True))[-1]
    return {s["doc_id"]: s for s in map(json.loads, open(path))}
ours, ref = samples(sys.argv[1]), samples(sys.argv[2])
diff = max(abs(float(a[0][0]) - float(b[0][0])) for d in ours for a, b in zip(ours[d]["resps"], ref[d]["resps"]))
same = sum(ours[d]["acc"] == ref[d]["acc"] for d in ours)
print(f"per-choice log-likelihoods, ours vs mlx-lm: max |diff| = {diff:.2e}; "
      f"the same verdict on {same}/{len(ours)} questions")
PY
