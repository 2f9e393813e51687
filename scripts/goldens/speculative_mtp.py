"""Records Python mlx-vlm's multi-token-prediction (MTP) speculative decoding
on the tiny Qwen3.5 written by `target/debug/examples/write_tiny_model
--mtp-target <dir>` (<dir>/target: a tiny Qwen3.5 with its vision tower and a
one-layer `mtp.*` head), as the golden of
crates/engine/tests/engine_tests/speculative_mtp_reference.rs.

Usage: speculative_mtp.py <dir with target/> <golden json>

1. mlx-vlm's splitter (`split_qwen3_5_mtp`, what `python -m mlx_vlm.split_mtp`
   runs) writes the head alone into <dir>/head, the only way mlx-vlm drafts
   with MTP. The golden keeps what it wrote (config.json, and per tensor its
   shape and sums): the test writes the same folder with
   fixtures::split_mtp_head and checks it against that record.
2. For each prompt, greedy, no stop at EOS (raw ids):
   - `greedy`: the target's plain greedy ids (`generate_step`), TOKENS of them;
   - per NUM_DRAFT in DRAFTS, `generate_step` with the split head
     (draft_kind "mtp", draft_block_size NUM_DRAFT + 1, so NUM_DRAFT drafts a
     round) gives `from_draft` (the first token from prefill, then per round
     its kept drafts and the target's token, from the drafter's
     `accept_lens`) and `drafts` (each round's drafted ids);
   - `reread` (NUM_DRAFT > 1 only): the same with one change, how the head's
     cache takes a round's kept drafts. mlx-vlm keeps the entries the head
     wrote while drafting them, computed from its own output standing in for
     the target's hidden state; ours (as vLLM and SGLang do) drops them and
     reads the target's real hidden states for every kept position. The
     patch trims those entries before mlx-vlm's `accept_verified_tokens`, so
     it re-reads as ours does (with one draft a round the two are the same).

The prompt is prefilled unchunked (prefill_step_size=None): with chunking,
mlx-vlm's MTP keeps no prompt hidden states but the last (its
SpeculativePrefill keeps chunks for dflash and eagle3 only), so its head
would read one prompt position where ours reads them all.

Every run asserts its tokens equal `greedy` (speculation is lossless), that
the end-of-sequence id does not appear, that the target's top two log-probabilities at every
generated position are at least MIN_MARGIN apart, and the head's top two
logits at every draft too (float32 rounding between two implementations
must not flip a choice: ours and mlx's logits differ by about 1e-6 on these
tiny models, MIN_MARGIN is 1e-4 because over 278 tokens and many rounds a
gap under 1e-3 is common).
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_vlm import load
from mlx_vlm.generate.ar import generate_step
from mlx_vlm.speculative.drafters import load_drafter
from mlx_vlm.speculative.drafters.qwen3_5_mtp.split import split_qwen3_5_mtp

DRAFTS = [1, 3]
COMPARED = 32
TOKENS = COMPARED + max(DRAFTS) + 1
# Byte tokens of the tiny Qwen vocabulary (256 bytes, 8 merges, then the specials).
PROMPTS = [
    [40, 75, 108, 111, 3, 200, 258, 259, 120, 33, 87, 150],
    [72, 101, 108, 108, 111, 44, 35, 119, 111, 114, 108, 100, 46, 35],
    [61, 98, 7, 144, 230, 19, 66, 101, 250, 12, 177, 90, 90, 31],
    [100, 101, 102, 35, 102, 40, 120, 41, 58, 13, 35, 35, 114, 101, 116],
]
# <|im_end|>, the tiny Qwen vocabulary's end of sequence (ours would stop there).
EOS = 266
MIN_MARGIN = 1e-4


def greedy(model, prompt, n):
    out, margin = [], float("inf")
    for token, logprobs in generate_step(
        mx.array([prompt], dtype=mx.int32), model, None, None, max_tokens=n, temperature=0.0
    ):
        out.append(int(token))
        top = mx.sort(logprobs.reshape(-1))[-2:].tolist()
        margin = min(margin, top[1] - top[0])
    return out, margin


class Recorder:
    """Wraps the drafter: each round's drafts and the head's smallest top-two gap."""

    def __init__(self, drafter, reread):
        self.drafter = drafter
        self.rounds = []
        self.margin = float("inf")
        block = drafter.draft_block
        greedy_token = drafter._greedy_token
        accept = drafter.accept_verified_tokens

        def draft_block(*args, **kwargs):
            tokens = block(*args, **kwargs)
            self.rounds.append([int(t) for t in tokens.reshape(-1).tolist()])
            return tokens

        def head_token(hidden):
            top = mx.sort(drafter._lm_head_fn(hidden).reshape(-1))[-2:].tolist()
            self.margin = min(self.margin, top[1] - top[0])
            return greedy_token(hidden)

        def accept_rereading(*args, **kwargs):
            # Drop what the head wrote while drafting: every kept position
            # is read again from the target's hidden state.
            n = drafter._round_appended
            if n > 0:
                for c in drafter._cache:
                    c.trim(n)
                drafter._next_position -= n
                drafter._round_appended = 0
            return accept(*args, **kwargs)

        drafter.draft_block = draft_block
        drafter._greedy_token = head_token
        if reread:
            drafter.accept_verified_tokens = accept_rereading


def speculative(model, head_dir, prompt, n, num_draft, reread):
    drafter, kind = load_drafter(str(head_dir), kind="mtp")
    assert kind == "mtp", kind
    rec = Recorder(drafter, reread)
    out = [
        int(t)
        for t, _ in generate_step(
            mx.array([prompt], dtype=mx.int32),
            model,
            None,
            None,
            max_tokens=n,
            temperature=0.0,
            draft_model=drafter,
            draft_kind="mtp",
            draft_block_size=num_draft + 1,
            prefill_step_size=None,
        )
    ]
    flags = [False]
    for kept in drafter.accept_lens:
        flags += [True] * int(kept) + [False]
    return out, flags[: len(out)], rec.rounds, rec.margin


def digest(folder):
    """What the splitter wrote: config.json and, per tensor, shape and sums."""
    config = json.loads((folder / "config.json").read_text())
    tensors = mx.load(str(folder / "model.safetensors"))
    record = {}
    for name in sorted(tensors):
        t = tensors[name].astype(mx.float32)
        record[name] = {
            "shape": list(t.shape),
            "sum": float(f"{t.sum().item():.6g}"),
            "abs_sum": float(f"{mx.abs(t).sum().item():.6g}"),
        }
    files = sorted(p.name for p in folder.iterdir())
    return {"config": config, "tensors": record, "files": files}


def main():
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    target, head = work / "target", work / "head"
    split_qwen3_5_mtp(str(target), str(head))
    model, _ = load(str(target))
    records = []
    for prompt in PROMPTS:
        plain, margin = greedy(model, prompt, TOKENS)
        assert EOS not in plain, f"the end of sequence in {plain}"
        assert margin >= MIN_MARGIN, f"a near-tie of the target ({margin:.2e}) on {prompt}"
        record = {"prompt": prompt, "greedy": plain, "min_top2_margin": float(f"{margin:.4g}")}
        for k in DRAFTS:
            for reread in [False, True] if k > 1 else [False]:
                tokens, flags, rounds, head_margin = speculative(model, head, prompt, TOKENS, k, reread)
                assert tokens == plain, f"speculative {tokens} != greedy {plain}"
                key = f"{'reread' if reread else 'mlx_vlm'}_{k}"
                if reread or k == 1:
                    assert head_margin >= MIN_MARGIN, f"a near-tie of the head ({head_margin:.2e}) in {key}"
                record[key] = {
                    "from_draft": flags,
                    "drafts": rounds,
                    "head_min_top2_margin": float(f"{head_margin:.4g}"),
                }
                kept = sum(flags[:COMPARED])
                print(f"prompt {prompt[:4]}… {key}: {kept}/{COMPARED} tokens from the head", file=sys.stderr)
        records.append(record)
    golden = {
        "about": "Python mlx-vlm's MTP speculative decoding (its split qwen3_5_mtp head) on the tiny "
        "Qwen3.5 of engine's write_tiny_model --mtp-target; written by scripts/make-speculative-mtp-golden.sh",
        "versions": {"mlx": importlib.metadata.version("mlx"), "mlx-vlm": importlib.metadata.version("mlx-vlm")},
        "draft_counts": DRAFTS,
        "compared": COMPARED,
        "max_tokens": TOKENS,
        "split_head": digest(head),
        "prompts": records,
    }
    out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
