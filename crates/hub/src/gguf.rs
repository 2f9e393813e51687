//! Just enough of the GGUF format to name a file's architecture without
//! loading it: the header (magic, version, tensor count, key/value count) and
//! the typed key/value pairs, read in order until the wanted key. Values we
//! do not want are skipped by seeking, so a 100k-entry vocabulary array costs
//! only its string lengths.
//!
//! Layout (little-endian): "GGUF", u32 version, then tensor count and kv count
//! (u64; u32 in version 1); each kv is a string key, a u32 value type and the
//! value. Strings are a length (u64; u32 in v1) and UTF-8 bytes; arrays are an
//! element type, a count and the elements.
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use crate::error::{Error, Result};

const MAGIC: &[u8; 4] = b"GGUF";
/// Keys are short dotted names; anything longer means a corrupt file.
const MAX_KEY_BYTES: u64 = 64 * 1024;
/// A string value we keep (not one we skip).
const MAX_VALUE_BYTES: u64 = 1024 * 1024;
/// Arrays of arrays exist in principle; deeper nesting means corruption.
const MAX_ARRAY_DEPTH: u32 = 3;

const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;

/// `general.architecture` of a GGUF file ("llama", "qwen2", …).
pub fn read_architecture(path: &Path) -> Result<String> {
    read_string_value(path, "general.architecture")?
        .ok_or_else(|| Error::InvalidGguf { path: path.to_path_buf(), reason: "no general.architecture key".into() })
}

/// The string value of `key`, or `None` if the metadata has no such key.
/// Stops reading at the key.
pub fn read_string_value(path: &Path, key: &str) -> Result<Option<String>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = Reader { inner: BufReader::new(file), wide: true };
    reader.find_string(key).map_err(|reason| Error::InvalidGguf { path: path.to_path_buf(), reason })
}

struct Reader<R> {
    inner: R,
    /// Lengths and counts are u64 (versions 2 and 3) rather than u32 (version 1).
    wide: bool,
}

type Parse<T> = std::result::Result<T, String>;

impl<R: Read> Reader<R> {
    fn find_string(&mut self, wanted: &str) -> Parse<Option<String>> {
        let mut magic = [0u8; 4];
        self.bytes(&mut magic)?;
        if &magic != MAGIC {
            return Err(format!("not a GGUF file (magic {magic:02x?})"));
        }
        let version = self.u32()?;
        self.wide = match version {
            1 => false,
            2 | 3 => true,
            // a big-endian file reads as a huge version number
            v => return Err(format!("unsupported GGUF version {v}")),
        };
        let _tensor_count = self.count()?;
        let kv_count = self.count()?;
        for _ in 0..kv_count {
            let key = self.string(MAX_KEY_BYTES)?;
            let value_type = self.u32()?;
            if key == wanted {
                if value_type != TYPE_STRING {
                    return Err(format!("{wanted} has value type {value_type}, expected a string"));
                }
                return self.string(MAX_VALUE_BYTES).map(Some);
            }
            self.skip_value(value_type, 0)?;
        }
        Ok(None)
    }

    fn skip_value(&mut self, value_type: u32, depth: u32) -> Parse<()> {
        match value_type {
            TYPE_STRING => {
                let len = self.count()?;
                self.skip(len)
            }
            TYPE_ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err("arrays nested too deeply".into());
                }
                let element_type = self.u32()?;
                let count = self.count()?;
                match fixed_size(element_type) {
                    Some(size) => {
                        let total = count.checked_mul(size).ok_or("array size overflows")?;
                        self.skip(total)
                    }
                    None => (0..count).try_for_each(|_| self.skip_value(element_type, depth + 1)),
                }
            }
            other => match fixed_size(other) {
                Some(size) => self.skip(size),
                None => Err(format!("unknown value type {other}")),
            },
        }
    }

    fn string(&mut self, max: u64) -> Parse<String> {
        let len = self.count()?;
        if len > max {
            return Err(format!("string of {len} bytes is implausibly long"));
        }
        let mut buf = vec![0u8; len as usize];
        self.bytes(&mut buf)?;
        String::from_utf8(buf).map_err(|_| "string is not UTF-8".to_string())
    }

    fn skip(&mut self, n: u64) -> Parse<()> {
        let skipped = std::io::copy(&mut (&mut self.inner).take(n), &mut std::io::sink()).map_err(|e| e.to_string())?;
        if skipped < n {
            return Err("file is truncated".into());
        }
        Ok(())
    }

    fn count(&mut self) -> Parse<u64> {
        if self.wide {
            let mut b = [0u8; 8];
            self.bytes(&mut b)?;
            Ok(u64::from_le_bytes(b))
        } else {
            self.u32().map(u64::from)
        }
    }

    fn u32(&mut self) -> Parse<u32> {
        let mut b = [0u8; 4];
        self.bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn bytes(&mut self, buf: &mut [u8]) -> Parse<()> {
        self.inner.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "file is truncated".to_string(),
            _ => e.to_string(),
        })
    }
}

/// Byte size of a scalar value type; `None` for strings, arrays and unknown types.
fn fixed_size(value_type: u32) -> Option<u64> {
    Some(match value_type {
        0 | 1 | 7 => 1, // u8, i8, bool
        2 | 3 => 2,     // u16, i16
        4..=6 => 4,     // u32, i32, f32
        10..=12 => 8,   // u64, i64, f64
        _ => return None,
    })
}
