//! Image file bytes → 8-bit RGB pixels, as the reference pipeline does it
//! (mlx-vlm's `load_image`: `PIL.Image.open` → `ImageOps.exif_transpose` → `convert("RGB")`),
//! with limits checked before any pixel buffer is allocated.
//!
//! Formats: PNG, JPEG, WebP, GIF (first frame), BMP. Anything else is refused by name.
//!
//! Limits (see [`DecodeLimits`]): at most [`MAX_SIDE`] pixels a side and
//! [`MAX_PIXELS`] pixels in all (Pillow's own decompression-bomb threshold, where the
//! reference starts warning), and at most [`MAX_DECODE_BYTES`] for the decoded buffer.
//! They are checked from the header, so a 20000×20000 PNG of a few KB is refused
//! without allocating its 1.2 GB. Huge JPEGs are not decoded at reduced scale: the
//! `image` crate's JPEG decoder (zune-jpeg) has no DCT-scaling mode, so the limit is a
//! refusal, not a downscale.
//!
//! JPEG pixels come from libjpeg-turbo's decoder, as Pillow's do ([`super::jpeg`]): the
//! `image` crate's zune-jpeg rounds differently (up to ±4 a sample); it still reads the
//! JPEG's header and decodes CMYK JPEGs. PNG, BMP, GIF and WebP (lossless and the lossy
//! sample tested) decode identically to Pillow through the `image` crate.
//!
//! Conversion to RGB follows PIL's `convert("RGB")`: alpha is dropped, not composited
//! (a transparent pixel keeps whatever colour it stores); gray is replicated; 16-bit
//! samples keep their high byte (PIL's `RGB;16B`/`LA;16B` raw modes). One deliberate
//! difference: PIL converts 16-bit *grayscale* (mode `I;16`) to RGB by clipping at 255,
//! which turns nearly every such image white; we keep the high byte as for the other
//! 16-bit modes.
use std::io::Cursor;

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};

/// The longest side we decode. Wider than any camera or screenshot; far below what a
/// forged header can claim (PNG allows 2^31).
pub const MAX_SIDE: u32 = 32_768;

/// Pillow's `Image.MAX_IMAGE_PIXELS` (1024 · 1024 · 1024 / 4 / 3): the reference warns
/// of a possible decompression bomb above it. 89.5 MP is a 268 MB RGB buffer, more than
/// any phone photo (48 MP) needs.
pub const MAX_PIXELS: u64 = 89_478_485;

/// The most the decoder may allocate for the decoded image (e.g. 16-bit RGBA is
/// 8 bytes a pixel, so this also caps deep images at ~64 MP).
pub const MAX_DECODE_BYTES: u64 = 512 * 1024 * 1024;

/// Decoded pixels: `rgb.len() == width * height * 3`, rows top to bottom.
pub(crate) struct Rgb8 {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<u8>,
}

fn format_name(f: ImageFormat) -> &'static str {
    match f {
        ImageFormat::Png => "PNG",
        ImageFormat::Jpeg => "JPEG",
        ImageFormat::WebP => "WebP",
        ImageFormat::Gif => "GIF",
        ImageFormat::Bmp => "BMP",
        ImageFormat::Tiff => "TIFF",
        ImageFormat::Avif => "AVIF",
        ImageFormat::Ico => "ICO",
        ImageFormat::Hdr => "HDR",
        ImageFormat::OpenExr => "OpenEXR",
        ImageFormat::Pnm => "PNM",
        ImageFormat::Tga => "TGA",
        ImageFormat::Dds => "DDS",
        ImageFormat::Farbfeld => "Farbfeld",
        ImageFormat::Qoi => "QOI",
        _ => "this",
    }
}

const SUPPORTED: &str = "PNG, JPEG, WebP, GIF or BMP";

/// Decodes `bytes`; every failure is a sentence for the user (the caller wraps it in
/// `Error::InvalidImage`).
pub(crate) fn decode_rgb8(bytes: &[u8]) -> Result<Rgb8, String> {
    if bytes.is_empty() {
        return Err("the file is empty (0 bytes)".into());
    }
    // A decoder bug must not take the engine thread down with it: the decoders are
    // pure Rust over untrusted input, so a panic is a bug, but it is still this
    // image's failure and nothing else's.
    match std::panic::catch_unwind(|| decode_inner(bytes)) {
        Ok(r) => r,
        Err(_) => Err("the image decoder failed on this file (corrupt data)".into()),
    }
}

/// [`decode_rgb8`] for an image the error names as `name` (a file name,
/// "#2 in the request"): a failure is `Error::InvalidImage`.
pub(crate) fn decode_named(bytes: &[u8], name: &str) -> crate::error::Result<Rgb8> {
    decode_rgb8(bytes)
        .map_err(|reason| crate::error::Error::InvalidImage { image: name.to_string(), reason })
}

/// The size the image shows at (EXIF rotation applied), read from its
/// header without decoding a pixel: what counting a prompt's image tokens needs.
pub fn displayed_size(bytes: &[u8]) -> Result<(usize, usize), String> {
    if bytes.is_empty() {
        return Err("the file is empty (0 bytes)".into());
    }
    match std::panic::catch_unwind(|| {
        let (mut decoder, _) = open(bytes)?;
        let (w, h) = decoder.dimensions();
        check_size(w, h)?;
        let orientation =
            decoder.orientation().unwrap_or(image::metadata::Orientation::NoTransforms);
        use image::metadata::Orientation::*;
        let turned = matches!(orientation, Rotate90 | Rotate270 | Rotate90FlipH | Rotate270FlipH);
        Ok(if turned { (h as usize, w as usize) } else { (w as usize, h as usize) })
    }) {
        Ok(r) => r,
        Err(_) => Err("the image decoder failed on this file (corrupt data)".into()),
    }
}

/// HEIF brands of an ISO base media file's `ftyp` box (iPhone photos: HEIC).
const HEIF_BRANDS: &[&[u8; 4]] =
    &[b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1", b"avif", b"avis"];

/// Whether `bytes` is a HEIF / HEIC / AVIF file (by its `ftyp` brand).
pub fn is_heif(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && &bytes[4..8] == b"ftyp" && HEIF_BRANDS.iter().any(|b| &bytes[8..12] == *b)
}

/// A decoder for `bytes` within the limits, and the format's name.
fn open(bytes: &[u8]) -> Result<(impl image::ImageDecoder + '_, &'static str), String> {
    if is_heif(bytes) {
        return Err(
            "HEIC / HEIF photos are not supported here; convert the photo to JPEG or PNG first"
                .into(),
        );
    }
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("could not read the file: {e}"))?;
    let format = match reader.format() {
        Some(
            f @ (ImageFormat::Png
            | ImageFormat::Jpeg
            | ImageFormat::WebP
            | ImageFormat::Gif
            | ImageFormat::Bmp),
        ) => f,
        Some(other) => {
            return Err(format!(
                "{} images are not supported (use {SUPPORTED})",
                format_name(other)
            ));
        }
        None => {
            let what = if looks_like_text(bytes) {
                "a text file"
            } else {
                "not a recognized image format"
            };
            return Err(format!("{what}, not an image (use {SUPPORTED})"));
        }
    };
    let name = format_name(format);
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    let mut reader = reader;
    reader.limits(limits);
    let decoder = reader.into_decoder().map_err(|e| describe(name, e))?;
    Ok((decoder, name))
}

fn decode_inner(bytes: &[u8]) -> Result<Rgb8, String> {
    let (mut decoder, name) = open(bytes)?;
    let (w, h) = decoder.dimensions();
    if w == 0 || h == 0 {
        return Err(format!("the {name} header says {w}×{h} pixels"));
    }
    check_size(w, h)?;
    let total = decoder.total_bytes();
    if total > MAX_DECODE_BYTES {
        return Err(format!(
            "{w}×{h} {name} needs {} MB to decode, more than the {} MB limit",
            total / 1_000_000,
            MAX_DECODE_BYTES / 1_000_000
        ));
    }
    // EXIF orientation, as the reference's `ImageOps.exif_transpose`. A malformed
    // EXIF block is not worth refusing the image for: PIL ignores it too.
    let orientation = decoder.orientation().unwrap_or(image::metadata::Orientation::NoTransforms);
    let libjpeg = match name {
        "JPEG" => super::jpeg::decode_rgb(bytes, w as usize, h as usize)?,
        _ => None,
    };
    let mut img = match libjpeg {
        Some(rgb) => DynamicImage::ImageRgb8(
            image::RgbImage::from_raw(w, h, rgb).expect("decode_rgb returns w·h·3 samples"),
        ),
        None => DynamicImage::from_decoder(decoder).map_err(|e| describe(name, e))?,
    };
    img.apply_orientation(orientation);
    Ok(to_rgb8(img))
}

/// Checks the header's dimensions against the limits, with the numbers in the message.
pub(crate) fn check_size(w: u32, h: u32) -> Result<(), String> {
    if w > MAX_SIDE || h > MAX_SIDE {
        return Err(format!("{w}×{h} pixels is too large (at most {MAX_SIDE} pixels a side)"));
    }
    let pixels = w as u64 * h as u64;
    if pixels > MAX_PIXELS {
        return Err(format!(
            "{w}×{h} pixels ({:.1} MP) is too large (at most {:.1} MP; this limit guards against decompression bombs)",
            pixels as f64 / 1e6,
            MAX_PIXELS as f64 / 1e6
        ));
    }
    Ok(())
}

fn looks_like_text(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(512)];
    std::str::from_utf8(head).is_ok_and(|s| s.chars().all(|c| !c.is_control() || c.is_whitespace()))
}

fn describe(name: &str, e: image::ImageError) -> String {
    use image::error::{ImageError, LimitErrorKind};
    match e {
        ImageError::Limits(l) => match l.kind() {
            LimitErrorKind::DimensionError => {
                format!("the {name} is too large (at most {MAX_SIDE} pixels a side)")
            }
            LimitErrorKind::InsufficientMemory => {
                format!("the {name} needs more than {} MB to decode", MAX_DECODE_BYTES / 1_000_000)
            }
            _ => format!("the {name} exceeds a decoding limit: {l}"),
        },
        ImageError::Unsupported(u) => format!("this kind of {name} is not supported: {u}"),
        ImageError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            format!("the {name} file is truncated")
        }
        other => format!("the {name} file is corrupt or truncated: {other}"),
    }
}

/// PIL `convert("RGB")` of what the decoder produced. Converts in place where the
/// buffer can shrink, so a large RGBA photo is not held twice.
fn to_rgb8(img: DynamicImage) -> Rgb8 {
    let (width, height) = (img.width() as usize, img.height() as usize);
    let rgb = match img {
        DynamicImage::ImageRgb8(b) => b.into_raw(),
        DynamicImage::ImageRgba8(b) => compact(b.into_raw(), 4, |p, o| o.copy_from_slice(&p[..3])),
        DynamicImage::ImageLuma8(b) => b.into_raw().iter().flat_map(|&v| [v, v, v]).collect(),
        DynamicImage::ImageLumaA8(b) => {
            b.into_raw().chunks_exact(2).flat_map(|p| [p[0], p[0], p[0]]).collect()
        }
        DynamicImage::ImageRgb16(b) => b.into_raw().iter().map(|&v| (v >> 8) as u8).collect(),
        DynamicImage::ImageRgba16(b) => b
            .into_raw()
            .chunks_exact(4)
            .flat_map(|p| [(p[0] >> 8) as u8, (p[1] >> 8) as u8, (p[2] >> 8) as u8])
            .collect(),
        DynamicImage::ImageLuma16(b) => {
            b.into_raw().iter().flat_map(|&v| [(v >> 8) as u8; 3]).collect()
        }
        DynamicImage::ImageLumaA16(b) => {
            b.into_raw().chunks_exact(2).flat_map(|p| [(p[0] >> 8) as u8; 3]).collect()
        }
        // Float images come only from formats we do not enable (HDR, EXR); keep a
        // sane answer should that change.
        other => other.to_rgb8().into_raw(),
    };
    debug_assert_eq!(rgb.len(), width * height * 3);
    Rgb8 { width, height, rgb }
}

/// Rewrites `n`-byte pixels as 3-byte pixels within the same buffer (front to back is
/// safe: pixel i's output ends at 3(i+1) ≤ n·i + n, before its input is overwritten).
fn compact(mut buf: Vec<u8>, n: usize, f: impl Fn(&[u8], &mut [u8])) -> Vec<u8> {
    let pixels = buf.len() / n;
    let mut px = [0u8; 8];
    for i in 0..pixels {
        px[..n].copy_from_slice(&buf[i * n..i * n + n]);
        f(&px[..n], &mut buf[i * 3..i * 3 + 3]);
    }
    buf.truncate(pixels * 3);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageBuffer, Luma, LumaA, Rgb, Rgba};

    #[test]
    fn heic_photos_are_named_not_called_corrupt() {
        let mut heic = vec![0, 0, 0, 24];
        heic.extend_from_slice(b"ftypheic\0\0\0\0mif1heic");
        let e = decode_rgb8(&heic).err().expect("refused");
        assert!(e.contains("HEIC"), "{e}");
        assert!(displayed_size(&heic).unwrap_err().contains("HEIC"));
    }

    #[test]
    fn alpha_is_dropped_in_place() {
        let img =
            ImageBuffer::<Rgba<u8>, _>::from_raw(2, 1, vec![1, 2, 3, 0, 4, 5, 6, 255]).unwrap();
        let out = to_rgb8(DynamicImage::ImageRgba8(img));
        assert_eq!((out.width, out.height, out.rgb), (2, 1, vec![1, 2, 3, 4, 5, 6]));
        let img = ImageBuffer::<LumaA<u8>, _>::from_raw(2, 1, vec![9, 0, 200, 128]).unwrap();
        assert_eq!(to_rgb8(DynamicImage::ImageLumaA8(img)).rgb, [9, 9, 9, 200, 200, 200]);
    }

    #[test]
    fn sixteen_bit_keeps_the_high_byte() {
        // PIL's RGB;16B raw mode: 0x80FF → 0x80, not rounded to 0x81
        let img = ImageBuffer::<Rgb<u16>, _>::from_raw(1, 1, vec![0x80FF, 0x00FF, 0xFFFF]).unwrap();
        assert_eq!(to_rgb8(DynamicImage::ImageRgb16(img)).rgb, [0x80, 0x00, 0xFF]);
        // gray: also the high byte (PIL would clip 0x1234 to 255: our one deliberate difference)
        let img = ImageBuffer::<Luma<u16>, _>::from_raw(2, 1, vec![0x1234, 0x00FF]).unwrap();
        assert_eq!(to_rgb8(DynamicImage::ImageLuma16(img)).rgb, [0x12, 0x12, 0x12, 0, 0, 0]);
    }

    #[test]
    fn size_limits_name_the_numbers() {
        assert!(check_size(MAX_SIDE, 1).is_ok());
        let e = check_size(MAX_SIDE + 1, 1).unwrap_err();
        assert!(e.contains(&format!("{}", MAX_SIDE + 1)), "{e}");
        // 9459² = 89.47 MP is allowed, 9460² is over Pillow's bomb threshold
        assert!(check_size(9459, 9459).is_ok());
        assert!(check_size(9460, 9460).unwrap_err().contains("decompression bomb"));
    }
}
