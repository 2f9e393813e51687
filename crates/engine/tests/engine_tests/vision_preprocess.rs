//! Image preprocessing (Qwen2-VL / Qwen2.5-VL) against the reference, mlx-vlm 0.7.6's
//! numpy processor with Pillow 13: goldens from `scripts/make-preprocess-goldens.sh`
//! over the committed images `tests/fixtures/images/pre_*`.
//!
//! Tolerance: grids exact; pixel values compared after normalization. Lossless
//! formats and JPEG must be identical (max |Δ| = 0: decode — JPEG by libjpeg-turbo's
//! decoder, as Pillow's —, PIL bicubic and the float32 arithmetic are all reproduced
//! exactly); lossy WebP gets a bound (see `tolerance_steps`).
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use engine::error::Error;
use engine::vision::preprocess::Normalize;
use engine::vision::QwenImageProcessor;
use mlx_rs::Array;
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images")
}

fn goldens() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens")
}

fn read_fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A processor from a config written to a fresh folder, so `from_folder` is what runs.
fn processor_from(file: &str, config: &Value) -> QwenImageProcessor {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(file), serde_json::to_string_pretty(config).unwrap()).unwrap();
    QwenImageProcessor::from_folder(dir.path()).unwrap()
}

/// Largest difference allowed, in 8-bit steps (|Δ| · std · 255), per image.
///
/// Lossless inputs (PNG 8/16-bit, RGBA, gray, BMP, GIF, WebP) and JPEG: 0 — identical
/// floats. JPEG is decoded by libjpeg-turbo's decoder, Pillow's own
/// (vision/preprocess/jpeg.rs); zune-jpeg, used before, was off by up to 4 steps on the
/// photo (4:2:0) and 1 on the grayscale JPEG, which a 4-step bound here let through.
/// Lossy WebP also measures 0 (image-webp reproduces libwebp's decoding here), but the
/// format allows decoder freedom, so it keeps that old 4-step bound.
fn tolerance_steps(image: &str) -> f32 {
    if image == "pre_lossy.webp" {
        4.0
    } else {
        0.0
    }
}

#[test]
fn pixels_match_the_reference_goldens() {
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(goldens().join("pre_goldens.json")).unwrap())
            .unwrap();
    let tensors: HashMap<String, Array> =
        Array::load_safetensors(goldens().join("pre_pixels.safetensors")).unwrap();
    let entries = meta["entries"].as_array().unwrap();
    assert!(entries.len() >= 10, "goldens cover every fixture");
    let mut failures = Vec::new();
    eprintln!(
        "{:<10} {:<26} {:>11} {:>10} {:>12} {:>13} {:>9}",
        "config", "image", "grid", "max|Δ|", "max Δ (/255)", "mean Δ (/255)", "differing"
    );
    for e in entries {
        let (cname, image) = (e["config"].as_str().unwrap(), e["image"].as_str().unwrap());
        let proc_ = processor_from("preprocessor_config.json", &meta["configs"][cname]);
        let out = proc_
            .preprocess(&read_fixture(image))
            .unwrap_or_else(|err| panic!("{cname}/{image}: {err}"));
        let want_grid: Vec<i32> =
            e["grid"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i32).collect();
        assert_eq!(out.grid.to_vec(), want_grid, "{cname}/{image}: grid");
        let golden = &tensors[e["tensor"].as_str().unwrap()];
        golden.eval().unwrap();
        out.pixels.eval().unwrap();
        assert_eq!(out.pixels.shape(), golden.shape(), "{cname}/{image}: shape");
        let (ours, theirs) = (out.pixels.as_slice::<f32>(), golden.as_slice::<f32>());
        let cols = golden.shape()[1] as usize;
        let per_channel = cols / 3;
        let (mut max_abs, mut max_u8, mut sum_u8, mut differing) = (0f32, 0f32, 0f64, 0usize);
        for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
            let d = (a - b).abs();
            if d > 0.0 {
                differing += 1;
            }
            max_abs = max_abs.max(d);
            // back to 8-bit steps: Δ · std · 255
            let steps = d * proc_.normalize.image_std[(i % cols) / per_channel] * 255.0;
            max_u8 = max_u8.max(steps);
            sum_u8 += steps as f64;
        }
        eprintln!(
            "{cname:<10} {image:<26} {:>11} {max_abs:>10.6} {max_u8:>12.3} {:>13.4} {:>8.3}%",
            format!("{:?}", out.grid),
            sum_u8 / ours.len() as f64,
            100.0 * differing as f64 / ours.len() as f64
        );
        // 1e-3: a step recomputed from float32 differences is not an exact integer
        if max_u8 > tolerance_steps(image) + 1e-3
            || (tolerance_steps(image) == 0.0 && max_abs != 0.0)
        {
            failures.push(format!(
                "{cname}/{image}: max Δ {max_u8} steps (|Δ| {max_abs}) > {}",
                tolerance_steps(image)
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn num_image_tokens_and_grid_for_agree_with_preprocess() {
    let p = QwenImageProcessor { min_pixels: 3136, max_pixels: 9408, ..Default::default() };
    let out = p.preprocess(&read_fixture("pre_photo.jpg")).unwrap();
    // 180×120 hits max_pixels: 112×56 → 8×4 patches → 8 merged tokens
    assert_eq!(out.grid, [1, 4, 8]);
    assert_eq!(p.grid_for(120, 180).unwrap(), out.grid);
    assert_eq!(p.num_image_tokens(out.grid), 8);
    assert_eq!(out.pixels.shape(), &[32, 3 * 2 * 14 * 14]);
}

#[test]
fn cache_key_changes_with_every_output_parameter() {
    let base = QwenImageProcessor::default();
    let normalize = |n: Normalize| QwenImageProcessor { normalize: n, ..base.clone() };
    let variants = [
        QwenImageProcessor { min_pixels: 1, ..base.clone() },
        QwenImageProcessor { max_pixels: 1 << 20, ..base.clone() },
        normalize(Normalize { image_mean: [0.4, 0.5, 0.5], ..base.normalize }),
        normalize(Normalize { image_std: [0.5, 0.5, 0.4], ..base.normalize }),
        QwenImageProcessor { patch_size: 16, ..base.clone() },
        normalize(Normalize { rescale_factor: 1.0, ..base.normalize }),
        normalize(Normalize { do_normalize: false, ..base.normalize }),
    ];
    for v in variants {
        assert_ne!(v.cache_key(), base.cache_key(), "{v:?}");
    }
    assert_eq!(base.cache_key(), QwenImageProcessor::default().cache_key());
}

// ---- from_folder on real-looking configs ----------------------------------------

#[test]
fn from_folder_reads_the_old_qwen2_vl_keys() {
    // Qwen/Qwen2-VL-2B-Instruct's preprocessor_config.json
    let p = processor_from(
        "preprocessor_config.json",
        &serde_json::json!({
            "min_pixels": 3136,
            "max_pixels": 12845056,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2VLProcessor"
        }),
    );
    assert_eq!((p.patch_size, p.temporal_patch_size, p.merge_size), (14, 2, 2));
    assert_eq!((p.min_pixels, p.max_pixels), (3136, 12_845_056));
    let n = p.normalize;
    assert_eq!(n.image_mean, [0.48145466, 0.4578275, 0.40821073]);
    // each f64 rounded to the nearest f32, as np.array(..., dtype=float32)
    assert_eq!(n.image_std, [0.26862954f64 as f32, 0.26130258f64 as f32, 0.27577711f64 as f32]);
    assert!(n.do_rescale && n.do_normalize);
}

#[test]
fn from_folder_reads_the_size_keys_and_lets_top_level_keys_win() {
    // transformers ≥ 4.5x re-saves with both; older ones wrote size.{min,max}_pixels.
    let p = processor_from(
        "preprocessor_config.json",
        &serde_json::json!({
            "do_convert_rgb": true, "do_normalize": true, "do_rescale": true, "do_resize": true,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
            "max_pixels": 12845056, "merge_size": 2, "min_pixels": 3136, "patch_size": 14,
            "resample": 3, "rescale_factor": 0.00392156862745098,
            "size": {"longest_edge": 100000, "shortest_edge": 1000},
            "temporal_patch_size": 2
        }),
    );
    assert_eq!((p.min_pixels, p.max_pixels), (3136, 12_845_056));
    // applied in float32
    assert_eq!(p.normalize.rescale_factor as f32, 1.0f32 / 255.0);

    let p = processor_from(
        "preprocessor_config.json",
        &serde_json::json!({"size": {"longest_edge": 1003520, "shortest_edge": 3136}, "patch_size": 16}),
    );
    assert_eq!((p.min_pixels, p.max_pixels, p.patch_size), (3136, 1_003_520, 16));
    assert_eq!(p.normalize.image_mean, [0.5; 3], "no mean in the config: the reference's 0.5");

    let p = processor_from(
        "preprocessor_config.json",
        &serde_json::json!({"size": {"max_pixels": 200704, "min_pixels": 784}}),
    );
    assert_eq!((p.min_pixels, p.max_pixels), (784, 200_704));
}

#[test]
fn from_folder_falls_back_to_processor_config_and_defaults() {
    // newer transformers: everything in processor_config.json under image_processor
    let p = processor_from(
        "processor_config.json",
        &serde_json::json!({"image_processor": {"max_pixels": 50176, "min_pixels": 784, "patch_size": 14},
                            "processor_class": "Qwen2_5_VLProcessor"}),
    );
    assert_eq!((p.min_pixels, p.max_pixels), (784, 50_176));

    // both: processor_config.json's image_processor overrides, as in the reference
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("preprocessor_config.json"),
        r#"{"min_pixels": 1, "max_pixels": 2000}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("processor_config.json"),
        r#"{"image_processor": {"max_pixels": 3000}}"#,
    )
    .unwrap();
    let p = QwenImageProcessor::from_folder(dir.path()).unwrap();
    assert_eq!((p.min_pixels, p.max_pixels), (1, 3000));

    // neither: the reference's Qwen2-VL defaults
    let empty = tempfile::tempdir().unwrap();
    let p = QwenImageProcessor::from_folder(empty.path()).unwrap();
    assert_eq!((p.patch_size, p.min_pixels, p.max_pixels), (14, 3136, 1_003_520));
    assert_eq!(p.normalize.image_std, [0.5; 3]);
}

#[test]
fn from_folder_rejects_broken_configs() {
    for (text, what) in [
        ("{not json", "preprocessor_config.json"),
        (r#"{"patch_size": "14"}"#, "patch_size"),
        (r#"{"image_std": [0.5, 0.0, 0.5]}"#, "image_std"),
        (r#"{"image_mean": [0.5, 0.5]}"#, "image_mean"),
        (r#"{"min_pixels": 5000, "max_pixels": 4000}"#, "min_pixels"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("preprocessor_config.json"), text).unwrap();
        match QwenImageProcessor::from_folder(dir.path()) {
            Err(Error::InvalidConfig(msg)) => assert!(msg.contains(what), "{text}: {msg}"),
            other => panic!("{text}: {other:?}"),
        }
    }
}

// ---- bad input → InvalidImage, never a panic -------------------------------------

fn invalid_reason(p: &QwenImageProcessor, bytes: &[u8]) -> String {
    match p.preprocess(bytes) {
        Err(e @ Error::InvalidImage { .. }) => {
            assert_eq!(e.code(), "INVALID_IMAGE");
            let Error::InvalidImage { reason, .. } = e else { unreachable!() };
            reason
        }
        Err(other) => panic!("expected InvalidImage, got {other:?}"),
        Ok(out) => panic!("expected InvalidImage, got an image with grid {:?}", out.grid),
    }
}

#[test]
fn empty_file_is_invalid() {
    let reason = invalid_reason(&QwenImageProcessor::default(), b"");
    assert!(reason.contains("empty"), "{reason}");
}

#[test]
fn truncated_png_and_jpeg_are_invalid() {
    let p = QwenImageProcessor::default();
    let png = read_fixture("pre_half_even.png");
    let reason = invalid_reason(&p, &png[..png.len() / 2]);
    assert!(
        reason.contains("PNG") && (reason.contains("truncated") || reason.contains("corrupt")),
        "{reason}"
    );
    // cut inside the header
    let reason = invalid_reason(&p, &png[..20]);
    assert!(reason.contains("PNG"), "{reason}");

    let jpg = read_fixture("pre_photo.jpg");
    // inside the headers (a cut inside the entropy-coded data is padded by libjpeg,
    // with a warning, and decodes to a partly grey image)
    let reason = invalid_reason(&p, &jpg[..300]);
    assert!(reason.contains("JPEG"), "{reason}");
}

#[test]
fn random_bytes_and_text_are_invalid() {
    let p = QwenImageProcessor::default();
    let mut rng = 0x2545F4914F6CDD1Du64;
    let noise: Vec<u8> = (0..4096)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 24) as u8
        })
        .collect();
    let reason = invalid_reason(&p, &noise);
    assert!(reason.contains("not a recognized image format"), "{reason}");
    let reason = invalid_reason(&p, b"Hello, this is a text file.\nNot an image.\n");
    assert!(reason.contains("text file"), "{reason}");
}

#[test]
fn unsupported_formats_are_named() {
    let p = QwenImageProcessor::default();
    // a little-endian TIFF header: recognized, but the codec is not built in
    let mut tiff = b"II*\x00\x08\x00\x00\x00".to_vec();
    tiff.extend([0u8; 64]);
    let reason = invalid_reason(&p, &tiff);
    assert!(
        reason.contains("TIFF") && reason.contains("not supported") && reason.contains("PNG, JPEG"),
        "{reason}"
    );
    // SVG is XML text
    let svg = br#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>"#;
    let reason = invalid_reason(&p, svg);
    assert!(reason.contains("not an image"), "{reason}");
}

/// A valid 1-bit grayscale PNG of any size, all black, written without holding its
/// pixels: every row is a filter byte 0 and zero bits, so the zlib stream is one
/// literal 0 followed by length-258 distance-1 matches (fixed Huffman codes).
/// 20000×20000 comes to ~300 KB.
fn black_png_1bit(width: u32, height: u32) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }
    impl Bits {
        fn put(&mut self, value: u64, bits: u32) {
            self.acc |= value << self.n;
            self.n += bits;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        /// Huffman codes go most significant bit first.
        fn code(&mut self, code: u64, bits: u32) {
            let rev = (0..bits).fold(0, |r, i| r | (((code >> i) & 1) << (bits - 1 - i)));
            self.put(rev, bits);
        }
    }
    let raw_len = height as u64 * (1 + (width as u64).div_ceil(8));
    let mut b = Bits { out: vec![0x78, 0x01], acc: 0, n: 0 };
    b.put(1, 1); // final block
    b.put(1, 2); // fixed Huffman
    b.code(0x30, 8); // literal 0
    let matches = (raw_len - 1) / 258;
    for _ in 0..matches {
        b.code(0xC5, 8); // length code 285 = 258 bytes
        b.code(0, 5); // distance code 0 = 1 back
    }
    for _ in 0..(raw_len - 1) % 258 {
        b.code(0x30, 8);
    }
    b.code(0, 7); // end of block
    if b.n > 0 {
        b.put(0, 8 - b.n);
    }
    // Adler-32 of raw_len zero bytes: a = 1, b = raw_len (mod 65521)
    let adler = (((raw_len % 65521) as u32) << 16) | 1;
    let mut zlib = b.out;
    zlib.extend(adler.to_be_bytes());

    fn crc32(data: &[u8]) -> u32 {
        let mut c = 0xFFFF_FFFFu32;
        for &byte in data {
            c ^= byte as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            }
        }
        !c
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8], data: &[u8]| {
        png.extend((data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend(data);
        png.extend(&body);
        png.extend(crc32(&body).to_be_bytes());
    };
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([1, 0, 0, 0, 0]); // 1 bit, grayscale
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", &zlib);
    chunk(b"IEND", b"");
    png
}

#[test]
fn the_bomb_generator_writes_valid_pngs() {
    // Guards the next test: the same generator at a size we do decode.
    let p = QwenImageProcessor { min_pixels: 3136, max_pixels: 9408, ..Default::default() };
    let out = p.preprocess(&black_png_1bit(61, 50)).unwrap();
    assert_eq!(out.grid, [1, 4, 4]);
    out.pixels.eval().unwrap();
    // black: (0 - 0.5) / 0.5 everywhere
    assert!(out.pixels.as_slice::<f32>().iter().all(|&v| v == -1.0));
}

#[test]
fn huge_dimensions_are_refused_from_the_header() {
    let p = QwenImageProcessor::default();
    // 20000×20000: 400 MP, 1.2 GB as RGB; the file is a few hundred KB.
    let png = black_png_1bit(20_000, 20_000);
    assert!(png.len() < 1_000_000, "{}", png.len());
    let start = std::time::Instant::now();
    let reason = invalid_reason(&p, &png);
    assert!(reason.contains("20000×20000") && reason.contains("too large"), "{reason}");
    // refused from the header, not after inflating 50 MB of rows (not a timing
    // assertion of speed, a check that no decoding happened: that takes seconds)
    assert!(start.elapsed().as_secs_f64() < 1.0, "{:?}", start.elapsed());

    // under the side limit but over the pixel limit (a decompression bomb)
    let reason = invalid_reason(&p, &black_png_1bit(16_000, 6_000));
    assert!(reason.contains("MP") && reason.contains("decompression bomb"), "{reason}");

    // a JPEG whose frame header claims 20000×20000
    let mut jpg = read_fixture("pre_photo.jpg");
    let sof = jpg.windows(2).position(|w| w == [0xFF, 0xC0]).expect("baseline SOF0");
    jpg[sof + 5..sof + 9].copy_from_slice(&[0x4E, 0x20, 0x4E, 0x20]);
    let reason = invalid_reason(&p, &jpg);
    assert!(reason.contains("20000") && reason.contains("too large"), "{reason}");
}

#[test]
fn extreme_aspect_ratio_is_invalid() {
    let p = QwenImageProcessor::default();
    let reason = invalid_reason(&p, &black_png_1bit(2010, 10));
    assert!(reason.contains("aspect ratio") && reason.contains("200"), "{reason}");
    // 200:1 exactly is allowed, as in the reference
    assert!(p.preprocess(&black_png_1bit(2000, 10)).is_ok());
}

#[test]
fn mangled_files_never_panic() {
    // Truncations and byte flips of every fixture format: each result is an image or
    // InvalidImage, never a panic or another error.
    let p = QwenImageProcessor { min_pixels: 3136, max_pixels: 9408, ..Default::default() };
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut ok, mut invalid) = (0, 0);
    for name in [
        "pre_photo.jpg",
        "pre_alpha.png",
        "pre_anim.gif",
        "pre_lossy.webp",
        "pre_lossless.webp",
        "pre_half_even_small.bmp",
    ] {
        let file = read_fixture(name);
        for i in 0..60 {
            let mut bytes = file.clone();
            if i % 2 == 0 {
                bytes.truncate((next() % file.len() as u64) as usize);
            } else {
                for _ in 0..1 + next() % 8 {
                    let at = (next() % bytes.len() as u64) as usize;
                    bytes[at] = next() as u8;
                }
            }
            match p.preprocess(&bytes) {
                Ok(_) => ok += 1,
                Err(Error::InvalidImage { .. }) => invalid += 1,
                Err(other) => panic!("{name} mutation {i}: {other:?}"),
            }
        }
    }
    // both outcomes occur, so the loop exercised the decoders' error paths
    assert!(ok > 0 && invalid > 0, "ok {ok}, invalid {invalid}");
}

#[test]
fn alpha_is_dropped_not_composited() {
    // pre_alpha.png's first 10 columns are fully transparent over coloured pixels;
    // the reference keeps those colours (PIL convert("RGB")), so they are not black
    // or white after preprocessing (composited over black they would be 0).
    let p = QwenImageProcessor {
        min_pixels: 64 * 48,
        max_pixels: 64 * 48 * 4,
        patch_size: 14,
        ..Default::default()
    };
    let out = p.preprocess(&read_fixture("pre_alpha.png")).unwrap();
    out.pixels.eval().unwrap();
    let v = out.pixels.as_slice::<f32>();
    let plane = 2 * 14 * 14;
    let rgb: Vec<f32> = (0..3).map(|c| (v[c * plane] * 0.5 + 0.5) * 255.0).collect();
    assert!(rgb.iter().any(|&x| x > 20.0 && x < 235.0), "{rgb:?}");
}
