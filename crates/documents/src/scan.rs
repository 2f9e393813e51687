//! Before any page is drawn: every stream's decoded size and every image's pixel count, so a
//! small file that would inflate to gigabytes is refused instead of read.

use flate2::{Decompress, FlushDecompress, Status};
use hayro::hayro_syntax::object::{Name, Object};
use hayro::hayro_syntax::Pdf;

use crate::{DocumentError, Limits};

pub(crate) fn check_streams(pdf: &Pdf, limits: &Limits) -> Result<(), DocumentError> {
    let mut total: u64 = 0;
    for object in pdf.objects() {
        let Object::Stream(stream) = object else {
            continue;
        };
        let dict = stream.dict();
        if dict.get::<Name<'_>>(b"Subtype").is_some_and(|n| n.as_ref() == b"Image") {
            let w = dict.get::<f64>(b"Width").unwrap_or(0.0).max(0.0);
            let h = dict.get::<f64>(b"Height").unwrap_or(0.0).max(0.0);
            if w * h > limits.max_image_pixels as f64 {
                return Err(DocumentError::TooLarge {
                    what: format!(
                        "an image of {w}×{h} pixels (at most {} million)",
                        limits.max_image_pixels / 1_000_000
                    ),
                });
            }
        }
        let raw = stream.raw_data();
        let filters = stream.filters();
        // deflate is the filter that packs the most into the least (1000:1 and more); the others
        // hayro decodes (LZW, run-length, ASCII) are counted by their raw size
        let decoded = if filters
            .first()
            .is_some_and(|f| matches!(f, hayro::hayro_syntax::Filter::FlateDecode))
        {
            inflated_size(&raw, limits.max_stream_bytes + 1)
        } else {
            raw.len() as u64
        };
        if decoded > limits.max_stream_bytes {
            return Err(DocumentError::TooLarge {
                what: format!("a stream inflates past {} MiB", limits.max_stream_bytes >> 20),
            });
        }
        total += decoded;
        if total > limits.max_total_stream_bytes {
            return Err(DocumentError::TooLarge {
                what: format!(
                    "its streams inflate past {} MiB",
                    limits.max_total_stream_bytes >> 20
                ),
            });
        }
    }
    Ok(())
}

/// How many bytes a zlib (or, failing that, raw deflate) stream inflates to, counted up to
/// `cap` in a fixed buffer. A broken stream counts what came out before the break.
fn inflated_size(data: &[u8], cap: u64) -> u64 {
    let zlib = data.len() >= 2 && (u16::from(data[0]) << 8 | u16::from(data[1])) % 31 == 0;
    let mut inflater = Decompress::new(zlib);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let before_in = inflater.total_in();
        let before_out = inflater.total_out();
        let input = &data[(before_in as usize).min(data.len())..];
        let status = inflater.decompress(input, &mut buf, FlushDecompress::None);
        let out = inflater.total_out();
        if out >= cap {
            return out;
        }
        match status {
            Ok(Status::StreamEnd) | Err(_) => return out,
            Ok(_) if out == before_out && inflater.total_in() == before_in => return out,
            Ok(_) => {}
        }
    }
}
