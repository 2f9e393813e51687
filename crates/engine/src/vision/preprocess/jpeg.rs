//! JPEG pixels as the reference decodes them: Pillow reads JPEGs with
//! libjpeg-turbo (accurate integer IDCT, "fancy" chroma upsampling, its
//! fixed-point YCbCr→RGB tables), and so does this, through the `mozjpeg`
//! crate (libjpeg-turbo's decoder, built from source: mozjpeg changes only
//! the encoder). Measured against Pillow 13 on baseline and progressive
//! JPEGs, 4:2:0, 4:2:2, 4:4:4, grayscale, odd sizes: identical samples. The
//! `image` crate's zune-jpeg rounds its IDCT, upsampling and colour
//! conversion otherwise: up to ±4 on a fifth of the samples of a 4:2:0
//! photo, enough for Gemma 4 to answer a phone photo differently from
//! mlx-vlm (issue 29).
//!
//! The header (size, limits, EXIF orientation) is still read by the `image`
//! crate before this runs ([`super::decode`]); CMYK and YCCK JPEGs, which
//! libjpeg does not turn into RGB (Pillow converts them itself), stay with
//! zune-jpeg.
use std::panic::{self, AssertUnwindSafe};

use mozjpeg::{ColorSpace, Decompress};

/// The most scans a progressive JPEG may have. libjpeg-turbo has no such
/// bound, and each scan walks the whole image again: a small file of
/// thousands of scans would hold the decoder for minutes. zune-jpeg's own
/// bound, so every file decoded before is decoded still.
pub const MAX_SCANS: usize = 100;

/// The pixels of a JPEG as 8-bit RGB, `width × height`; `Ok(None)` when its
/// colour space is not one libjpeg converts to RGB (CMYK, YCCK). Every
/// failure is a sentence for the user.
pub(crate) fn decode_rgb(
    bytes: &[u8],
    width: usize,
    height: usize,
) -> Result<Option<Vec<u8>>, String> {
    let scans = scan_count(bytes);
    if scans > MAX_SCANS {
        return Err(format!(
            "the JPEG has {scans} scans, more than the {MAX_SCANS} a decoder accepts"
        ));
    }
    // libjpeg reports a fatal error by unwinding with its message (the
    // crate's error manager; no panic hook runs): caught here, by name.
    let decoded = panic::catch_unwind(AssertUnwindSafe(|| -> std::io::Result<Option<Vec<u8>>> {
        let decompress = Decompress::new_mem(bytes)?;
        if !matches!(
            decompress.color_space(),
            ColorSpace::JCS_YCbCr | ColorSpace::JCS_GRAYSCALE | ColorSpace::JCS_RGB
        ) {
            return Ok(None);
        }
        let mut started = decompress.rgb()?;
        if (started.width(), started.height()) != (width, height) {
            return Err(std::io::Error::other(format!(
                "libjpeg reads {}×{} pixels where the header says {width}×{height}",
                started.width(),
                started.height()
            )));
        }
        let rgb = started.read_scanlines::<u8>()?;
        started.finish()?;
        Ok(Some(rgb))
    }));
    match decoded {
        Ok(Ok(Some(rgb))) if rgb.len() == width * height * 3 => Ok(Some(rgb)),
        Ok(Ok(Some(_))) => Err("the JPEG file is truncated".into()),
        Ok(Ok(None)) => Ok(None),
        Ok(Err(e)) => Err(format!("the JPEG file is corrupt or truncated: {e}")),
        Err(payload) => {
            let why = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("the decoder stopped");
            Err(format!("the JPEG file is corrupt: {why}"))
        }
    }
}

/// How many scans (SOS segments) the file has, walking its segments the
/// way a decoder does: each marker segment is skipped by its length (so
/// an EXIF thumbnail's own scans do not count), entropy-coded data byte
/// by byte up to the next marker (a 0xFF there is followed by 0x00 or a
/// restart marker).
fn scan_count(bytes: &[u8]) -> usize {
    let (mut at, mut scans) = (2, 0);
    while at + 1 < bytes.len() {
        if bytes[at] != 0xFF {
            at += 1;
            continue;
        }
        match bytes[at + 1] {
            // fill byte before a marker
            0xFF => at += 1,
            // stuffed zero, TEM, restart markers, SOI: no length follows
            0x00 | 0x01 | 0xD0..=0xD8 => at += 2,
            0xD9 => break,
            marker => {
                let Some(len) = bytes.get(at + 2..at + 4) else { break };
                if marker == 0xDA {
                    scans += 1;
                }
                at += 2 + u16::from_be_bytes([len[0], len[1]]) as usize;
            }
        }
    }
    scans
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JPEG's segments: SOI, then each (marker, payload), then EOI.
    fn segments(parts: &[(u8, &[u8])]) -> Vec<u8> {
        let mut out = vec![0xFF, 0xD8];
        for (marker, payload) in parts {
            out.extend([0xFF, *marker]);
            out.extend(((payload.len() + 2) as u16).to_be_bytes());
            out.extend(*payload);
        }
        out.extend([0xFF, 0xD9]);
        out
    }

    #[test]
    fn scans_are_counted_by_segment_not_by_byte_pattern() {
        // an APP1 holding what looks like an SOS marker does not count
        let mut jpeg = segments(&[(0xE1, &[0xFF, 0xDA, 0x00, 0x02]), (0xDA, &[0; 10])]);
        // entropy-coded data with a stuffed 0xFF and a restart marker
        let eoi = jpeg.len() - 2;
        jpeg.splice(eoi..eoi, [0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56]);
        assert_eq!(scan_count(&jpeg), 1);
        let many: Vec<(u8, &[u8])> = (0..150).map(|_| (0xDA, &[0u8; 8][..])).collect();
        assert_eq!(scan_count(&segments(&many)), 150);
        // a cut length field ends the walk instead of reading past the end
        assert_eq!(scan_count(&[0xFF, 0xD8, 0xFF, 0xDA, 0x00]), 0);
    }

    #[test]
    fn too_many_scans_and_garbage_are_refused_by_name() {
        let many: Vec<(u8, &[u8])> = (0..=MAX_SCANS).map(|_| (0xDA, &[0u8; 8][..])).collect();
        let e = decode_rgb(&segments(&many), 1, 1).unwrap_err();
        assert!(e.contains("101 scans") && e.contains("100"), "{e}");
        // no frame header: libjpeg's own words, caught
        let e = decode_rgb(&segments(&[(0xDB, &[0; 65])]), 1, 1).unwrap_err();
        assert!(e.starts_with("the JPEG file is corrupt"), "{e}");
    }
}
