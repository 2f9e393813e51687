//! The GGUF file format (llama.cpp's): a header, typed metadata key/values,
//! tensor descriptions, then the aligned tensor data. We read it ourselves
//! because MLX's loader maps only Q4_0/Q4_1/Q8_0 and rejects a whole file
//! with any other tensor type, while the files people download (`Q4_K_M`,
//! `Q6_K`, ...) mix K-quants with Q5_0 and Q8_0.
//!
//! Every count and size read from the file is bounded before it allocates,
//! so a corrupt or hostile file fails with a clear error.
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::blocks::GgmlType;
use crate::error::{Error, Result};

const MAGIC: &[u8; 4] = b"GGUF";
/// Limits far above any real file, below what would exhaust memory.
const MAX_STRING: u64 = 64 << 20;
const MAX_ARRAY: u64 = 16 << 20;
const MAX_COUNT: u64 = 1 << 20;
const MAX_DIMS: u32 = 8;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            MetaValue::Int(i) => Some(*i as f64),
            MetaValue::Float(f) => Some(*f),
            MetaValue::Bool(b) => Some(*b as i64 as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One tensor's description.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// The shape in row-major order (GGUF stores the fastest axis first; this is reversed).
    pub shape: Vec<usize>,
    pub kind: GgmlType,
    /// Offset of the data from the start of the data section.
    offset: u64,
}

impl TensorInfo {
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

pub struct GgufFile {
    path: PathBuf,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: Vec<TensorInfo>,
    data_start: u64,
    file_len: u64,
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let corrupt = |reason: String| Error::CorruptWeights { path: path.to_path_buf(), reason };
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut r = Reader { inner: BufReader::new(file), path };
        let mut magic = [0u8; 4];
        r.bytes(&mut magic)?;
        if &magic != MAGIC {
            return Err(corrupt("not a GGUF file (bad magic)".into()));
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(corrupt(format!("GGUF version {version} is not supported (2 and 3 are)")));
        }
        let tensor_count = r.count()?;
        let kv_count = r.count()?;
        let mut metadata = BTreeMap::new();
        for _ in 0..kv_count {
            let key = r.string()?;
            let kind = r.u32()?;
            let value = r.value(kind)?;
            metadata.insert(key, value);
        }
        let mut tensors = Vec::with_capacity(tensor_count as usize);
        for _ in 0..tensor_count {
            let name = r.string()?;
            let dims = r.u32()?;
            if dims == 0 || dims > MAX_DIMS {
                return Err(corrupt(format!("tensor {name}: {dims} dimensions")));
            }
            let mut shape = Vec::with_capacity(dims as usize);
            for _ in 0..dims {
                let d = r.u64()?;
                if d == 0 || d > 1 << 40 {
                    return Err(corrupt(format!("tensor {name}: dimension {d}")));
                }
                shape.push(d as usize);
            }
            shape.reverse();
            let code = r.u32()?;
            let kind = GgmlType::from_code(code)
                .ok_or_else(|| corrupt(format!("tensor {name}: unknown ggml type {code}")))?;
            let offset = r.u64()?;
            tensors.push(TensorInfo { name, shape, kind, offset });
        }
        let alignment = match metadata.get("general.alignment").and_then(MetaValue::as_f64) {
            Some(a) if a >= 1.0 && (a as u64).is_power_of_two() => a as u64,
            Some(a) => return Err(corrupt(format!("general.alignment {a} is not a power of two"))),
            None => 32,
        };
        let header_end = r.inner.stream_position().map_err(|e| Error::io(path, e))?;
        let data_start = header_end.div_ceil(alignment) * alignment;
        let gguf = Self { path: path.to_path_buf(), metadata, tensors, data_start, file_len };
        for t in &gguf.tensors {
            let end = gguf.data_start + t.offset + gguf.byte_len(t)? as u64;
            if end > file_len {
                return Err(corrupt(format!(
                    "tensor {} ends at byte {end} but the file has {file_len} bytes (truncated download?)",
                    t.name
                )));
            }
        }
        Ok(gguf)
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    /// Bytes a tensor's data takes.
    pub fn byte_len(&self, t: &TensorInfo) -> Result<usize> {
        t.kind.byte_len(t.elements()).ok_or_else(|| Error::CorruptWeights {
            path: self.path.clone(),
            reason: format!(
                "tensor {}: {} values do not fill whole {} blocks of {}",
                t.name,
                t.elements(),
                t.kind.name(),
                t.kind.block_values()
            ),
        })
    }

    /// A tensor's raw bytes.
    pub fn read(&self, t: &TensorInfo) -> Result<Vec<u8>> {
        let len = self.byte_len(t)?;
        let start = self.data_start + t.offset;
        debug_assert!(start + len as u64 <= self.file_len, "checked at open");
        let mut file = File::open(&self.path).map_err(|e| Error::io(&self.path, e))?;
        file.seek(SeekFrom::Start(start)).map_err(|e| Error::io(&self.path, e))?;
        let mut buf = vec![0u8; len];
        file.read_exact(&mut buf).map_err(|e| Error::io(&self.path, e))?;
        Ok(buf)
    }
}

struct Reader<'a> {
    inner: BufReader<File>,
    path: &'a Path,
}

impl Reader<'_> {
    fn corrupt(&self, reason: String) -> Error {
        Error::CorruptWeights { path: self.path.to_path_buf(), reason }
    }

    fn bytes(&mut self, buf: &mut [u8]) -> Result<()> {
        self.inner.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                self.corrupt("the header ends early (truncated file?)".into())
            }
            _ => Error::io(self.path, e),
        })
    }

    fn u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn count(&mut self) -> Result<u64> {
        let n = self.u64()?;
        if n > MAX_COUNT {
            return Err(self.corrupt(format!("a count of {n} in the header")));
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<String> {
        let len = self.u64()?;
        if len > MAX_STRING {
            return Err(self.corrupt(format!("a string of {len} bytes in the header")));
        }
        let mut buf = vec![0u8; len as usize];
        self.bytes(&mut buf)?;
        // Vocabularies hold byte tokens that are not valid UTF-8 on their own.
        Ok(String::from_utf8(buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    fn value(&mut self, kind: u32) -> Result<MetaValue> {
        let mut b8 = [0u8; 8];
        Ok(match kind {
            0 | 1 | 7 => {
                self.bytes(&mut b8[..1])?;
                match kind {
                    0 => MetaValue::Int(b8[0] as i64),
                    1 => MetaValue::Int(b8[0] as i8 as i64),
                    _ => MetaValue::Bool(b8[0] != 0),
                }
            }
            2 | 3 => {
                self.bytes(&mut b8[..2])?;
                let v = [b8[0], b8[1]];
                MetaValue::Int(if kind == 2 {
                    u16::from_le_bytes(v) as i64
                } else {
                    i16::from_le_bytes(v) as i64
                })
            }
            4..=6 => {
                self.bytes(&mut b8[..4])?;
                let v = [b8[0], b8[1], b8[2], b8[3]];
                match kind {
                    4 => MetaValue::Int(u32::from_le_bytes(v) as i64),
                    5 => MetaValue::Int(i32::from_le_bytes(v) as i64),
                    _ => MetaValue::Float(f32::from_le_bytes(v) as f64),
                }
            }
            8 => MetaValue::String(self.string()?),
            9 => {
                let item = self.u32()?;
                let len = self.u64()?;
                if len > MAX_ARRAY {
                    return Err(self.corrupt(format!("a metadata array of {len} items")));
                }
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(self.value(item)?);
                }
                MetaValue::Array(items)
            }
            10..=12 => {
                self.bytes(&mut b8)?;
                match kind {
                    10 => MetaValue::Int(u64::from_le_bytes(b8) as i64),
                    11 => MetaValue::Int(i64::from_le_bytes(b8)),
                    _ => MetaValue::Float(f64::from_le_bytes(b8)),
                }
            }
            other => return Err(self.corrupt(format!("unknown metadata value type {other}"))),
        })
    }
}
