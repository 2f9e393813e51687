//! Fixture checkpoints from a family's own loader: its `load` runs against
//! a recording [`Weights`] for a config.json the test writes, and every
//! tensor it takes is written with seeded values into a real
//! `model.safetensors` ([`write_recorded`]), which the test then loads from
//! disk through the normal loader. A fixture so restates no tensor name: a
//! new family's tiny checkpoint is its config.
//!
//! The checkpoint is the family's plainest for that config: float (or every
//! matrix quantized, as mlx-community stores them), in the family's own
//! names and layouts, and with the optional tensors (those a loader only
//! takes when it finds them) that `present` names.
use std::collections::HashMap;
use std::path::Path;

use mlx_rs::{ops, Array};
use serde_json::Value;

use super::{save_checkpoint, tiny_tokenizer, Rng};
use crate::error::{Error, Result};
use crate::model::layers::{LayerLoader, WeightFormat};
use crate::model::loading::read_config;
use crate::model::registry;
use crate::weights::{self, Asked, QuantSpec, Quantization, Weights};

/// A checkpoint's tensors by name.
pub(crate) type Tensors = HashMap<String, Array>;

/// How a recorded checkpoint's values are drawn.
#[derive(Debug, Clone, Copy)]
pub struct Values {
    /// Each tensor's values are drawn from this and its name alone, so they
    /// do not move when a loader takes its tensors in another order.
    pub seed: u64,
    /// Where norm weights centre: 1 where a norm scales by `w`, 0 where it
    /// scales by `1 + w` (Gemma 3).
    pub norm_center: f32,
}

impl Values {
    pub fn seeded(seed: u64) -> Self {
        Self { seed, norm_center: 1.0 }
    }
}

/// The tensors the family of `config` (its `model_type`) takes when it
/// loads, in the order it takes them; `present` names the optional ones
/// that are there.
pub fn record(
    config: &Value,
    present: impl Fn(&str) -> bool + Send + 'static,
) -> Result<Vec<Asked>> {
    let mut weights = Weights::recording(present);
    build(config, &mut weights)?;
    Ok(weights.asked().to_vec())
}

/// The tensors that `load` (one part of a family: a vision tower) takes,
/// in the order it takes them; no optional ones.
pub(crate) fn record_part(load: impl FnOnce(&mut LayerLoader) -> Result<()>) -> Result<Vec<Asked>> {
    let mut weights = Weights::recording(|_| false);
    load(&mut LayerLoader::whole(&mut weights, &Quantization::default(), FLOAT))?;
    Ok(weights.asked().to_vec())
}

/// One part of a hand-written fixture (a vision tower) from the family's
/// loader: the tensors it takes for `config` whose names `part` picks (no
/// optional ones), drawn from `rng` in the order it takes them, so a writer
/// that drew a part in its loader's order keeps its values. `special` draws
/// those the writer draws its own way (`None`: [`draw`]'s rules, norms
/// centred on 1).
pub(crate) fn draw_part(
    config: &Value,
    part: impl Fn(&str) -> bool,
    rng: &mut Rng,
    mut special: impl FnMut(&Asked, &mut Rng) -> Result<Option<Array>>,
) -> Result<Vec<(String, Array)>> {
    let mut drawn = Vec::new();
    for a in record(config, |_| false)?.into_iter().filter(|a| part(&a.name)) {
        let value = match special(&a, rng)? {
            Some(value) => value,
            None => draw(&a, rng, 1.0, false)?,
        };
        drawn.push((a.name, value));
    }
    Ok(drawn)
}

/// A convolution kernel of MLX's channels-last shape `[out, …, C]`, drawn
/// as the hand-written fixtures draw one, in PyTorch's order `[out, C, …]`
/// at 1/√(what one output reads); stored in PyTorch's layout when
/// `torch_layout`, else in MLX's.
pub(crate) fn conv_kernel(rng: &mut Rng, mlx_shape: &[i32], torch_layout: bool) -> Result<Array> {
    let n = mlx_shape.len();
    let mut torch = vec![mlx_shape[0], mlx_shape[n - 1]];
    torch.extend_from_slice(&mlx_shape[1..n - 1]);
    let reads: i32 = mlx_shape[1..].iter().product();
    let kernel = rng.tensor(&torch, 1.0 / (reads as f32).sqrt(), 0.0);
    if torch_layout {
        return Ok(kernel);
    }
    let channels_last: Vec<i32> = [0].into_iter().chain(2..n as i32).chain([1]).collect();
    Ok(kernel.transpose_axes(&channels_last)?)
}

/// Writes `config` (with the `quantization` block when `quantize`) and a
/// `model.safetensors` of every tensor the family takes for it, with
/// seeded values, into `dir`; returns what was recorded. With `quantize`,
/// every matrix whose rows divide into its groups is stored quantized.
/// The tokenizer files are the caller's.
pub fn write_recorded(
    dir: &Path,
    config: Value,
    quantize: Option<QuantSpec>,
    values: Values,
    present: impl Fn(&str) -> bool + Send + 'static,
) -> Result<Vec<Asked>> {
    write_recorded_as(dir, config, quantize, values, present, |_| Ok(()))
}

/// [`write_recorded`], the tensors passed through `layout` before they are
/// written: a float fixture in a layout the family's loader converts from
/// (Hugging Face's names, experts one by one) holds the recorded values
/// under that layout's names.
pub(crate) fn write_recorded_as(
    dir: &Path,
    config: Value,
    quantize: Option<QuantSpec>,
    values: Values,
    present: impl Fn(&str) -> bool + Send + 'static,
    layout: impl FnOnce(&mut Tensors) -> Result<()>,
) -> Result<Vec<Asked>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut drawn = Recorded::draw(&config, quantize, values, present)?;
    layout(&mut drawn.tensors)?;
    save_checkpoint(dir, drawn.tensors, &drawn.matrices, config, quantize)?;
    Ok(drawn.asked)
}

/// A recorded checkpoint before it is written.
pub(crate) struct Recorded {
    /// What the family's loader took, in its order.
    pub asked: Vec<Asked>,
    /// Each with its seeded values, by name.
    pub tensors: Tensors,
    /// The module paths of the matrices a quantized checkpoint stores
    /// quantized (with `quantize`, those whose rows divide into its groups).
    pub matrices: Vec<String>,
}

impl Recorded {
    /// The checkpoint the family of `config` takes, with `values`; `present`
    /// names the optional tensors that are there.
    pub(crate) fn draw(
        config: &Value,
        quantize: Option<QuantSpec>,
        values: Values,
        present: impl Fn(&str) -> bool + Send + 'static,
    ) -> Result<Self> {
        let asked = record(config, present)?;
        // Without a head of its own the embedding is the head: see `value_of`.
        let tied = !asked.iter().any(|a| a.name.ends_with("lm_head.weight"));
        let mut tensors = Tensors::new();
        for a in &asked {
            tensors.insert(a.name.clone(), value_of(a, values, tied)?);
        }
        let divides = |a: &Asked| {
            quantize.is_none_or(|q| a.shape.last().is_some_and(|c| c % q.group_size == 0))
        };
        let matrices: Vec<String> = asked
            .iter()
            .filter(|a| a.matrix && divides(a))
            .filter_map(|a| a.name.strip_suffix(".weight").map(str::to_string))
            .collect();
        Ok(Self { asked, tensors, matrices })
    }
}

/// A whole tiny model folder from its config alone: the tiny byte-level
/// tokenizer, `config(vocabulary size)`, and the tensors its family takes
/// for that config ([`write_recorded`], no optional ones). Returns the
/// vocabulary size. A family's test fixture is so its config and nothing else.
pub fn write_tiny_from_config(
    dir: &Path,
    config: impl FnOnce(i32) -> Value,
    quantize: Option<QuantSpec>,
    values: Values,
) -> Result<i32> {
    write_tiny_as(dir, config, quantize, values, |_| Ok(()))
}

/// [`write_tiny_from_config`] in another layout ([`write_recorded_as`]).
pub(crate) fn write_tiny_as(
    dir: &Path,
    config: impl FnOnce(i32) -> Value,
    quantize: Option<QuantSpec>,
    values: Values,
    layout: impl FnOnce(&mut Tensors) -> Result<()>,
) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tokenizer = tiny_tokenizer()?;
    tokenizer.write_hf_files(dir)?;
    let vocab = tokenizer.vocab_size() as i32;
    write_recorded_as(dir, config(vocab), quantize, values, |_| false, layout)?;
    Ok(vocab)
}

/// The tensors of the checkpoint in `dir` that its family does not take
/// when it loads it whole (with its draft head): none, for a checkpoint
/// that holds exactly what the family reads.
pub fn leftover_after_load(dir: &Path) -> Result<Vec<String>> {
    let config = read_config(dir)?;
    let mut weights = weights::safetensors::load_folder(dir)?;
    build(&config, &mut weights)?;
    Ok(weights.leftover())
}

/// Builds the family of `config` from `weights`, whole, in float32.
fn build(config: &Value, weights: &mut Weights) -> Result<()> {
    let model_type = registry::model_type(config)?;
    let family = registry::family(&model_type).ok_or_else(|| registry::unsupported(&model_type))?;
    let quantization = Quantization::from_config(config)?;
    (family.build)(&model_type, config, &mut LayerLoader::whole(weights, &quantization, FLOAT))?;
    Ok(())
}

/// Recordings and fixture loads run in float32.
const FLOAT: WeightFormat = WeightFormat::Float32;

/// Seeded values for one recorded tensor, drawn from its own stream
/// (the seed and its name): see [`draw`].
fn value_of(a: &Asked, values: Values, tied: bool) -> Result<Array> {
    draw(a, &mut Rng(values.seed ^ fnv1a(&a.name)), values.norm_center, tied)
}

/// Values for `a` from `rng`, at the scales the hand-written fixtures use,
/// so tiny models stay numerically sane: matrices at 1/√(inputs), norms
/// near their centre, decays and gates in their ranges, a vision tower's
/// position table at ±0.5 (as large as what it is added to). The token
/// embedding is large (±0.5) when the model has a head of its own, and
/// small (±0.05) when `tied`: the residual stream is then mostly the input
/// embedding, and a large one makes every next token the last input token;
/// small, the layers decide.
pub(crate) fn draw(a: &Asked, rng: &mut Rng, norm_center: f32, tied: bool) -> Result<Array> {
    let shape = a.shape.as_slice();
    let leaf = a.name.rsplit('.').next().unwrap_or_default();
    let fan_in = |dims: &[i32]| dims.iter().product::<i32>().max(1) as f32;
    Ok(match leaf {
        "weight" if a.name.ends_with("embed_tokens.weight") => {
            rng.tensor(shape, if tied { 0.05 } else { 0.5 }, 0.0)
        }
        "weight" if a.name.ends_with("position_embedding.weight") => rng.tensor(shape, 0.5, 0.0),
        _ if a.matrix => rng.tensor(shape, 1.0 / fan_in(&shape[shape.len() - 1..]).sqrt(), 0.0),
        // A recurrent layer's decay: A between 1 and 8, gentle to strong.
        "A_log" => ops::log(rng.tensor(shape, 3.5, 4.5))?,
        "dt_bias" => rng.tensor(shape, 0.5, 1.0),
        // Scales that multiply a layer's or a router's output: near 1.
        "layer_scalar" | "scale" | "per_expert_scale" => rng.tensor(shape, 0.3, 1.0),
        "weight" if shape.len() == 1 && a.name.contains("norm") => {
            rng.tensor(shape, 0.1, norm_center)
        }
        // Biases, sinks and other vectors: small.
        _ if shape.len() <= 1 => rng.tensor(shape, 0.1, 0.0),
        // Kernels and tables: 1/√(what one output reads).
        _ => rng.tensor(shape, 1.0 / fan_in(&shape[1..]).sqrt(), 0.0),
    })
}

/// FNV-1a: a tensor's name as a seed, the same on every machine.
fn fnv1a(name: &str) -> u64 {
    name.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}
