"""Records mlx-vlm 0.7.6's Qwen2-VL image preprocessing of our test images, as goldens
for crates/engine/tests/engine_tests/vision_preprocess.rs.

Usage: qwen_vl_preprocess.py <fixtures dir> <out dir>

1. Writes the test images `pre_*` into the fixtures dir if they are missing (seeded;
   never overwritten, so the committed files stay the inputs).
2. For each config in CONFIGS: writes it to a scratch checkpoint folder as
   preprocessor_config.json and builds the image processor the way mlx-vlm's
   `Qwen2VLProcessor.from_pretrained` does (`_qwen_vl_image_kwargs` →
   `Qwen3VLImageProcessor`), without the tokenizer it does not need. It asserts the
   processor is mlx-vlm's numpy one: the transformers fallback (reference note 2) has
   other resize code.
3. Each image goes through the reference path of `generate`: `load_image`
   (open, EXIF transpose, convert("RGB")) → `process_image` → the processor.
   Records pixel_values [N, C*T*P*P] float32 into `pre_pixels.safetensors` (key
   "<config>/<image>") and grid, resized size and source size into
   `pre_goldens.json`.
"""
import importlib.metadata
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

# A real Qwen2-VL preprocessor_config.json in the old key style, with small pixel
# bounds (56×56 .. 12 merge windows of 28×28) so the goldens stay small and the
# images hit both bounds.
CONFIG_OLD_KEYS = {
    "min_pixels": 3136,
    "max_pixels": 9408,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2VLProcessor",
}
# The newer transformers style: bounds in `size` (pixel counts despite the names), no
# mean/std (so the reference's 0.5 defaults), extra keys the reference ignores.
CONFIG_SIZE_KEYS = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "merge_size": 2,
    "patch_size": 14,
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 12544, "shortest_edge": 6272},
    "temporal_patch_size": 2,
}
CONFIGS = {"old_keys": CONFIG_OLD_KEYS, "size_keys": CONFIG_SIZE_KEYS}
# Every image under the first config; the second (which checks the 0.5 defaults and the
# other key style) on a few, to keep the goldens small (float32 patches, ~75 KB per 56×56).
IMAGES_PER_CONFIG = {"old_keys": None, "size_keys": ["pre_photo.jpg", "pre_gray_small.png"]}


def photo(w, h, seed):
    """Photo-like RGB: smooth gradients, a few soft shapes, sensor noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack(
        [
            120 + 80 * np.sin(x / w * 3.1 + 0.3) * np.cos(y / h * 2.0),
            90 + 100 * (y / h),
            160 - 90 * (x / w) + 30 * np.sin((x + y) / 9.0),
        ],
        axis=-1,
    )
    for _ in range(4):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(8, 30)
        d = np.sqrt((x - cx) ** 2 + (y - cy) ** 2)
        img += (np.clip(1.2 - d / r, 0, 1)[..., None] * rng.uniform(-90, 90, 3))
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def make_fixtures(d: Path):
    d.mkdir(parents=True, exist_ok=True)

    def save(name, fn):
        p = d / name
        if not p.exists():
            fn(p)
        return p

    # JPEG photo (4:2:0 chroma, libjpeg's default) that hits max_pixels: 180×120.
    save("pre_photo.jpg", lambda p: Image.fromarray(photo(180, 120, 1)).save(p, quality=85))
    # RGBA PNG, alpha varying, colours under fully transparent pixels not black: the
    # reference drops alpha without compositing.
    def rgba(p):
        rgb = photo(64, 48, 2)
        a = np.tile(np.linspace(0, 255, 64).astype(np.uint8), (48, 1))
        a[:, :10] = 0
        Image.fromarray(np.dstack([rgb, a]), "RGBA").save(p)
    save("pre_alpha.png", rgba)
    # small grayscale that must be upscaled to min_pixels: 20×15.
    save("pre_gray_small.png", lambda p: Image.fromarray(photo(20, 15, 3)[..., 1]).save(p))
    # 126×98: 126/28 = 4.5 and 98/28 = 3.5 — Python rounds to 4 and 4 (half to even).
    save("pre_half_even.png", lambda p: Image.fromarray(photo(126, 98, 4)).save(p))
    # 70×42: 2.5 → 2 and 1.5 → 2.
    save("pre_half_even_small.bmp", lambda p: Image.fromarray(photo(70, 42, 5)).save(p))
    # 16-bit RGB PNG: the reference keeps each sample's high byte.
    def rgb16(p):
        v = photo(40, 30, 6).astype(np.uint16) * 257 + np.random.default_rng(6).integers(0, 257, (30, 40, 3)).astype(np.uint16)
        # Pillow cannot write 16-bit RGB; write the PNG by hand.
        import struct, zlib
        raw = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in v)
        def chunk(t, data):
            return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data))
        ihdr = struct.pack(">IIBBBBB", 40, 30, 16, 2, 0, 0, 0)
        p.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    save("pre_rgb16.png", rgb16)
    # JPEG stored 40 wide × 90 tall with EXIF orientation 6 (rotate 90° clockwise to view):
    # the reference's load_image applies it, so the processed image is 90×40 and its
    # grid is 4×6 patches (6×4 unrotated).
    def exif(p):
        ex = Image.Exif()
        ex[0x0112] = 6
        Image.fromarray(photo(40, 90, 7)).save(p, quality=90, exif=ex.tobytes())
    save("pre_exif_rotate.jpg", exif)
    # palette GIF (first frame of a 2-frame animation)
    def gif(p):
        frames = [Image.fromarray(photo(60, 40, 8 + i)).quantize(32) for i in range(2)]
        frames[0].save(p, save_all=True, append_images=frames[1:], duration=100, loop=0)
    save("pre_anim.gif", gif)
    # lossless and lossy WebP
    save("pre_lossless.webp", lambda p: Image.fromarray(photo(50, 60, 10)).save(p, lossless=True))
    save("pre_lossy.webp", lambda p: Image.fromarray(photo(90, 70, 11)).save(p, quality=80))
    # grayscale JPEG
    save("pre_gray.jpg", lambda p: Image.fromarray(photo(64, 72, 12)[..., 0]).save(p, quality=90))


def main():
    fixtures, out = Path(sys.argv[1]), Path(sys.argv[2])
    make_fixtures(fixtures)
    from safetensors.numpy import save_file
    from mlx_vlm.models.qwen3_vl.processing_qwen3_vl import Qwen3VLImageProcessor, _qwen_vl_image_kwargs
    from mlx_vlm.utils import load_image, process_image

    images = sorted(p for p in fixtures.iterdir() if p.name.startswith("pre_"))
    tensors, entries = {}, []
    for cname, cfg in CONFIGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "preprocessor_config.json").write_text(json.dumps(cfg))
            kwargs = _qwen_vl_image_kwargs(tmp, default_patch_size=14)
            ip = Qwen3VLImageProcessor(**kwargs)
        assert type(ip).__module__.startswith("mlx_vlm."), f"not mlx-vlm's processor: {type(ip)}"
        for path in images:
            if IMAGES_PER_CONFIG[cname] is not None and path.name not in IMAGES_PER_CONFIG[cname]:
                continue
            img = load_image(str(path))
            src_w, src_h = img.size
            img = process_image(img, None, ip)
            res = ip(images=[img])
            pv = np.asarray(res["pixel_values"], dtype=np.float32)
            grid = [int(v) for v in np.asarray(res["image_grid_thw"])[0]]
            rh, rw = ip._resolved_size(src_h, src_w)
            key = f"{cname}/{path.name}"
            tensors[key] = np.ascontiguousarray(pv)
            entries.append({"config": cname, "image": path.name, "grid": grid, "source_hw": [src_h, src_w],
                            "resized_hw": [rh, rw], "tensor": key})
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "pre_pixels.safetensors"))
    meta = {
        "generator": "scripts/make-preprocess-goldens.sh",
        "mlx_vlm": importlib.metadata.version("mlx-vlm"),
        "pillow": importlib.metadata.version("pillow"),
        "numpy": importlib.metadata.version("numpy"),
        "configs": CONFIGS,
        "entries": entries,
    }
    (out / "pre_goldens.json").write_text(json.dumps(meta, indent=1) + "\n")
    for e in entries:
        print(e["config"], e["image"], e["source_hw"], "->", e["resized_hw"], e["grid"], file=sys.stderr)


if __name__ == "__main__":
    main()
