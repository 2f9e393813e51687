//! A minimal GGUF v3 writer, for tests: metadata and tensors of raw bytes, as
//! llama.cpp lays them out (tensor dimensions fastest-first, data aligned to
//! 32 bytes).
use std::path::Path;

use crate::error::{Error, Result};

/// A metadata value.
pub enum GgufValue {
    Str(String),
    U32(u32),
    F32(f32),
    Bool(bool),
    Strings(Vec<String>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
}

/// One tensor: its name, row-major shape, ggml type code and data.
pub struct GgufTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub kind: u32,
    pub data: Vec<u8>,
}

impl GgufTensor {
    /// A float32 tensor.
    pub fn f32(name: impl Into<String>, shape: &[usize], values: &[f32]) -> Self {
        Self {
            name: name.into(),
            shape: shape.to_vec(),
            kind: 0,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

const ALIGN: usize = 32;

pub fn write_gguf(
    path: &Path,
    metadata: &[(&str, GgufValue)],
    tensors: &[GgufTensor],
) -> Result<()> {
    let mut b: Vec<u8> = Vec::new();
    fn string(b: &mut Vec<u8>, s: &str) {
        b.extend((s.len() as u64).to_le_bytes());
        b.extend(s.as_bytes());
    }
    fn value(b: &mut Vec<u8>, v: &GgufValue) {
        let array = |b: &mut Vec<u8>, item: u32, len: usize| {
            b.extend(9u32.to_le_bytes());
            b.extend(item.to_le_bytes());
            b.extend((len as u64).to_le_bytes());
        };
        match v {
            GgufValue::Str(s) => {
                b.extend(8u32.to_le_bytes());
                string(b, s);
            }
            GgufValue::U32(x) => {
                b.extend(4u32.to_le_bytes());
                b.extend(x.to_le_bytes());
            }
            GgufValue::F32(x) => {
                b.extend(6u32.to_le_bytes());
                b.extend(x.to_le_bytes());
            }
            GgufValue::Bool(x) => {
                b.extend(7u32.to_le_bytes());
                b.push(*x as u8);
            }
            GgufValue::Strings(items) => {
                array(b, 8, items.len());
                items.iter().for_each(|s| string(b, s));
            }
            GgufValue::I32s(items) => {
                array(b, 5, items.len());
                items.iter().for_each(|x| b.extend(x.to_le_bytes()));
            }
            GgufValue::F32s(items) => {
                array(b, 6, items.len());
                items.iter().for_each(|x| b.extend(x.to_le_bytes()));
            }
        }
    }
    b.extend(b"GGUF");
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((metadata.len() as u64).to_le_bytes());
    for (key, v) in metadata {
        string(&mut b, key);
        value(&mut b, v);
    }
    let mut offset = 0usize;
    for t in tensors {
        string(&mut b, &t.name);
        b.extend((t.shape.len() as u32).to_le_bytes());
        for d in t.shape.iter().rev() {
            b.extend((*d as u64).to_le_bytes());
        }
        b.extend(t.kind.to_le_bytes());
        b.extend((offset as u64).to_le_bytes());
        offset += t.data.len().div_ceil(ALIGN) * ALIGN;
    }
    let pad = |b: &mut Vec<u8>| b.resize(b.len().div_ceil(ALIGN) * ALIGN, 0);
    pad(&mut b);
    for t in tensors {
        b.extend(&t.data);
        pad(&mut b);
    }
    std::fs::write(path, b).map_err(|e| Error::io(path, e))
}
