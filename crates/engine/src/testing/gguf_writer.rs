//! A minimal GGUF writer, for tests: metadata and tensors of raw bytes, as
//! llama.cpp lays them out (tensor dimensions fastest-first, data aligned to
//! 32 bytes). Version 3 by default; [`write_gguf_header`] also writes the
//! older versions a reader of headers meets (version 1 counts and measures
//! strings in 32 bits, versions 2 and 3 in 64).
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
    std::fs::write(path, encode(3, metadata, tensors)).map_err(|e| Error::io(path, e))
}

/// A file of metadata and no tensors, in GGUF `version` (1, 2 or 3).
pub fn write_gguf_header(path: &Path, version: u32, metadata: &[(&str, GgufValue)]) -> Result<()> {
    std::fs::write(path, encode(version, metadata, &[])).map_err(|e| Error::io(path, e))
}

fn encode(version: u32, metadata: &[(&str, GgufValue)], tensors: &[GgufTensor]) -> Vec<u8> {
    let wide = version >= 2;
    let count = |b: &mut Vec<u8>, n: usize| {
        if wide {
            b.extend((n as u64).to_le_bytes())
        } else {
            b.extend((n as u32).to_le_bytes())
        }
    };
    let string = |b: &mut Vec<u8>, s: &str| {
        count(b, s.len());
        b.extend(s.as_bytes());
    };
    let value = |b: &mut Vec<u8>, v: &GgufValue| {
        let array = |b: &mut Vec<u8>, item: u32, len: usize| {
            b.extend(9u32.to_le_bytes());
            b.extend(item.to_le_bytes());
            count(b, len);
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
    };
    let mut b: Vec<u8> = Vec::new();
    b.extend(b"GGUF");
    b.extend(version.to_le_bytes());
    count(&mut b, tensors.len());
    count(&mut b, metadata.len());
    for (key, v) in metadata {
        string(&mut b, key);
        value(&mut b, v);
    }
    let mut offset = 0usize;
    for t in tensors {
        string(&mut b, &t.name);
        b.extend((t.shape.len() as u32).to_le_bytes());
        for d in t.shape.iter().rev() {
            count(&mut b, *d);
        }
        b.extend(t.kind.to_le_bytes());
        b.extend((offset as u64).to_le_bytes());
        offset += t.data.len().div_ceil(ALIGN) * ALIGN;
    }
    if tensors.is_empty() {
        return b; // a header: nothing to align
    }
    let pad = |b: &mut Vec<u8>| b.resize(b.len().div_ceil(ALIGN) * ALIGN, 0);
    pad(&mut b);
    for t in tensors {
        b.extend(&t.data);
        pad(&mut b);
    }
    b
}
