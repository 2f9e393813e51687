//! What a saved prefix's arrays must look like for the loaded model: each
//! layer's key and value heads, head size and type, each recurrent state's
//! shape and type. A file that passes its checksum but was written for other
//! shapes (an edited header, a model folder changed under the same name)
//! would otherwise fail every later request that shares its opening tokens
//! with a shape error deep in attention.
//!
//! The model says it best itself: one token through a fresh one-row cache
//! ([`KvSignature::probe`]) gives every array's shape and type, for every
//! family and cache kind alike.
use std::collections::HashMap;

use mlx_rs::{Array, Dtype};

use crate::cache::row_contents::RowContents;
use crate::cache::{BatchCache, CacheLayout};
use crate::error::Result;
use crate::model::{LanguageModel, Positions};

/// An array's shape with its token axis (keys and values: axis 2) left out, and its type.
type Expected = (Vec<i32>, Dtype);

pub struct KvSignature {
    arrays: HashMap<String, Expected>,
}

impl KvSignature {
    /// Runs one token through `model` into a fresh one-row cache and records
    /// what each array of the row looks like.
    pub fn probe(model: &dyn LanguageModel, layout: &CacheLayout) -> Result<Self> {
        let mut cache = BatchCache::new(layout, 1, None);
        let tokens = Array::from_slice(&[0u32], &[1, 1]);
        model.forward(&tokens, &Positions::Start(0), &mut cache)?.eval()?;
        Ok(Self::of(&cache.row_contents()?))
    }

    fn of(contents: &RowContents) -> Self {
        let arrays = contents
            .named_arrays()
            .into_iter()
            .map(|(name, a)| (name.clone(), expected(&name, a)))
            .collect();
        Self { arrays }
    }

    /// Why `contents` cannot be this model's, if it cannot.
    pub fn check(&self, contents: &RowContents) -> std::result::Result<(), String> {
        for (name, a) in contents.named_arrays() {
            let Some(want) = self.arrays.get(&name) else {
                return Err(format!("holds {name}, which this model's cache does not have"));
            };
            let got = expected(&name, a);
            if &got != want {
                return Err(format!(
                    "holds {name} as {:?} {:?}; this model's is {:?} {:?}",
                    got.1,
                    a.shape(),
                    want.1,
                    want.0
                ));
            }
        }
        Ok(())
    }
}

fn expected(name: &str, a: &Array) -> Expected {
    let mut shape = a.shape().to_vec();
    if (name.ends_with(".keys") || name.ends_with(".values")) && shape.len() == 4 {
        shape.remove(2);
    }
    (shape, a.dtype())
}
