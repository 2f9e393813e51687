//! One kept prefix as a file: a safetensors file whose tensors are a one-row
//! cache's arrays ([`RowContents::named_arrays`]) and whose metadata says
//! what they are — the format version, the model's fingerprint, the prefix
//! key, the token count, the attention groups' windows and columns — plus a
//! CRC-32 of all of it (key, layout, every tensor's name, type, shape and
//! data), so a file damaged on disk is refused, never trusted. What the
//! arrays must look like for the loaded model is checked apart
//! ([`super::signature`]).
//!
//! [`encode`] copies the arrays' bytes out of MLX on the engine thread;
//! [`Encoded::write`] runs on the writer thread and touches no MLX object.
//! [`decode`] parses and checks a file and rebuilds the arrays.
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use mlx_rs::{Array, Dtype};
use safetensors::{tensor::View, SafeTensors};
use serde::{Deserialize, Serialize};

use crate::cache::row_contents::{GroupContents, RowContents};
use crate::cache::KeyToken;
use crate::error::{Error, Result};

/// Bumped whenever the layout of these files changes: older files are then
/// stale and deleted.
pub const FORMAT: &str = "vlm-prefix-cache/2";

/// What the metadata says about the arrays (besides the format and checks).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Layout {
    tokens: i32,
    /// Per attention group: its window, columns, and which members ran.
    groups: Vec<(Option<i32>, i32, Vec<bool>)>,
    /// Per recurrent layer: its state arrays (0: never ran).
    recurrent: Vec<usize>,
}

/// What a file's header says, read without its data (to index the folder).
pub struct Header {
    pub format: String,
    pub model: String,
    pub key: Vec<KeyToken>,
}

/// Why a file cannot be used (logged; the caller deletes the file).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Rejected(pub String);

/// A tensor's bytes, owned (so the writer thread needs no MLX).
struct OwnedTensor {
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &OwnedTensor {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// A prefix ready to be written.
pub struct Encoded {
    tensors: Vec<(String, OwnedTensor)>,
    metadata: HashMap<String, String>,
}

impl Encoded {
    /// Bytes the file will take (about: the header is small).
    pub fn data_bytes(&self) -> u64 {
        self.tensors.iter().map(|(_, t)| t.bytes.len() as u64).sum()
    }

    /// Writes the file at `path` through a temporary file renamed into place,
    /// so a crash mid-write never leaves a partial file under a real name.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        let views = self.tensors.iter().map(|(name, t)| (name.as_str(), t));
        safetensors::tensor::serialize_to_file(views, Some(self.metadata.clone()), &tmp)
            .map_err(std::io::Error::other)?;
        std::fs::rename(&tmp, path)
    }
}

fn to_file_dtype(d: Dtype) -> Option<safetensors::Dtype> {
    Some(match d {
        Dtype::Float32 => safetensors::Dtype::F32,
        Dtype::Float16 => safetensors::Dtype::F16,
        Dtype::Bfloat16 => safetensors::Dtype::BF16,
        _ => return None,
    })
}

fn from_file_dtype(d: safetensors::Dtype) -> Option<Dtype> {
    Some(match d {
        safetensors::Dtype::F32 => Dtype::Float32,
        safetensors::Dtype::F16 => Dtype::Float16,
        safetensors::Dtype::BF16 => Dtype::Bfloat16,
        _ => return None,
    })
}

/// An evaluated float array's bytes, copied.
fn bytes_of(a: &Array) -> Result<Vec<u8>> {
    fn raw<T: mlx_rs::ArrayElement>(a: &Array) -> Result<Vec<u8>> {
        let values = a.try_as_slice::<T>().map_err(|e| Error::Mlx(e.to_string()))?;
        // SAFETY: plain numbers read as the bytes they are made of.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        Ok(bytes.to_vec())
    }
    let a = a.contiguous()?;
    match a.dtype() {
        Dtype::Float32 => raw::<f32>(&a),
        Dtype::Float16 => raw::<half::f16>(&a),
        Dtype::Bfloat16 => raw::<half::bf16>(&a),
        d => Err(Error::Mlx(format!("a cache array of type {d:?} cannot be saved"))),
    }
}

/// The checksum of a file: its key and layout as written in the metadata,
/// then each tensor (sorted by name) as name, type, shape and data. An edit
/// of the header's shapes fails it as surely as a flipped data bit.
fn crc_of<'a>(
    key: &str,
    layout: &str,
    tensors: impl Iterator<Item = (&'a str, safetensors::Dtype, &'a [usize], &'a [u8])>,
) -> String {
    let mut crc = crc32fast::Hasher::new();
    for text in [key, layout] {
        crc.update(&(text.len() as u64).to_le_bytes());
        crc.update(text.as_bytes());
    }
    for (name, dtype, shape, data) in tensors {
        crc.update(&(name.len() as u64).to_le_bytes());
        crc.update(name.as_bytes());
        crc.update(format!("{dtype:?}").as_bytes());
        crc.update(&(shape.len() as u64).to_le_bytes());
        shape.iter().for_each(|&d| crc.update(&(d as u64).to_le_bytes()));
        crc.update(data);
    }
    format!("{:08x}", crc.finalize())
}

fn key_text(key: &[KeyToken]) -> String {
    key.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

fn parse_key(text: &str) -> Option<Vec<KeyToken>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',').map(|t| t.parse().ok()).collect()
}

/// Copies a one-row cache's contents out of MLX (engine thread).
pub fn encode(model: &str, key: &[KeyToken], contents: &RowContents) -> Result<Encoded> {
    let mut tensors = Vec::new();
    for (name, a) in contents.named_arrays() {
        let dtype = to_file_dtype(a.dtype())
            .ok_or_else(|| Error::Mlx(format!("{name}: type {:?}", a.dtype())))?;
        let shape = a.shape().iter().map(|&d| d as usize).collect();
        tensors.push((name, OwnedTensor { dtype, shape, bytes: bytes_of(a)? }));
    }
    // The writer sorts tensors by dtype then name; the check is over names.
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let layout = Layout {
        tokens: contents.tokens,
        groups: contents
            .groups
            .iter()
            .map(|g| (g.window, g.columns, g.layers.iter().map(Option::is_some).collect()))
            .collect(),
        recurrent: contents.recurrent.iter().map(|s| s.as_ref().map_or(0, Vec::len)).collect(),
    };
    let (key, layout) = (key_text(key), serde_json::to_string(&layout).expect("plain data"));
    let crc = crc_of(
        &key,
        &layout,
        tensors.iter().map(|(n, t)| (n.as_str(), t.dtype, t.shape.as_slice(), t.bytes.as_slice())),
    );
    let metadata = HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("model".to_string(), model.to_string()),
        ("key".to_string(), key),
        ("layout".to_string(), layout),
        ("crc32".to_string(), crc),
    ]);
    Ok(Encoded { tensors, metadata })
}

/// The header of the file at `path`, reading only the header.
pub fn read_header(path: &Path) -> std::result::Result<Header, Rejected> {
    let bad = |why: String| Rejected(format!("{}: {why}", path.display()));
    let mut file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut n = [0u8; 8];
    file.read_exact(&mut n).map_err(|_| bad("shorter than a header".into()))?;
    let n = u64::from_le_bytes(n);
    if n > 100 << 20 {
        return Err(bad(format!("a {n}-byte header")));
    }
    let mut header = vec![0u8; n as usize];
    file.read_exact(&mut header).map_err(|_| bad("the header is cut".into()))?;
    let header: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| bad(e.to_string()))?;
    let meta = header.get("__metadata__").ok_or_else(|| bad("no metadata".into()))?;
    let field = |k: &str| {
        meta.get(k)
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .ok_or_else(|| bad(format!("no {k}")))
    };
    let key = parse_key(&field("key")?).ok_or_else(|| bad("an unreadable key".into()))?;
    Ok(Header { format: field("format")?, model: field("model")?, key })
}

/// Reads, checks and rebuilds the prefix in `bytes` (a whole file), saved
/// for `model`. Any mismatch is an error: the caller deletes the file.
pub fn decode(
    bytes: &[u8],
    model: &str,
) -> std::result::Result<(Vec<KeyToken>, RowContents), Rejected> {
    let bad = |why: String| Rejected(format!("it {why}"));
    let file = SafeTensors::deserialize(bytes).map_err(|e| bad(format!("is damaged: {e}")))?;
    let (_, header) =
        SafeTensors::read_metadata(bytes).map_err(|e| bad(format!("is damaged: {e}")))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let field = |k: &str| meta.get(k).cloned().ok_or_else(|| bad(format!("has no {k}")));
    let format = field("format")?;
    if format != FORMAT {
        return Err(bad(format!("is of format {format}, not {FORMAT}")));
    }
    if field("model")? != model {
        return Err(bad("belongs to another model".into()));
    }
    let (key_field, layout_field) = (field("key")?, field("layout")?);
    let mut names = file.names();
    names.sort();
    let tensors: Vec<_> = names.iter().map(|n| (*n, file.tensor(n).expect("listed"))).collect();
    let crc = crc_of(
        &key_field,
        &layout_field,
        tensors.iter().map(|(n, t)| (*n, t.dtype(), t.shape(), t.data())),
    );
    if crc != field("crc32")? {
        return Err(bad("fails its checksum (damaged or edited on disk)".into()));
    }
    let key = parse_key(&key_field).ok_or_else(|| bad("has an unreadable key".into()))?;
    let layout: Layout =
        serde_json::from_str(&layout_field).map_err(|e| bad(format!("has a bad layout: {e}")))?;
    if key.len() != layout.tokens as usize {
        return Err(bad(format!("keys {} tokens but holds {}", key.len(), layout.tokens)));
    }
    let take = |name: String| -> std::result::Result<Array, Rejected> {
        let t = file.tensor(&name).map_err(|_| bad(format!("lacks {name}")))?;
        let dtype = from_file_dtype(t.dtype())
            .ok_or_else(|| bad(format!("holds {name} as {:?}", t.dtype())))?;
        let shape: Vec<i32> = t.shape().iter().map(|&d| d as i32).collect();
        // SAFETY: the reader checked that the data holds exactly `shape` of `dtype`;
        // MLX copies it.
        Ok(unsafe { Array::from_raw_data(t.data().as_ptr().cast(), &shape, dtype) })
    };
    let mut groups = Vec::new();
    for (g, (window, columns, ran)) in layout.groups.iter().enumerate() {
        let mut layers = Vec::new();
        for (m, &ran) in ran.iter().enumerate() {
            layers.push(if ran {
                Some((
                    take(format!("group{g}.layer{m}.keys"))?,
                    take(format!("group{g}.layer{m}.values"))?,
                ))
            } else {
                None
            });
        }
        groups.push(GroupContents { window: *window, columns: *columns, layers });
    }
    let mut recurrent = Vec::new();
    for (r, &states) in layout.recurrent.iter().enumerate() {
        recurrent.push(if states == 0 {
            None
        } else {
            Some(
                (0..states)
                    .map(|i| take(format!("recurrent{r}.state{i}")))
                    .collect::<std::result::Result<Vec<_>, _>>()?,
            )
        });
    }
    let contents = RowContents { tokens: layout.tokens, groups, recurrent };
    if contents.named_arrays().len() != names.len() {
        return Err(bad("holds arrays its layout does not name".into()));
    }
    Ok((key, contents))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arange(shape: &[i32], dtype: Dtype) -> Array {
        let n: i32 = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 5.0).collect();
        Array::from_slice(&values, shape).as_dtype(dtype).unwrap()
    }

    fn same(a: &Array, b: &Array) -> bool {
        a.dtype() == b.dtype() && a.shape() == b.shape() && a.eq_values(b).unwrap()
    }

    /// Every array comes back bit for bit, with its type, shape and place.
    #[test]
    fn a_row_round_trips_through_a_file() {
        let keys = arange(&[1, 2, 7, 8], Dtype::Bfloat16);
        let values = arange(&[1, 2, 7, 8], Dtype::Float16);
        let state = arange(&[1, 3, 4], Dtype::Float32);
        let contents = RowContents {
            tokens: 7,
            groups: vec![GroupContents {
                window: None,
                columns: 7,
                layers: vec![Some((keys.clone(), values.clone())), None],
            }],
            recurrent: vec![Some(vec![state.clone()]), None],
        };
        let key: Vec<KeyToken> = vec![5, 6, 7, 8, 9, 10, 1 << 63 | 12];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("row.safetensors");
        encode("model-a", &key, &contents).unwrap().write(&path).unwrap();

        let header = read_header(&path).unwrap();
        assert_eq!(
            (header.format.as_str(), header.model.as_str(), &header.key),
            (FORMAT, "model-a", &key)
        );
        let bytes = std::fs::read(&path).unwrap();
        let (read_key, back) = decode(&bytes, "model-a").unwrap();
        assert_eq!(read_key, key);
        assert_eq!(back.tokens, 7);
        let (k, v) = back.groups[0].layers[0].as_ref().unwrap();
        assert!(same(k, &keys) && same(v, &values));
        assert!(back.groups[0].layers[1].is_none());
        assert!(same(&back.recurrent[0].as_ref().unwrap()[0], &state));
        assert!(back.recurrent[1].is_none());
        let other = decode(&bytes, "model-b").err().expect("another model's file is refused");
        assert!(other.0.contains("another model"), "{}", other.0);
    }

    /// A header edited to other shapes of the same size (the data still
    /// fits them, so safetensors accepts it) fails the checksum.
    #[test]
    fn an_edited_header_fails_the_checksum() {
        let keys = arange(&[1, 2, 7, 8], Dtype::Float32);
        let contents = RowContents {
            tokens: 7,
            groups: vec![GroupContents {
                window: None,
                columns: 7,
                layers: vec![Some((keys.clone(), keys))],
            }],
            recurrent: vec![],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("row.safetensors");
        encode("m", &[1, 2, 3, 4, 5, 6, 7], &contents).unwrap().write(&path).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header = String::from_utf8(bytes[8..8 + n].to_vec()).unwrap();
        assert!(header.contains("[1,2,7,8]"), "{header}");
        let edited = header.replacen("[1,2,7,8]", "[1,8,7,2]", 1);
        bytes[8..8 + n].copy_from_slice(edited.as_bytes());
        let rejected = decode(&bytes, "m").err().expect("an edited header is refused");
        assert!(rejected.0.contains("checksum"), "{}", rejected.0);
    }
}
