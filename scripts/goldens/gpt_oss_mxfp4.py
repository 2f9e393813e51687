"""Converts the tiny float gpt-oss (written by `write_tiny_model`) to MXFP4
with mlx-lm's own `convert` (`--q-mode mxfp4`: every linear layer and the
embedding in MXFP4, the routers in 8-bit affine, as mlx-lm's gpt-oss
predicate asks), keeps the converted folder as a test fixture, and records
mlx-lm's logits and greedy ids on it, for
crates/engine/tests/engine_tests/parity_mlx_lm.rs (gpt_oss_mxfp4_matches_mlx_lm); and
mlx-lm's outputs on the folder in OpenAI's own MXFP4 layout beside the float
one (`openai_mxfp4`).

Usage: gpt_oss_mxfp4.py <tiny gpt_oss float folder> <fixture folder> <golden json>
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

from mlx_lm.convert import convert

from tiny_models import LONG_PROMPT, record  # noqa: E402  (also patches gather_qmm)


def main() -> None:
    src, fixture, golden = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "mxfp4"
        convert(str(src), mlx_path=str(out), quantize=True, q_mode="mxfp4")
        if fixture.exists():
            shutil.rmtree(fixture)
        fixture.mkdir(parents=True)
        # The weights, config and tokenizer; not the README, the index of one
        # file, or the template (the test needs none of them).
        for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]:
            shutil.copy(out / name, fixture / name)
    config = json.loads((fixture / "config.json").read_text())
    print(f"quantization: {config['quantization']}")
    result = record(fixture, LONG_PROMPT)
    print(f"mxfp4: greedy {result['greedy_ids']}")
    # OpenAI's own layout (MXFP4 `*_blocks` / `*_scales` experts, the rest
    # float), as `write_tiny_model` writes it beside the float folder.
    openai = record(src.parent / "openai_mxfp4", LONG_PROMPT)
    print(f"openai_mxfp4: greedy {openai['greedy_ids']}")
    variants = {"mxfp4": result, "openai_mxfp4": openai}
    text = json.dumps({"prompt_ids": LONG_PROMPT, "variants": variants}, separators=(",", ":"))
    golden.write_text(text + "\n")
    print(f"wrote {golden}")


if __name__ == "__main__":
    main()
