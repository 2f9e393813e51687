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
use std::collections::HashMap;
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
    read_string_value(path, "general.architecture")?.ok_or_else(|| Error::InvalidGguf {
        path: path.to_path_buf(),
        reason: "no general.architecture key".into(),
    })
}

/// The string value of `key`, or `None` if the metadata has no such key.
/// Stops reading at the key.
pub fn read_string_value(path: &Path, key: &str) -> Result<Option<String>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = Reader { inner: BufReader::new(file), wide: true };
    reader
        .find_string(key)
        .map_err(|reason| Error::InvalidGguf { path: path.to_path_buf(), reason })
}

/// One metadata value: scalars as they are, short arrays of numbers (the
/// per-layer values of hybrid models) as their numbers, other arrays by
/// their length only.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Numbers(Vec<f64>),
    Array { len: u64 },
}

/// Arrays of numbers up to this long are kept (a layer count's worth).
const MAX_KEPT_NUMBERS: u64 = 4096;

/// The metadata of a GGUF header (strings longer than a megabyte are
/// skipped). `complete` is false when the bytes ended before the header did:
/// a prefix of a remote file holds the model's shape long before its
/// vocabulary ends.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    pub values: HashMap<String, MetaValue>,
    pub complete: bool,
    /// Weights in all tensors, when the tensor table was read too.
    pub parameters: Option<u64>,
}

impl Metadata {
    /// A non-negative integer value.
    pub fn uint(&self, key: &str) -> Option<u64> {
        match self.values.get(key)? {
            MetaValue::Int(v) => u64::try_from(*v).ok(),
            _ => None,
        }
    }

    pub fn string(&self, key: &str) -> Option<&str> {
        match self.values.get(key)? {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn array_len(&self, key: &str) -> Option<u64> {
        match self.values.get(key)? {
            MetaValue::Array { len } => Some(*len),
            MetaValue::Numbers(v) => Some(v.len() as u64),
            _ => None,
        }
    }
}

/// What the engine's GGUF import reads to make the family's config, so the
/// fit check tells a GGUF's shape as the engine loads it.
impl engine::weights::gguf::GgufMetadata for Metadata {
    fn number(&self, key: &str) -> Option<f64> {
        match self.values.get(key)? {
            MetaValue::Int(v) => Some(*v as f64),
            MetaValue::Float(v) => Some(*v),
            MetaValue::Bool(b) => Some(*b as i64 as f64),
            _ => None,
        }
    }

    fn text(&self, key: &str) -> Option<&str> {
        self.string(key)
    }

    fn numbers(&self, key: &str) -> Option<Vec<f64>> {
        match self.values.get(key)? {
            MetaValue::Numbers(v) => Some(v.clone()),
            _ => None,
        }
    }
}

/// Every metadata value of a GGUF file.
pub fn read_file_metadata(path: &Path) -> Result<Metadata> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    read_metadata(BufReader::new(file))
        .map_err(|reason| Error::InvalidGguf { path: path.to_path_buf(), reason })
}

/// Every metadata value of GGUF bytes (a whole file or its beginning).
pub fn read_metadata(data: impl Read) -> std::result::Result<Metadata, String> {
    let mut reader = Reader { inner: data, wide: true };
    let mut metadata = Metadata::default();
    match reader.read_all(&mut metadata.values) {
        Ok(tensors) => {
            metadata.complete = true;
            // the tensor table follows the metadata; a prefix may end inside it
            metadata.parameters = reader.count_parameters(tensors).ok();
        }
        // a prefix: what was read is good
        Err(reason) if reason == TRUNCATED && !metadata.values.is_empty() => {}
        Err(reason) => return Err(reason),
    }
    Ok(metadata)
}

const TRUNCATED: &str = "file is truncated";

struct Reader<R> {
    inner: R,
    /// Lengths and counts are u64 (versions 2 and 3) rather than u32 (version 1).
    wide: bool,
}

type Parse<T> = std::result::Result<T, String>;

impl<R: Read> Reader<R> {
    /// Magic and version; returns the tensor and key/value counts.
    fn header(&mut self) -> Parse<(u64, u64)> {
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
        let tensor_count = self.count()?;
        Ok((tensor_count, self.count()?))
    }

    /// Reads the key/values; returns the tensor count.
    fn read_all(&mut self, values: &mut HashMap<String, MetaValue>) -> Parse<u64> {
        let (tensor_count, kv_count) = self.header()?;
        for _ in 0..kv_count {
            let key = self.string(MAX_KEY_BYTES)?;
            let value_type = self.u32()?;
            let value = match value_type {
                TYPE_STRING => {
                    let len = self.count()?;
                    if len <= MAX_VALUE_BYTES {
                        let mut buf = vec![0u8; len as usize];
                        self.bytes(&mut buf)?;
                        String::from_utf8(buf).ok().map(MetaValue::Str)
                    } else {
                        self.skip(len)?;
                        None
                    }
                }
                TYPE_ARRAY => {
                    let element_type = self.u32()?;
                    let len = self.count()?;
                    if fixed_size(element_type).is_some() && len <= MAX_KEPT_NUMBERS {
                        let mut numbers = Vec::with_capacity(len as usize);
                        for _ in 0..len {
                            numbers.extend(self.scalar(element_type)?.and_then(|v| match v {
                                MetaValue::Int(i) => Some(i as f64),
                                MetaValue::Float(f) => Some(f),
                                MetaValue::Bool(b) => Some(b as i64 as f64),
                                _ => None,
                            }));
                        }
                        Some(MetaValue::Numbers(numbers))
                    } else {
                        self.skip_elements(element_type, len, 0)?;
                        Some(MetaValue::Array { len })
                    }
                }
                other => self.scalar(other)?,
            };
            if let Some(value) = value {
                values.insert(key, value);
            }
        }
        Ok(tensor_count)
    }

    /// The tensor table (name, dimensions, type, offset each): the elements
    /// of all tensors.
    fn count_parameters(&mut self, tensors: u64) -> Parse<u64> {
        let mut total: u64 = 0;
        for _ in 0..tensors {
            let name_len = self.count()?;
            self.skip(name_len)?;
            let dims = self.u32()?;
            if dims > 8 {
                return Err(format!("a tensor with {dims} dimensions"));
            }
            let mut elements: u64 = 1;
            for _ in 0..dims {
                elements = elements.checked_mul(self.count()?).ok_or("tensor size overflows")?;
            }
            let _type_and_offset = self.fixed::<12>()?;
            total = total.checked_add(elements).ok_or("tensor size overflows")?;
        }
        Ok(total)
    }

    fn find_string(&mut self, wanted: &str) -> Parse<Option<String>> {
        let (_, kv_count) = self.header()?;
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

    /// A number or boolean of `value_type` (`None`: a u64 beyond i64).
    fn scalar(&mut self, value_type: u32) -> Parse<Option<MetaValue>> {
        Ok(match value_type {
            0 => Some(MetaValue::Int(self.fixed::<1>()?[0] as i64)),
            1 => Some(MetaValue::Int(self.fixed::<1>()?[0] as i8 as i64)),
            2 => Some(MetaValue::Int(u16::from_le_bytes(self.fixed()?) as i64)),
            3 => Some(MetaValue::Int(i16::from_le_bytes(self.fixed()?) as i64)),
            4 => Some(MetaValue::Int(self.u32()? as i64)),
            5 => Some(MetaValue::Int(i32::from_le_bytes(self.fixed()?) as i64)),
            6 => Some(MetaValue::Float(f32::from_le_bytes(self.fixed()?) as f64)),
            7 => Some(MetaValue::Bool(self.fixed::<1>()?[0] != 0)),
            10 => i64::try_from(u64::from_le_bytes(self.fixed()?)).ok().map(MetaValue::Int),
            11 => Some(MetaValue::Int(i64::from_le_bytes(self.fixed()?))),
            12 => Some(MetaValue::Float(f64::from_le_bytes(self.fixed()?))),
            other => return Err(format!("unknown value type {other}")),
        })
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
                self.skip_elements(element_type, count, depth)
            }
            other => match fixed_size(other) {
                Some(size) => self.skip(size),
                None => Err(format!("unknown value type {other}")),
            },
        }
    }

    fn skip_elements(&mut self, element_type: u32, count: u64, depth: u32) -> Parse<()> {
        match fixed_size(element_type) {
            Some(size) => {
                let total = count.checked_mul(size).ok_or("array size overflows")?;
                self.skip(total)
            }
            None => (0..count).try_for_each(|_| self.skip_value(element_type, depth + 1)),
        }
    }

    fn fixed<const N: usize>(&mut self) -> Parse<[u8; N]> {
        let mut b = [0u8; N];
        self.bytes(&mut b)?;
        Ok(b)
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
        let skipped = std::io::copy(&mut (&mut self.inner).take(n), &mut std::io::sink())
            .map_err(|e| e.to_string())?;
        if skipped < n {
            return Err(TRUNCATED.into());
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
            std::io::ErrorKind::UnexpectedEof => TRUNCATED.to_string(),
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
