"""Records Python mlx-vlm's speculative decoding with a Gemma 4 assistant
drafter (`drafters/gemma4_assistant`, its `mtp` round loop) on the tiny Gemma
4 written by `target/debug/examples/write_tiny_model --gemma4-assistant <dir>`
(<dir>/target: the tiny Gemma 4 of the parity tests, sliding, full and
KV-shared layers; <dir>/assistant: fixtures::write_gemma4_echo_assistant,
an assistant that mostly drafts the last token again, so that the target's
repeated tokens are drafts it keeps; <dir>/random_assistant:
fixtures::write_gemma4_assistant, the random one of the lossless
tests; <dir>/centroid_assistant: fixtures::write_gemma4_centroid_assistant,
an echoing one with the centroid-routed head of the E2B / E4B assistants,
`use_ordered_embeddings`), as the golden of
crates/engine/tests/engine_tests/speculative_assistant_reference.rs.

Usage: speculative_assistant.py <dir with target/ and assistant/> <golden json>

The target. mlx-vlm reads a `gemma4_text` folder with a model of its own
that returns no hidden states nor keys and values, so its speculative loop
cannot run on it; the assistant drafts for mlx-vlm's Gemma 4 language model
(`models/gemma4/language.py`, the text part of its `gemma4` model). `Target`
below is that language model on the same config.json and weights, with the
text-only input embedding of mlx-vlm's `gemma4` model (the embedding
scaled, the per-layer inputs of the tokens); its greedy ids are checked equal
to the `gemma4_text` model's.

For each prompt, greedy, no stop at EOS (raw ids):
  - `greedy`: the target's plain greedy ids (`generate_step`), TOKENS of them;
  - per assistant (ASSISTANTS) and NUM_DRAFT in DRAFTS, `generate_step`
    with it (draft_kind "mtp", draft_block_size NUM_DRAFT + 1, so NUM_DRAFT
    drafts a round)
    gives `from_draft` (the first token from prefill, then per round its
    kept drafts and the target's token, from the drafter's `accept_lens`)
    and `drafts` (each round's drafted ids).

The prompt is prefilled unchunked (prefill_step_size=None), as in the MTP
golden.

Each run twice: `<assistant>_mlx_vlm_<NUM_DRAFT>` as mlx-vlm runs, and
`<assistant>_window_<NUM_DRAFT>` with one change, which keys of the target's
sliding-window layer the assistant reads in the first round. Every draft's
query sits at the position of the last key, and mlx-vlm masks a sliding
layer bidirectionally around the query's index in the keys it is given
(`masks.make_drafter_masks`: |query − key| < window, the query's index
capped at the number of keys). In the first round it is given the whole
prompt's keys from the prefill pass, so the query is at the last key and
reads the last `window` keys; in later rounds the keys come from the
target's rotating cache after the verify pass, the index is capped one past
the last key, and it reads the last `window − 1`. Ours reads the last
`window − 1` in every round (the keys a query at the next position may
read). The patch moves mlx-vlm's first-round query one past the last key,
as in its later rounds; those runs are the ones compared (and the ones
whose margins are checked).

Every run asserts its tokens equal `greedy` (speculation is lossless), that
the end-of-sequence id does not appear, that the target's top two
log-probabilities at every generated position are at least MIN_MARGIN apart,
and the assistant's top two logits at every draft too (float32 rounding
between two implementations must not flip a choice). With the centroid head
(greedy: `MaskedEmbedder.argmax`, the best of the routed clusters' tokens)
the top two are those of the routed tokens, and the scores of the last
cluster routed and the first left out must be MIN_MARGIN apart too (which
clusters are routed must not flip either); its records count the drafts
whose routed choice is (`routed_same`) and is not (`routed_apart`) what the
whole table's best would be, and both must occur: the routing decided some
drafts. The golden must keep
at least one draft of the echoing assistant (the accept path) and reject some.
"""
import importlib.metadata
import json
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_vlm import load
from mlx_vlm.generate.ar import generate_step
from mlx_vlm.models.base import InputEmbeddingsFeatures
from mlx_vlm.models.gemma4.config import TextConfig
from mlx_vlm.models.gemma4.language import LanguageModel
from mlx_vlm.speculative.drafters import load_drafter
from mlx_vlm.speculative.drafters.gemma4_assistant import gemma4_assistant

DRAFTS = [1, 3]
COMPARED = 32
TOKENS = COMPARED + max(DRAFTS) + 1
# Byte tokens of the tiny vocabulary (3 specials, 256 bytes, 9 merges).
PROMPTS = [
    [40, 75, 108, 111, 3, 200, 58, 59, 120, 33, 87, 150],
    [72, 101, 108, 108, 111, 44, 35, 119, 111, 114, 108, 100, 46, 35],
    [61, 98, 7, 144, 230, 19, 66, 101, 250, 12, 177, 90, 90, 31],
    [100, 101, 102, 35, 102, 40, 120, 41, 58, 13, 35, 35, 114, 101, 116],
    [233, 84, 10, 8, 9, 169, 141, 5, 243, 228, 100, 178],
]
# <|im_end|>, the tiny vocabulary's end of sequence (ours would stop there).
EOS = 2
MIN_MARGIN = 1e-4
MAKE_MASKS = gemma4_assistant.make_drafter_masks
# Golden key prefix → the assistant's folder: the echoing one keeps drafts;
# the random one's are (nearly) all rejected, but its drafted ids come from
# every part of the assistant (its layers reading the target's keys and
# values, `post_projection` feeding the next draft), where the echoing one's
# drafts are mostly the last token again.
# The centroid one drafts through the routed head.
ASSISTANTS = {"echo": "assistant", "random": "random_assistant", "centroid": "centroid_assistant"}
ROUTED = {"centroid"}
# What mlx-vlm's gemma4 model forwards to its language model.
FORWARDED = ("capture_layer_ids", "hidden_sink", "shared_kv_sink", "return_hidden",
             "return_shared_kv", "logits_to_keep")


class Target(nn.Module):
    """mlx-vlm's Gemma 4 language model on a gemma4_text folder, text in."""

    def __init__(self, folder):
        super().__init__()
        config = json.loads((folder / "config.json").read_text())
        self.config = TextConfig.from_dict(config)
        self.model_type = "gemma4"
        self.language_model = LanguageModel(self.config)
        weights = mx.load(str(folder / "model.safetensors"))
        weights = self.language_model.sanitize({f"language_model.{k}": v for k, v in weights.items()})
        self.load_weights(list(weights.items()), strict=True)
        mx.eval(self.parameters())

    def get_input_embeddings(self, input_ids=None, pixel_values=None, **kwargs):
        inner = self.language_model.model
        embeds = inner.embed_tokens(input_ids) * inner.embed_scale
        per_layer = inner.get_per_layer_inputs(input_ids) if inner.hidden_size_per_layer_input else None
        return InputEmbeddingsFeatures(inputs_embeds=embeds, per_layer_inputs=per_layer)

    def __call__(self, input_ids, pixel_values=None, mask=None, cache=None, **kwargs):
        features = self.get_input_embeddings(input_ids)
        forwarded = {k: kwargs[k] for k in FORWARDED if k in kwargs}
        return self.language_model(
            None,
            inputs_embeds=features.inputs_embeds,
            per_layer_inputs=features.per_layer_inputs,
            mask=mask,
            cache=cache,
            **forwarded,
        )

    @property
    def layers(self):
        return self.language_model.model.layers

    def make_cache(self):
        return self.language_model.make_cache()


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
    """Wraps the drafter: each round's drafts and its smallest top-two gap;
    with a centroid head, the smallest gap at the routing's cut and how many
    drafts the routing changed."""

    def __init__(self, drafter):
        self.rounds = []
        self.margin = float("inf")
        self.cut_margin = float("inf")
        self.routed_same, self.routed_apart = 0, 0
        block, bind = drafter.draft_block, drafter.bind
        if drafter.masked_embedding is not None:
            self.watch_routing(drafter.masked_embedding)

        def draft_block(*args, **kwargs):
            tokens = block(*args, **kwargs)
            self.rounds.append([int(t) for t in tokens.reshape(-1).tolist()])
            return tokens

        def bind_recording(target):
            bound = bind(target)
            head = drafter._lm_head_fn

            def scores(h):
                logits = head(h)
                top = mx.sort(logits.reshape(-1))[-2:].tolist()
                self.margin = min(self.margin, top[1] - top[0])
                return logits

            drafter._lm_head_fn = scores
            return bound

        drafter.draft_block = draft_block
        drafter.bind = bind_recording

    def watch_routing(self, masked):
        """The greedy draft of a centroid head (`MaskedEmbedder.argmax`):
        its routed tokens' scores, the clusters' scores at the cut, and the
        whole table's best for the same hidden state."""
        selected = masked._selected_logits

        def selected_recording(hidden_states, lm_head_weight):
            ids, logits = selected(hidden_states, lm_head_weight)
            top = mx.sort(logits.reshape(-1))[-2:].tolist()
            self.margin = min(self.margin, top[1] - top[0])
            clusters = mx.sort(masked.centroids(hidden_states).reshape(-1)).tolist()
            k = masked.top_k
            self.cut_margin = min(self.cut_margin, clusters[-k] - clusters[-k - 1])
            routed = ids.reshape(-1)[mx.argmax(logits.reshape(-1))].item()
            whole = mx.argmax((hidden_states @ lm_head_weight.T).reshape(-1)).item()
            if routed == whole:
                self.routed_same += 1
            else:
                self.routed_apart += 1
            return ids, logits

        masked._selected_logits = selected_recording


def last_keys_only(make_masks):
    """mlx-vlm's drafter masks with its first round's sliding query placed as
    in its later rounds: one past the last key (see the module's doc)."""

    def masks(shared_kv_states, query_len, query_offset, *args, **kwargs):
        return make_masks(shared_kv_states, query_len, query_offset + 1, *args, **kwargs)

    return masks


def speculative(model, folder, prompt, n, num_draft, window, routed):
    gemma4_assistant.make_drafter_masks = last_keys_only(MAKE_MASKS) if window else MAKE_MASKS
    drafter, kind = load_drafter(str(folder), kind="mtp")
    assert kind == "mtp", kind
    assert (drafter.masked_embedding is not None) == routed, f"{folder}: a centroid head is {routed}"
    rec = Recorder(drafter)
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
    assert len(rec.rounds) == len(drafter.accept_lens)
    return out, flags[: len(out)], rec


def main():
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    text_model, _ = load(str(work / "target"))
    model = Target(work / "target")
    records = []
    kept_total, rejected = 0, 0
    routed_same, routed_apart = 0, 0
    for prompt in PROMPTS:
        plain, margin = greedy(model, prompt, TOKENS)
        assert greedy(text_model, prompt, TOKENS)[0] == plain, "gemma4 and gemma4_text disagree"
        assert EOS not in plain, f"the end of sequence in {plain}"
        assert margin >= MIN_MARGIN, f"a near-tie of the target ({margin:.2e}) on {prompt}"
        record = {"prompt": prompt, "greedy": plain, "min_top2_margin": float(f"{margin:.4g}")}
        for name, folder in ASSISTANTS.items():
            for k in DRAFTS:
                for window in [False, True]:
                    routed = name in ROUTED
                    tokens, flags, rec = speculative(
                        model, work / folder, prompt, TOKENS, k, window, routed
                    )
                    assert tokens == plain, f"speculative {tokens} != greedy {plain}"
                    key = f"{name}_{'window' if window else 'mlx_vlm'}_{k}"
                    if window:
                        assert rec.margin >= MIN_MARGIN, f"a near-tie of the assistant ({rec.margin:.2e}) in {key}"
                    record[key] = {
                        "from_draft": flags,
                        "drafts": rec.rounds,
                        "assistant_min_top2_margin": float(f"{rec.margin:.4g}"),
                    }
                    if routed:
                        if window:
                            assert rec.cut_margin >= MIN_MARGIN, f"a near-tie of two clusters ({rec.cut_margin:.2e}) in {key}"
                            routed_same += rec.routed_same
                            routed_apart += rec.routed_apart
                        record[key].update({
                            "routing_min_cut_margin": float(f"{rec.cut_margin:.4g}"),
                            "routed_same": rec.routed_same,
                            "routed_apart": rec.routed_apart,
                        })
                        print(f"prompt {prompt[:4]}… {key}: {rec.routed_apart} of "
                              f"{rec.routed_same + rec.routed_apart} drafts routed away from the table's best", file=sys.stderr)
                    kept = sum(flags[:COMPARED])
                    if name == "echo" and window:
                        kept_total += kept
                        rejected += sum(1 for f in flags[1:COMPARED] if not f)
                    print(f"prompt {prompt[:4]}… {key}: {kept}/{COMPARED} tokens from the assistant", file=sys.stderr)
        records.append(record)
    assert kept_total > 0 and rejected > 0, "the accept path and the reject path are both needed"
    assert routed_same > 0 and routed_apart > 0, "the centroid head's routing must decide some drafts, not all"
    golden = {
        "about": "Python mlx-vlm's speculative decoding with its gemma4_assistant drafter on the tiny "
        "Gemma 4 and the echoing, random and centroid-routed assistants of engine's write_tiny_model --gemma4-assistant; written by "
        "scripts/make-speculative-assistant-golden.sh",
        "versions": {"mlx": importlib.metadata.version("mlx"), "mlx-vlm": importlib.metadata.version("mlx-vlm")},
        "draft_counts": DRAFTS,
        "compared": COMPARED,
        "max_tokens": TOKENS,
        "prompts": records,
    }
    out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
