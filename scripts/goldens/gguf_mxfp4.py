"""MXFP4 blocks as gguf-py (llama.cpp's own Python package, pinned in
.venv-ref) writes and reads them: a few rows of seeded values quantized with
`gguf.quants.quantize(..., MXFP4)`, and what `gguf.quants.dequantize` makes of
those bytes. The engine's GGUF import must read the same numbers from the same
bytes (crates/engine/tests/engine_tests/gguf_import.rs,
mxfp4_blocks_read_as_gguf_py_reads_them): a check of the block layout (scale
first, value j in the low nibble of byte j, value j + 16 in its high nibble)
by a reader nobody here wrote.

Usage: gguf_mxfp4.py <golden json>
"""
import json
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

ROWS, COLS = 4, 96


def main() -> None:
    rng = np.random.default_rng(35)
    values = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    # Rows of different magnitudes (exponents far apart), a block of zeros
    # (exponent 0) and one value far above the rest of its block.
    values *= np.array([[1.0], [1e-3], [40.0], [0.25]], dtype=np.float32)
    values[3, 32:64] = 0.0
    values[0, 5] = 50.0
    blocks = quantize(values, GGMLQuantizationType.MXFP4)
    back = dequantize(blocks, GGMLQuantizationType.MXFP4)
    assert blocks.dtype == np.uint8 and blocks.shape == (ROWS, COLS // 32 * 17), blocks.shape
    golden = {
        "gguf_version": __import__("importlib.metadata").metadata.version("gguf"),
        "shape": [ROWS, COLS],
        "blocks_hex": blocks.tobytes().hex(),
        "dequantized": [float(v) for v in back.reshape(-1)],
    }
    with open(sys.argv[1], "w") as f:
        json.dump(golden, f)
        f.write("\n")
    print(f"wrote {sys.argv[1]}: {ROWS}x{COLS} values, {blocks.size} bytes of MXFP4 blocks")


if __name__ == "__main__":
    main()
