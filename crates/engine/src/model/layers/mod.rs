//! Building blocks shared by the model families: linear layers and embeddings
//! that are either float or MLX-quantized, and RMS norm.
mod activations;
pub(crate) mod attention;
pub(crate) mod fused;
pub mod gated_delta;
pub mod gated_delta_chunked;
pub(crate) mod moe;
pub(crate) mod mrope;
pub(crate) mod qwen_vit;
pub(crate) mod rope;
pub(crate) mod siglip;

use mlx_rs::{
    fast,
    ops::{self, indexing::IndexOp},
    Array, Dtype,
};

use std::ops::Range;

use activations::silu_ops;
pub use activations::{geglu, gelu, gelu_tanh, logit_softcap, silu, swiglu, swiglu_clamped};

use crate::distributed::{Pipeline, StageLayers, TensorParallel};
use crate::error::Result;
use crate::weights::quantized_ops;
use crate::weights::{QuantMode, QuantSpec, Quantization, Weights};

/// How weights are kept in memory once loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// Keep quantized weights quantized (the fast path on Metal).
    AsStored,
    /// Dequantize quantized weights to float32 at load. On MLX's CPU backend the
    /// quantized matmul kernels are naive and do not batch, while float32
    /// matmuls go through BLAS (see mlx-linux.md), so this is the CPU default.
    Float32,
}

impl Default for WeightFormat {
    fn default() -> Self {
        if cfg!(target_os = "macos") {
            WeightFormat::AsStored
        } else {
            WeightFormat::Float32
        }
    }
}

/// What a family's loader needs to build layers from a checkpoint.
pub struct LayerLoader<'a> {
    pub weights: &'a mut Weights,
    pub quantization: &'a Quantization,
    pub format: WeightFormat,
    /// The float dtype activations run in; float parameters are cast to it.
    pub dtype: Dtype,
    /// This rank's share when the model is split across processes; `None`
    /// for a whole model. Only the `*_sharded*` loaders below read it.
    pub tensor_parallel: Option<TensorParallel>,
    /// How many layers were loaded split across ranks (a family that asks
    /// for none cannot run tensor parallel).
    pub sharded_layers: usize,
    /// This rank's place when the model's layers are split into pipeline
    /// stages; `None` for a whole model. Read by [`Self::layer_stage`].
    pub pipeline: Option<Pipeline>,
    /// The stage [`Self::layer_stage`] planned (a family that asks for
    /// none cannot run pipeline parallel).
    pub stage: Option<StageLayers>,
    /// Load the checkpoint's own draft head (Qwen3.5's `mtp.*`) when it has
    /// one; `false` drops its tensors unread (only speculation by it needs them).
    pub draft_head: bool,
}

impl<'a> LayerLoader<'a> {
    /// A loader of a whole model in one process (no tensor-parallel share,
    /// no pipeline stage), its draft head included, activations in the
    /// dtype `format` runs in.
    pub fn whole(
        weights: &'a mut Weights,
        quantization: &'a Quantization,
        format: WeightFormat,
    ) -> Self {
        LayerLoader {
            weights,
            quantization,
            format,
            dtype: crate::model::loading::activation_dtype(format),
            tensor_parallel: None,
            sharded_layers: 0,
            pipeline: None,
            stage: None,
            draft_head: true,
        }
    }

    /// The decoder layers (of `num_layers`) this process loads and runs:
    /// all of them, or its pipeline stage, planned from the bytes of each
    /// layer's tensors (`keep_together`: layers that must share a stage).
    /// The other stages' tensors are dropped unread.
    pub fn layer_stage(
        &mut self,
        num_layers: usize,
        keep_together: Option<Range<usize>>,
    ) -> Result<StageLayers> {
        let Some(pipeline) = self.pipeline.clone() else {
            return Ok(StageLayers::whole(num_layers));
        };
        let mut bytes = vec![0u64; num_layers];
        let names: Vec<String> = self.weights.names().map(str::to_string).collect();
        for name in &names {
            if let Some(i) = decoder_layer_of(name).filter(|&i| i < num_layers) {
                bytes[i] += self.weights.nbytes_of(name).unwrap_or(0) as u64;
            }
        }
        let stage = pipeline.stage(&bytes, keep_together)?;
        for name in &names {
            if decoder_layer_of(name).is_some_and(|i| !stage.runs(i)) {
                self.weights.remove(name);
            }
        }
        self.stage = Some(stage.clone());
        Ok(stage)
    }

    /// A `[out, in]` linear layer at `path` (`path.weight`, optional `path.bias`,
    /// and `path.scales` / `path.biases` when quantized).
    pub fn linear(
        &mut self,
        path: &str,
        in_features: i32,
        out_features: i32,
        bias: bool,
    ) -> Result<Linear> {
        let weight = self.matrix(path, out_features, in_features)?;
        let bias =
            if bias { Some(self.float(&format!("{path}.bias"), &[out_features])?) } else { None };
        Ok(Linear { weight, bias })
    }

    /// [`Self::linear`] split by output features across the tensor-parallel
    /// ranks ("all-to-sharded"): this rank's rows of the weight and bias, so
    /// it computes its own heads or MLP columns from the whole input.
    /// Without tensor parallelism, the whole layer.
    pub fn linear_all_to_sharded(
        &mut self,
        path: &str,
        in_features: i32,
        out_features: i32,
        bias: bool,
    ) -> Result<Linear> {
        let Some(tp) = self.tensor_parallel.clone() else {
            return self.linear(path, in_features, out_features, bias);
        };
        let rows = tp.share(&format!("{path}'s output features"), out_features)?;
        let weight = self.matrix_part(path, out_features, in_features, 0, rows.clone())?;
        let bias = if bias {
            let b = self.weights.take_part(&format!("{path}.bias"), &[out_features], 0, rows)?;
            Some(if b.dtype() == self.dtype { b } else { b.as_dtype(self.dtype)? })
        } else {
            None
        };
        self.sharded_layers += 1;
        Ok(Linear { weight, bias })
    }

    /// [`Self::linear`] split by input features across the tensor-parallel
    /// ranks ("sharded-to-all"): it takes an all-to-sharded layer's output,
    /// and the ranks' partial products are summed before the (whole) bias.
    /// Without tensor parallelism, the whole layer.
    pub fn linear_sharded_to_all(
        &mut self,
        path: &str,
        in_features: i32,
        out_features: i32,
        bias: bool,
    ) -> Result<Projection> {
        let Some(tp) = self.tensor_parallel.clone() else {
            return Ok(Projection::Whole(self.linear(path, in_features, out_features, bias)?));
        };
        let cols = tp.share(&format!("{path}'s input features"), in_features)?;
        let weight = self.matrix_part(path, out_features, in_features, 1, cols)?;
        let bias =
            if bias { Some(self.float(&format!("{path}.bias"), &[out_features])?) } else { None };
        self.sharded_layers += 1;
        Ok(Projection::ShardedToAll { partial: Linear { weight, bias: None }, bias, tp })
    }

    pub fn embedding(&mut self, path: &str, vocab: i32, dim: i32) -> Result<Embedding> {
        Ok(Embedding { table: self.matrix(path, vocab, dim)?, dtype: self.dtype })
    }

    /// Columns `columns` of the `[vocab, dim]` embedding table at `path`, in
    /// memory of their own (a pipeline stage's part of a table whose columns
    /// belong to the layers, as Gemma 4's per-layer embeddings). A quantized
    /// table whose groups straddle the part's ends stays whole; the columns
    /// still to take from its rows are returned with it.
    pub fn embedding_columns(
        &mut self,
        path: &str,
        vocab: i32,
        dim: i32,
        columns: Range<i32>,
    ) -> Result<(Embedding, Option<Range<i32>>)> {
        let straddles = |gs: i32| columns.start % gs != 0 || columns.end % gs != 0;
        if self.weights.contains(&format!("{path}.scales"))
            && straddles(self.quantized_spec(path)?.group_size)
        {
            return Ok((
                Embedding { table: self.matrix(path, vocab, dim)?, dtype: self.dtype },
                Some(columns),
            ));
        }
        Ok((
            Embedding { table: self.matrix_part(path, vocab, dim, 1, columns)?, dtype: self.dtype },
            None,
        ))
    }

    /// Output features `rows` of the linear layer at `path` (no bias), in
    /// memory of their own: a pipeline stage's part of a projection whose
    /// outputs belong to the layers.
    pub fn linear_rows(
        &mut self,
        path: &str,
        in_features: i32,
        out_features: i32,
        rows: Range<i32>,
    ) -> Result<Linear> {
        Ok(Linear {
            weight: self.matrix_part(path, out_features, in_features, 0, rows)?,
            bias: None,
        })
    }

    pub fn rms_norm(&mut self, path: &str, dim: i32, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm { weight: self.float(&format!("{path}.weight"), &[dim])?, eps })
    }

    /// `[experts, rows, cols]` expert matrices at `path` (stacked, as
    /// mlx-community stores a mixture of experts' `switch_mlp`), quantized if
    /// the checkpoint stores them so.
    pub fn experts(
        &mut self,
        path: &str,
        experts: i32,
        rows: i32,
        cols: i32,
    ) -> Result<ExpertMatrices> {
        let w_name = format!("{path}.weight");
        let scales_name = format!("{path}.scales");
        if !self.weights.contains(&scales_name) {
            return Ok(ExpertMatrices::Float(self.float(&w_name, &[experts, rows, cols])?));
        }
        let (spec, mode) = (self.quantized_spec(path)?, self.quantization.mode_for_module(path));
        let weight = self.weights.take(&w_name, &[experts, rows, spec.packed_cols(cols)])?;
        let scales = self.weights.take(&scales_name, &[experts, rows, spec.groups(cols)])?;
        let biases = if mode.has_biases() {
            Some(
                self.weights
                    .take(&format!("{path}.biases"), &[experts, rows, spec.groups(cols)])?,
            )
        } else {
            None
        };
        let q = QuantizedMatrix { weight, scales, biases, spec, mode };
        Ok(match self.format {
            WeightFormat::AsStored => ExpertMatrices::Quantized(q),
            WeightFormat::Float32 => ExpertMatrices::Float(q.dequantize_f32()?),
        })
    }

    /// A float tensor of the given shape, cast to the activation dtype.
    pub fn float(&mut self, name: &str, shape: &[i32]) -> Result<Array> {
        let t = self.weights.take(name, shape)?;
        Ok(if t.dtype() == self.dtype { t } else { t.as_dtype(self.dtype)? })
    }

    /// A `[rows, cols]` matrix, quantized if the checkpoint stores it so.
    fn matrix(&mut self, path: &str, rows: i32, cols: i32) -> Result<Matrix> {
        let w_name = format!("{path}.weight");
        let scales_name = format!("{path}.scales");
        if !self.weights.contains(&scales_name) {
            return Ok(Matrix::Float(self.float(&w_name, &[rows, cols])?));
        }
        let (spec, mode) = (self.quantized_spec(path)?, self.quantization.mode_for_module(path));
        let weight = self.weights.take(&w_name, &[rows, spec.packed_cols(cols)])?;
        let scales = self.weights.take(&scales_name, &[rows, spec.groups(cols)])?;
        let biases = if mode.has_biases() {
            Some(self.weights.take(&format!("{path}.biases"), &[rows, spec.groups(cols)])?)
        } else {
            None
        };
        self.as_format(QuantizedMatrix { weight, scales, biases, spec, mode })
    }

    /// This rank's part `range` of the rows (`axis` 0) or columns (`axis` 1)
    /// of the `[rows, cols]` matrix at `path`, in memory of its own, read
    /// from the file in part where it can be ([`Weights::take_part`]). A
    /// quantized matrix splits along its groups: columns only at group
    /// boundaries. The whole of it (one process) is [`Self::matrix`].
    fn matrix_part(
        &mut self,
        path: &str,
        rows: i32,
        cols: i32,
        axis: usize,
        range: Range<i32>,
    ) -> Result<Matrix> {
        if range == (0..[rows, cols][axis]) {
            return self.matrix(path, rows, cols);
        }
        let w_name = format!("{path}.weight");
        let scales_name = format!("{path}.scales");
        if !self.weights.contains(&scales_name) {
            let t = self.weights.take_part(&w_name, &[rows, cols], axis, range)?;
            return Ok(Matrix::Float(if t.dtype() == self.dtype {
                t
            } else {
                t.as_dtype(self.dtype)?
            }));
        }
        let (spec, mode) = (self.quantized_spec(path)?, self.quantization.mode_for_module(path));
        let (packed, groups) = if axis == 0 {
            (range.clone(), range)
        } else {
            let gs = spec.group_size;
            if range.start % gs != 0 || range.end % gs != 0 {
                return Err(crate::Error::InvalidConfig(format!(
                    "a quantized matrix splits only at its groups of {gs} columns, not at columns {range:?}"
                )));
            }
            (
                spec.packed_cols(range.start)..spec.packed_cols(range.end),
                spec.groups(range.start)..spec.groups(range.end),
            )
        };
        let weight =
            self.weights.take_part(&w_name, &[rows, spec.packed_cols(cols)], axis, packed)?;
        let scales = self.weights.take_part(
            &scales_name,
            &[rows, spec.groups(cols)],
            axis,
            groups.clone(),
        )?;
        let biases = if mode.has_biases() {
            Some(self.weights.take_part(
                &format!("{path}.biases"),
                &[rows, spec.groups(cols)],
                axis,
                groups,
            )?)
        } else {
            None
        };
        self.as_format(QuantizedMatrix { weight, scales, biases, spec, mode })
    }

    /// The quantization of the module at `path`, stored quantized: a missing
    /// spec means the checkpoint and its config disagree.
    fn quantized_spec(&self, path: &str) -> Result<QuantSpec> {
        self.quantization.for_module(path).ok_or_else(|| {
            crate::Error::InvalidConfig(format!(
                "{path} is stored quantized but config.json has no quantization for it"
            ))
        })
    }

    /// `q` as this load wants it: kept quantized, or dequantized to float32.
    fn as_format(&self, q: QuantizedMatrix) -> Result<Matrix> {
        Ok(match self.format {
            WeightFormat::AsStored => Matrix::Quantized(q),
            WeightFormat::Float32 => Matrix::Float(q.dequantize_f32()?),
        })
    }
}

/// An MLX-quantized matrix: packed uint32 `weight`, per-group `scales`, and
/// per-group `biases` in affine mode (the floating-point modes have none).
#[derive(Debug, Clone)]
pub struct QuantizedMatrix {
    pub weight: Array,
    pub scales: Array,
    pub biases: Option<Array>,
    pub spec: QuantSpec,
    pub mode: QuantMode,
}

impl QuantizedMatrix {
    /// Dequantizes in float32. MLX dequantizes in the scales' dtype, and
    /// GGUF/mlx-community scales are float16: dequantizing first and casting
    /// after would round every weight to float16 (errors up to 2e-3 per weight
    /// on SmolLM2, 7.6e-2 on its logits).
    /// A floating-point mode's scales are exponents (uint8): it dequantizes
    /// to float32 directly.
    pub fn dequantize_f32(&self) -> Result<Array> {
        if self.mode != QuantMode::Affine {
            let f32 = Some(Dtype::Float32);
            return quantized_ops::dequantize(
                &self.weight,
                &self.scales,
                None,
                self.spec,
                self.mode,
                f32,
            );
        }
        let scales = self.scales.as_dtype(Dtype::Float32)?;
        let biases = self.biases.as_ref().map(|b| b.as_dtype(Dtype::Float32)).transpose()?;
        quantized_ops::dequantize(
            &self.weight,
            &scales,
            biases.as_ref(),
            self.spec,
            self.mode,
            None,
        )
    }
}

/// A matrix of parameters, float or quantized.
#[derive(Debug, Clone)]
pub enum Matrix {
    Float(Array),
    Quantized(QuantizedMatrix),
}

impl Matrix {
    /// `x @ self.T` — the product every linear layer computes.
    pub fn matmul_t(&self, x: &Array) -> Result<Array> {
        Ok(match self {
            Matrix::Float(w) => ops::matmul(x, w.t())?,
            Matrix::Quantized(q) => quantized_ops::quantized_matmul(
                x,
                &q.weight,
                &q.scales,
                q.biases.as_ref(),
                true,
                q.spec,
                q.mode,
            )?,
        })
    }

    /// Rows `ids` as float (embedding lookup).
    pub fn rows(&self, ids: &Array) -> Result<Array> {
        Ok(match self.select_rows(ids)? {
            Matrix::Float(w) => w,
            Matrix::Quantized(q) => quantized_ops::dequantize(
                &q.weight,
                &q.scales,
                q.biases.as_ref(),
                q.spec,
                q.mode,
                None,
            )?,
        })
    }

    /// The rows `ids` `[N]` in the matrix's own form: quantized rows stay
    /// quantized (each row's groups are its own), so a cut head reads no
    /// more bytes per row than the whole one did.
    pub fn select_rows(&self, ids: &Array) -> Result<Matrix> {
        Ok(match self {
            Matrix::Float(w) => Matrix::Float(w.take_axis(ids, 0)?),
            Matrix::Quantized(q) => Matrix::Quantized(QuantizedMatrix {
                weight: q.weight.take_axis(ids, 0)?,
                scales: q.scales.take_axis(ids, 0)?,
                biases: q.biases.as_ref().map(|b| b.take_axis(ids, 0)).transpose()?,
                spec: q.spec,
                mode: q.mode,
            }),
        })
    }

    /// Bytes of the parameters as held in memory.
    pub fn nbytes(&self) -> usize {
        match self {
            Matrix::Float(w) => w.nbytes(),
            Matrix::Quantized(q) => {
                q.weight.nbytes() + q.scales.nbytes() + q.biases.as_ref().map_or(0, Array::nbytes)
            }
        }
    }
}

/// The stacked `[experts, out, in]` matrices of a mixture of experts.
#[derive(Debug, Clone)]
pub enum ExpertMatrices {
    Float(Array),
    Quantized(QuantizedMatrix),
}

impl ExpertMatrices {
    /// `x @ W[e].T` for each row's expert `e = indices[...]`: `x` is
    /// `[..., 1, in]` broadcast against `indices` `[..., k]`, the result
    /// `[..., k, 1, out]` (MLX's gather matmuls).
    pub fn gather_matmul_t(&self, x: &Array, indices: &Array, sorted: bool) -> Result<Array> {
        Ok(match self {
            ExpertMatrices::Float(w) => {
                ops::gather_mm(x, w.swap_axes(-1, -2)?, None, indices, sorted)?
            }
            ExpertMatrices::Quantized(q) => quantized_ops::gather_qmm(
                x,
                &q.weight,
                &q.scales,
                q.biases.as_ref(),
                indices,
                true,
                q.spec,
                q.mode,
                sorted,
            )?,
        })
    }
}

#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Matrix,
    pub bias: Option<Array>,
}

impl Linear {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        // A float layer with a bias is one `addmm`, as MLX's `nn.Linear`
        // (so mlx-lm's) computes it: the bias is the product's starting
        // value, one graph node and no separate pass to add it.
        if let (Matrix::Float(w), Some(b)) = (&self.weight, &self.bias) {
            return Ok(ops::addmm(b, x, w.t(), None, None)?);
        }
        let y = self.weight.matmul_t(x)?;
        Ok(match &self.bias {
            Some(b) => y.add(b)?,
            None => y,
        })
    }
}

/// A layer whose output every rank needs: whole, or split by input features
/// across tensor-parallel ranks (see [`LayerLoader::linear_sharded_to_all`]).
pub enum Projection {
    Whole(Linear),
    ShardedToAll {
        /// This rank's input columns, no bias.
        partial: Linear,
        /// Added once, after the sum over ranks.
        bias: Option<Array>,
        tp: TensorParallel,
    },
}

impl Projection {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            Projection::Whole(linear) => linear.forward(x),
            Projection::ShardedToAll { partial, bias, tp } => {
                let y = tp.all_sum(&partial.forward(x)?)?;
                Ok(match bias {
                    Some(b) => y.add(b)?,
                    None => y,
                })
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct Embedding {
    pub table: Matrix,
    /// The activation dtype. Quantized rows dequantize in their scales'
    /// dtype (float16 in real checkpoints); the embeddings leave in this one,
    /// so what is spliced into them (image features) is not rounded to
    /// float16 on a float32 path.
    pub dtype: Dtype,
}

impl Embedding {
    pub fn forward(&self, ids: &Array) -> Result<Array> {
        let rows = self.table.rows(ids)?;
        Ok(if rows.dtype() == self.dtype { rows } else { rows.as_dtype(self.dtype)? })
    }

    /// Rows `ids` times `scale`, in the dtype the rows come out in (a
    /// quantized table's float16), as mlx-lm's `embed(x) * scale` leaves
    /// them: what reads them first (Gemma 4's per-layer projection) then runs
    /// in that dtype as the reference's does (measured: 1e-3 logit difference
    /// on the tiny 4-bit Gemma 4 when cast to float32 first, 1e-6 without).
    pub fn forward_scaled(&self, ids: &Array, scale: f32) -> Result<Array> {
        let rows = self.table.rows(ids)?;
        let rows = rows.multiply(Array::from_f32(scale).as_dtype(rows.dtype())?)?;
        Ok(rows)
    }

    /// Tied output head: logits = h @ table.T.
    pub fn as_linear(&self, h: &Array) -> Result<Array> {
        self.table.matmul_t(h)
    }
}

#[derive(Debug, Clone)]
pub struct RmsNorm {
    pub weight: Array,
    pub eps: f32,
}

impl RmsNorm {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        Ok(fast::rms_norm(x, Some(&self.weight), self.eps)?)
    }
}

/// The last position of a `[B, L, D]` activation, as `[B, 1, D]`.
pub fn last_position(h: &Array) -> Result<Array> {
    let l = h.dim(1);
    Ok(h.index((.., (l - 1)..l, ..)))
}

/// Zero-pads axis `axis` of `x` at the end to `to` entries.
pub fn pad_axis(x: Array, axis: usize, to: i32) -> Result<Array> {
    let have = x.dim(axis as i32);
    if have == to {
        return Ok(x);
    }
    let mut shape = x.shape().to_vec();
    shape[axis] = to - have;
    let zeros = ops::zeros_dtype(&shape, x.dtype())?;
    Ok(ops::concatenate(&[&x, &zeros], axis as i32)?)
}

/// `x` `[B, L, …]` at one position per row, `at` `[B]` int32: `[B, 1, …]`
/// (the positions a caller reads, [`crate::cache::BatchCache::read_positions`]).
pub fn rows_at(x: &Array, at: &Array) -> Result<Array> {
    let mut shape = x.shape().to_vec();
    shape[1] = 1;
    let mut index = vec![at.dim(0), 1];
    index.resize(shape.len(), 1);
    Ok(x.take_along_axis(&ops::broadcast_to(&at.reshape(&index)?, &shape)?, 1)?)
}

/// The decoder layer a tensor belongs to (`….layers.N.…`); `None` for
/// other tensors, the vision and audio towers' own layers included.
fn decoder_layer_of(name: &str) -> Option<usize> {
    if ["vision", "visual", "audio", "mtp."].iter().any(|tower| name.contains(tower)) {
        return None;
    }
    let at = if name.starts_with("layers.") { 0 } else { name.find(".layers.")? + 1 };
    let rest = &name[at + "layers.".len()..];
    let digits = rest.split('.').next()?;
    digits.parse().ok()
}

#[cfg(test)]
mod layer_name_tests {
    use super::decoder_layer_of;

    #[test]
    fn decoder_layers_are_found_by_name_and_towers_are_not() {
        assert_eq!(decoder_layer_of("model.layers.12.mlp.up_proj.weight"), Some(12));
        assert_eq!(
            decoder_layer_of("language_model.model.layers.3.self_attn.q_proj.scales"),
            Some(3)
        );
        assert_eq!(decoder_layer_of("layers.0.attention.wq.weight"), Some(0));
        assert_eq!(decoder_layer_of("vision_tower.encoder.layers.1.mlp.fc1.weight"), None);
        assert_eq!(decoder_layer_of("model.embed_tokens.weight"), None);
        assert_eq!(decoder_layer_of("model.norm.weight"), None);
    }
}

#[cfg(test)]
mod stage_part_tests {
    use std::collections::HashMap;

    use mlx_rs::{ops, ops::indexing::IndexOp, random, Array, Dtype};
    use serde_json::json;

    use super::{quantized_ops, LayerLoader, Matrix, QuantizedMatrix, WeightFormat};
    use crate::weights::{QuantMode, QuantSpec, Quantization, Weights};

    /// One 4-bit `[8, 256]` table in groups of 64, and the config that says so.
    fn quantized_table() -> (Weights, Quantization) {
        let table =
            random::normal::<f32>(&[8, 256], None, None, Some(&random::key(7).unwrap())).unwrap();
        let (w, s, b) = ops::quantize(&table, 64, 4).unwrap();
        let tensors = HashMap::from([
            ("t.weight".to_string(), w),
            ("t.scales".to_string(), s),
            ("t.biases".to_string(), b),
        ]);
        let quantization =
            Quantization::from_config(&json!({"quantization": {"group_size": 64, "bits": 4}}))
                .unwrap();
        (Weights::new(tensors, "test"), quantization)
    }

    fn loader<'a>(weights: &'a mut Weights, quantization: &'a Quantization) -> LayerLoader<'a> {
        LayerLoader {
            weights,
            quantization,
            format: WeightFormat::AsStored,
            dtype: Dtype::Float32,
            tensor_parallel: None,
            sharded_layers: 0,
            pipeline: None,
            stage: None,
            draft_head: false,
        }
    }

    /// The embeddings of every id, columns `columns` only, as the loader's part gives them.
    fn rows_of_part(columns: std::ops::Range<i32>) -> (Array, Array, bool) {
        let (mut weights, quantization) = quantized_table();
        let whole = loader(&mut weights, &quantization).embedding("t", 8, 256).unwrap();
        let ids = Array::from_slice(&(0..8).collect::<Vec<i32>>(), &[8]);
        let expected = whole.forward(&ids).unwrap().index((.., columns.clone()));
        let (mut weights, quantization) = quantized_table();
        let (part, still) =
            loader(&mut weights, &quantization).embedding_columns("t", 8, 256, columns).unwrap();
        let held_whole = matches!(&part.table, Matrix::Quantized(q) if q.scales.dim(1) == 4);
        let mut rows = part.forward(&ids).unwrap();
        if let Some(c) = still {
            rows = rows.index((.., c));
        }
        (rows, expected, held_whole)
    }

    #[test]
    fn a_stage_keeps_only_its_columns_of_a_quantized_table_at_group_boundaries() {
        let (rows, expected, held_whole) = rows_of_part(64..192);
        assert!(!held_whole, "two of the four groups are enough");
        assert_eq!(rows.shape(), &[8, 128]);
        assert!(rows.eq_values(&expected).unwrap());
    }

    #[test]
    fn a_part_that_straddles_groups_keeps_the_table_whole_and_takes_the_columns_from_its_rows() {
        let (rows, expected, held_whole) = rows_of_part(32..160);
        assert!(held_whole);
        assert_eq!(rows.shape(), &[8, 128]);
        assert!(rows.eq_values(&expected).unwrap());
    }

    /// A quantized head's chosen rows stay quantized (a cut head reads no
    /// more bytes a row than the whole one) and mean what `rows` gives.
    #[test]
    fn selected_rows_of_a_quantized_matrix_stay_quantized() {
        let w = mlx_rs::random::normal::<f32>(&[16, 64], None, None, None).unwrap();
        let spec = QuantSpec { group_size: 32, bits: 4 };
        let (weight, scales, biases) =
            quantized_ops::quantize(&w, spec, QuantMode::Affine).unwrap();
        let m = Matrix::Quantized(QuantizedMatrix {
            weight,
            scales,
            biases,
            spec,
            mode: QuantMode::Affine,
        });
        let ids = Array::from_slice(&[3i32, 0, 11], &[3]);
        let Matrix::Quantized(picked) = m.select_rows(&ids).unwrap() else {
            panic!("the rows were dequantized")
        };
        assert_eq!(picked.weight.shape()[0], 3);
        let back = quantized_ops::dequantize(
            &picked.weight,
            &picked.scales,
            picked.biases.as_ref(),
            spec,
            picked.mode,
            None,
        )
        .unwrap();
        assert!(back.all_close(m.rows(&ids).unwrap(), 0.0, 0.0, None).unwrap());
    }
}
