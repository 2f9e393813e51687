"""Goldens for the real Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf), for
crates/engine/tests/engine_tests/gemma3_real.rs:

1. The tokenizer: the GGUF's SentencePiece vocabulary (pieces, scores, types)
   rebuilt as a SentencePiece model and run by the `sentencepiece` library
   itself (the reference BPE encoder), on strings that exercise spaces,
   newlines, tabs, digits, accents, CJK and emoji. As SentencePiece does with
   its own model file (and llama.cpp with GGUF files), user-defined pieces
   (Gemma's runs of spaces and newlines, stored with literal spaces) and
   control pieces match the raw text first, atomically; the rest is
   encoded between them.
2. Dequantized blocks: for the first tensor of each type in the file (F32,
   Q8_0, Q5_0, Q4_K, Q6_K), gguf-py's own dequantization (`gguf.quants`,
   numpy ports of ggml's): values at a few places, the sum and the sum of
   squares.
3. Greedy continuations: Python mlx-lm on the folder that `vlm convert
   --dtype float32` wrote from the GGUF (the same weights our engine loads),
   GREEDY_TOKENS raw ids per prompt from `generate_step` (no stop at EOS).

Usage: gemma3_270m.py <gguf> <converted folder> <out.json>
"""
import importlib.metadata
import json
import sys

import mlx.core as mx
import sentencepiece as spm
from gguf import GGUFReader
from mlx_lm import load
from mlx_lm.generate import generate_step
from sentencepiece import sentencepiece_model_pb2 as pb

TOKENIZER_STRINGS = [
    "The capital of France is",
    "Hello, world!  Double  spaces\nnew line",
    "naïve café — 東京 🚀",
    "   leading spaces",
    "def f(x):\n\treturn x**2 + 12345",
    "<start_of_turn>user\nHi<end_of_turn>",
]
PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
]
GREEDY_TOKENS = 24


class ReferenceTokenizer:
    def __init__(self, sp: spm.SentencePieceProcessor, literal: dict):
        self.sp, self.literal = sp, literal
        self.longest = max(len(p) for p in literal)

    def encode(self, text: str) -> list:
        ids, start, i = [], 0, 0
        while i < len(text):
            match = next(
                (text[i : i + n] for n in range(min(self.longest, len(text) - i), 0, -1) if text[i : i + n] in self.literal),
                None,
            )
            if match is None:
                i += 1
                continue
            if start < i:
                ids += self.sp.encode(text[start:i])
            ids.append(self.literal[match])
            i += len(match)
            start = i
        if start < len(text):
            ids += self.sp.encode(text[start:])
        return ids


def reference_tokenizer(gguf_path: str) -> ReferenceTokenizer:
    r = GGUFReader(gguf_path)

    def values(name):
        f = r.fields[name]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(p).decode("utf-8") for p in values("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in values("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in values("tokenizer.ggml.token_type")]
    kinds = pb.ModelProto.SentencePiece
    kind = {1: kinds.NORMAL, 2: kinds.UNKNOWN, 3: kinds.CONTROL, 4: kinds.USER_DEFINED, 5: kinds.UNUSED, 6: kinds.BYTE}
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.pad_id, m.trainer_spec.eos_id, m.trainer_spec.bos_id, m.trainer_spec.unk_id = 0, 1, 2, 3
    # Gemma: no dummy prefix, whitespace kept as is (GGUF add_space_prefix = false).
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, kind[ty]
    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    literal = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (3, 4) and t}
    return ReferenceTokenizer(sp, literal)


def dequantized(gguf_path: str) -> list:
    import numpy as np
    from gguf.quants import dequantize

    out, seen = [], set()
    for t in GGUFReader(gguf_path).tensors:
        if t.tensor_type.name in seen:
            continue
        seen.add(t.tensor_type.name)
        d = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1)
        at = [0, 1, 31, 32, 255, 256, 257, d.size // 2 + 7, d.size - 1]
        out.append(
            {
                "tensor": t.name,
                "type": t.tensor_type.name,
                "at": at,
                "values": [float(d[i]) for i in at],
                "sum": float(d.sum()),
                "sum_of_squares": float((d * d).sum()),
            }
        )
    return out


def main() -> None:
    gguf_path, folder, out = sys.argv[1:4]
    sp = reference_tokenizer(gguf_path)
    model, _ = load(folder)
    greedy = []
    for prompt in PROMPTS:
        ids = [2] + sp.encode(prompt)  # <bos>, as the GGUF's add_bos_token says
        tokens = [int(t) for t, _ in generate_step(mx.array(ids, dtype=mx.int32), model, max_tokens=GREEDY_TOKENS)]
        greedy.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": tokens})
        print(prompt, "->", tokens)
    golden = {
        "about": "SentencePiece encodings of the Gemma 3 270M GGUF vocabulary, and Python mlx-lm greedy ids on the "
        "folder `vlm convert --dtype float32` wrote from it; written by scripts/make-goldens.sh",
        "versions": {
            "gguf": importlib.metadata.version("gguf"),
            "mlx": importlib.metadata.version("mlx"),
            "mlx-lm": importlib.metadata.version("mlx-lm"),
            "sentencepiece": importlib.metadata.version("sentencepiece"),
        },
        "tokenizer": [{"text": s, "ids": sp.encode(s)} for s in TOKENIZER_STRINGS],
        "dequantized": dequantized(gguf_path),
        "greedy": greedy,
    }
    with open(out, "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
