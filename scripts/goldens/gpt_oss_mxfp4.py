"""Converts the tiny float gpt-oss (written by `write_tiny_model`) to MXFP4,
NVFP4 and MXFP8 with mlx-lm's own `convert` (`--q-mode mxfp4`: every linear
layer and the embedding in MXFP4, the routers in 8-bit affine, as mlx-lm's
gpt-oss predicate asks; the same for the other two modes), keeps each
converted folder as a test fixture (gpt_oss_<mode> beside the given one), and
records mlx-lm's logits and greedy ids on it, for
crates/engine/tests/engine_tests/parity_mlx_lm.rs (gpt_oss_mxfp4_matches_mlx_lm,
gpt_oss_nvfp4_and_mxfp8_match_mlx_lm); and
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


# MLX's microscaling modes: mxfp4 (E2M1, a power-of-two scale per 32),
# nvfp4 (E2M1, an FP8 scale per 16) and mxfp8 (E4M3, a scale per 32).
MODES = ["mxfp4", "nvfp4", "mxfp8"]


def convert_to(src: Path, fixture: Path, mode: str) -> dict:
    """mlx-lm's convert in `mode` into `fixture`; its outputs there."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / mode
        convert(str(src), mlx_path=str(out), quantize=True, q_mode=mode)
        if fixture.exists():
            shutil.rmtree(fixture)
        fixture.mkdir(parents=True)
        # The weights, config and tokenizer; not the README, the index of one
        # file, or the template (the test needs none of them).
        for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]:
            shutil.copy(out / name, fixture / name)
    config = json.loads((fixture / "config.json").read_text())
    print(f"{mode} quantization: {config['quantization']}")
    result = record(fixture, LONG_PROMPT)
    print(f"{mode}: greedy {result['greedy_ids']}")
    return result


def main() -> None:
    src, fixture, golden = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    variants = {}
    for mode in MODES:
        # the mxfp4 fixture keeps its name; the others sit beside it
        variants[mode] = convert_to(src, fixture.parent / f"gpt_oss_{mode}", mode)
    # OpenAI's own layout (MXFP4 `*_blocks` / `*_scales` experts, the rest
    # float), as `write_tiny_model` writes it beside the float folder.
    openai = record(src.parent / "openai_mxfp4", LONG_PROMPT)
    print(f"openai_mxfp4: greedy {openai['greedy_ids']}")
    variants["openai_mxfp4"] = openai
    text = json.dumps({"prompt_ids": LONG_PROMPT, "variants": variants}, separators=(",", ":"))
    golden.write_text(text + "\n")
    print(f"wrote {golden}")


if __name__ == "__main__":
    main()
