"""mlx-lm's tensor or pipeline parallel on the checkpoint
examples/tensor_parallel_bench.rs or split_model_bench.rs wrote (--checkpoint
DIR): the same prompt, greedy decode and report line, so the two can be
compared (and their tokens checked against each other).

    .venv-ref/bin/python scripts/bench/mlx_lm_tensor_parallel.py DIR            # one process
    .venv-ref/bin/mlx.launch --backend ring -n 2 \\
        .venv-ref/bin/python scripts/bench/mlx_lm_tensor_parallel.py DIR        # two ranks, tensor
    .venv-ref/bin/mlx.launch --backend ring -n 2 \\
        .venv-ref/bin/python scripts/bench/mlx_lm_tensor_parallel.py DIR --pipeline
        # two ranks, pipeline (mlx-lm 0.32 pipelines qwen2, not llama: split_model_bench --qwen2)
"""
import argparse
import json
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load, sharded_load

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("--prompt", type=int, default=128)
p.add_argument("--decode", type=int, default=64)
p.add_argument("--pipeline", action="store_true", help="split as a pipeline (else tensor parallel)")
a = p.parse_args()

group = mx.distributed.init()
index = Path(a.model) / "model.safetensors.index.json"
if group.size() > 1 and a.pipeline and not index.exists():
    # sharded_load reads the index to choose each stage's files; our
    # checkpoint writer makes one file. Each rank writes the same index.
    names = mx.load(str(Path(a.model) / "model.safetensors")).keys()
    tmp = index.with_suffix(f".{group.rank()}.tmp")
    tmp.write_text(json.dumps({"weight_map": {n: "model.safetensors" for n in names}}))
    tmp.replace(index)
if group.size() > 1:
    if a.pipeline:
        model, _ = sharded_load(a.model, pipeline_group=group)
    else:
        model, _ = sharded_load(a.model, tensor_group=group)
else:
    model, _ = load(a.model)
mx.eval(model.parameters())
weights = mx.get_active_memory()
vocab = model.args.vocab_size
# The same prompt as the Rust example: (i * 7 + 3) % vocab.
prompt = mx.array([[(i * 7 + 3) % vocab for i in range(a.prompt)]])
cache = make_prompt_cache(model)


def greedy(logits):
    return mx.argmax(logits[:, -1, :], axis=-1)


start = time.perf_counter()
nxt = greedy(model(prompt, cache=cache))
tokens = [nxt.item()]
ttft = time.perf_counter() - start
start = time.perf_counter()
for _ in range(a.decode):
    nxt = greedy(model(nxt.reshape(1, 1), cache=cache))
    tokens.append(nxt.item())
tok_s = a.decode / (time.perf_counter() - start)
split = "pipeline" if a.pipeline else "tensor"
who = f"{split} rank {group.rank()}" if group.size() > 1 else "1 process"
print(
    f"mlx-lm {who}: weights {weights / 1e6:.1f} MB, ttft ({a.prompt} tokens) "
    f"{ttft * 1e3:.0f} ms, decode {tok_s:.1f} tok/s, tokens {tokens}",
    flush=True,
)
