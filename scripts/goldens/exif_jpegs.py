"""Writes phone-style JPEGs with EXIF orientations 3, 6 and 8 into the test
images folder, and beside each the pixels mlx-vlm 0.7.6 sees for it: its
`load_image` (PIL open, `ImageOps.exif_transpose`, `convert("RGB")`) saved
as a lossless PNG.

Usage: exif_jpegs.py <fixtures dir>

Read by crates/engine/tests/engine_tests/exif_orientation.rs (every vision family's
processor gives the JPEG the patches it gives the PNG) and by the Gemma 4
goldens (scripts/goldens/gemma4_vl.py, the `exif6` case). Existing files are
never overwritten, so the committed ones stay the inputs; the PNGs are
rewritten only with their JPEG.

The JPEGs are as phones save them: 4:2:0 chroma, quality 90, the sensor's
landscape pixels with the orientation in IFD0 (big-endian, as iPhones write
it, for 6; little-endian, as many Android phones do, for 3 and 8).
"""
import struct
import sys
from pathlib import Path

from PIL import Image
from mlx_vlm.utils import load_image

from qwen_vl_preprocess import photo

# name: (orientation, stored width, stored height, big-endian EXIF)
JPEGS = {
    # portrait, downscaled by Gemma 4's tiny test budget
    "exif_o6.jpg": (6, 240, 180, True),
    # upside down, and portrait the other way; upscaled by that budget
    "exif_o3.jpg": (3, 120, 90, False),
    "exif_o8.jpg": (8, 120, 90, False),
}


def exif(orientation: int, big_endian: bool) -> bytes:
    """An APP1 Exif payload: a TIFF header and IFD0 with Make and Orientation."""
    e = ">" if big_endian else "<"
    make = b"vlm-test\0"
    entries = 2
    ifd_at = 8
    make_at = ifd_at + 2 + 12 * entries + 4
    ifd = struct.pack(e + "H", entries)
    ifd += struct.pack(e + "HHII", 0x010F, 2, len(make), make_at)
    ifd += struct.pack(e + "HHIH", 0x0112, 3, 1, orientation) + b"\0\0"
    ifd += struct.pack(e + "I", 0)
    return b"Exif\0\0" + (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, ifd_at) + ifd + make


def main() -> None:
    d = Path(sys.argv[1])
    d.mkdir(parents=True, exist_ok=True)
    for i, (name, (orientation, w, h, big)) in enumerate(JPEGS.items()):
        jpeg = d / name
        png = d / name.replace(".jpg", ".pil.png")
        if not jpeg.exists():
            Image.fromarray(photo(w, h, 60 + i)).save(jpeg, quality=90, subsampling=2, exif=exif(orientation, big))
            png.unlink(missing_ok=True)
        if not png.exists():
            shown = load_image(str(jpeg))
            assert shown.size == ((h, w) if orientation in (6, 8) else (w, h)), shown.size
            shown.save(png)
        print(f"{name}: orientation {orientation}, stored {w}x{h}, shown {Image.open(png).size}")


if __name__ == "__main__":
    main()
