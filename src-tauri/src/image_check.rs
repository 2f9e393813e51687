//! Each image is decoded once as it is attached, so a damaged one is
//! refused then, naming the file, and never reaches a message. The store
//! only checks a file's first bytes; a PNG cut short has the right first
//! bytes and used to fail the whole message later in the engine ("invalid
//! image #6" in a message of five pictures, with a blank thumbnail before).
//! The limits are the engine's (crates/engine/src/vision/preprocess/decode.rs),
//! so an image that passes here is one the engine can decode.
use std::io::Cursor;

use image::{ImageFormat, ImageReader, Limits};

use crate::error::{AppError, AppResult};

/// The code of an image that cannot be decoded (damaged, cut short, too
/// large to decode). A file that is no image at all keeps the store's
/// NOT_AN_IMAGE, whose message lists the formats.
pub const IMAGE_UNREADABLE: &str = "IMAGE_UNREADABLE";

const MAX_SIDE: u32 = 32_768;
const MAX_PIXELS: u64 = 89_478_485;
const MAX_DECODE_BYTES: u64 = 512 * 1024 * 1024;

/// Decodes `bytes` fully (every pixel), within the engine's limits. Bytes
/// the store would refuse anyway (no image signature, HEIC) pass: the
/// store says why, in its own words.
pub fn check_decodes(bytes: &[u8]) -> AppResult<()> {
    let Some(format) = store::detect_image(bytes) else { return Ok(()) };
    let (name, format) = match format {
        store::ImageFormat::Png => ("PNG", ImageFormat::Png),
        store::ImageFormat::Jpeg => ("JPEG", ImageFormat::Jpeg),
        store::ImageFormat::WebP => ("WebP", ImageFormat::WebP),
        store::ImageFormat::Gif => ("GIF", ImageFormat::Gif),
    };
    // the decoders are pure Rust over untrusted input: a panic is a bug in
    // them, but still this file's failure and nothing else's
    let decoded = std::panic::catch_unwind(|| decode(bytes, format))
        .unwrap_or_else(|_| Err("corrupt data".into()));
    decoded.map_err(|reason| {
        AppError::new(IMAGE_UNREADABLE, format!("this {name} image cannot be read: {reason}"))
    })
}

fn decode(bytes: &[u8], format: ImageFormat) -> Result<(), String> {
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    reader.limits(limits);
    let decoder = reader.into_decoder().map_err(describe)?;
    let (w, h) = image::ImageDecoder::dimensions(&decoder);
    if w == 0 || h == 0 {
        return Err("it has no pixels (0 wide or high)".into());
    }
    if u64::from(w) * u64::from(h) > MAX_PIXELS {
        return Err(format!(
            "it is {w}×{h} pixels, more than the {} million a picture may have",
            MAX_PIXELS / 1_000_000
        ));
    }
    image::DynamicImage::from_decoder(decoder).map_err(describe)?;
    Ok(())
}

/// The decoder's error in words a person can act on.
fn describe(e: image::ImageError) -> String {
    match e {
        image::ImageError::Limits(_) => "it is too large to decode".into(),
        image::ImageError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the file is cut short (incomplete download or copy?)".into()
        }
        e => format!("the file is damaged ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let image = image::RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([(x * 7) as u8, (y * 13) as u8, 90])
        });
        let mut out = Cursor::new(Vec::new());
        image.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn a_whole_image_passes_and_one_cut_short_is_refused_by_its_code() {
        let whole = png(64, 48);
        check_decodes(&whole).unwrap();
        // the first bytes still say PNG: the signature check lets it through
        let cut = &whole[..whole.len() / 2];
        assert!(store::detect_image(cut).is_some());
        let e = check_decodes(cut).unwrap_err();
        assert_eq!(e.code, IMAGE_UNREADABLE);
        assert!(e.message.starts_with("this PNG image cannot be read"), "{}", e.message);
    }

    #[test]
    fn a_forged_header_is_refused_without_decoding_it() {
        // a PNG header claiming 100000 × 100000 pixels (no data follows)
        let mut forged = png(1, 1);
        forged[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        forged[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        let e = check_decodes(&forged).unwrap_err();
        assert_eq!(e.code, IMAGE_UNREADABLE);
    }

    #[test]
    fn what_the_store_refuses_is_left_to_the_store() {
        check_decodes(b"hello, not an image").unwrap();
        check_decodes(b"").unwrap();
    }
}
