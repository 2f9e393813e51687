//! Rotary position embeddings, including the frequency scalings that
//! config.json's `rope_scaling` may ask for.
use mlx_rs::{fast, ops, Array};
use serde::Deserialize;

use crate::error::{Error, Result};
pub use crate::model::layers::mrope::MRopeLayout;
use crate::model::layers::mrope::{self, MRope};

/// `rope_scaling` from config.json (`type` in older files, `rope_type` in newer).
#[derive(Debug, Clone, Deserialize)]
pub struct RopeScaling {
    #[serde(alias = "type")]
    pub rope_type: String,
    #[serde(default)]
    pub factor: Option<f32>,
    #[serde(default)]
    pub low_freq_factor: Option<f32>,
    #[serde(default)]
    pub high_freq_factor: Option<f32>,
    #[serde(default)]
    pub original_max_position_embeddings: Option<f32>,
    /// YaRN: the rotations per original context above which a frequency
    /// is kept (`beta_fast`) and below which it is interpolated (`beta_slow`).
    #[serde(default)]
    pub beta_fast: Option<f32>,
    #[serde(default)]
    pub beta_slow: Option<f32>,
    /// YaRN's attention scaling, over the scaling of every dimension.
    #[serde(default)]
    pub mscale: Option<f32>,
    #[serde(default)]
    pub mscale_all_dim: Option<f32>,
}

/// Where a step's tokens sit: what RoPE rotates by. The caller knows each
/// row's position (its tokens so far plus, for a vision-language sequence,
/// its rope delta) and passes it to the model explicitly.
#[derive(Clone)]
pub enum Positions {
    /// Every row's tokens start at this position.
    Start(i32),
    /// Row `b`'s tokens start at `starts[b]`, `[B]` int32 (rows of a batch differ).
    PerRow(Array),
    /// Explicit M-RoPE positions `[3, B, L]` (temporal, height, width) for a
    /// step whose tokens include image features; only vision-language models
    /// accept them.
    Multimodal(Array),
}

impl Positions {
    /// The positions of one token per row, row `b`'s token `at[b]` (`[B]`
    /// int32) of this step's: where a layer runs only the positions its
    /// caller reads ([`crate::cache::BatchCache::read_positions`]).
    pub fn at(&self, at: &Array) -> Result<Positions> {
        Ok(match self {
            Positions::Start(start) => Positions::PerRow(at.add(Array::from_int(*start))?),
            Positions::PerRow(starts) => Positions::PerRow(starts.add(at)?),
            Positions::Multimodal(p) => {
                let (axes, rows) = (p.dim(0), p.dim(1));
                let at = ops::broadcast_to(&at.reshape(&[1, rows, 1])?, &[axes, rows, 1])?;
                Positions::Multimodal(p.take_along_axis(&at, 2)?)
            }
        })
    }

    /// Rows starting at `starts`: one scalar when they all agree (the fast
    /// RoPE kernel a lone sequence gets), else per row.
    pub fn rows(starts: &[i32]) -> Self {
        match starts {
            [first, rest @ ..] if rest.iter().all(|s| s == first) => Positions::Start(*first),
            _ => Positions::PerRow(Array::from_slice(starts, &[starts.len() as i32])),
        }
    }
}

pub struct Rope {
    /// Multimodal sections (Qwen2-VL); used only for explicit positions.
    mrope: Option<MRope>,
    dims: i32,
    traditional: bool,
    base: f32,
    scale: f32,
    /// Explicit per-pair frequencies (Llama 3 scaling); when set, `base` is unused.
    freqs: Option<Array>,
    /// What queries and keys are multiplied by before rotating (YaRN's
    /// attention temperature; 1 for the others).
    mscale: f32,
}

impl Rope {
    pub fn new(
        dims: i32,
        base: f32,
        traditional: bool,
        scaling: Option<&RopeScaling>,
    ) -> Result<Self> {
        let mut rope =
            Rope { mrope: None, dims, traditional, base, scale: 1.0, freqs: None, mscale: 1.0 };
        let Some(s) = scaling else { return Ok(rope) };
        match s.rope_type.as_str() {
            "default" => {}
            "linear" => rope.scale = 1.0 / s.factor.unwrap_or(1.0),
            "llama3" => rope.freqs = Some(llama3_freqs(dims, base, s)?),
            "yarn" => {
                let (freqs, mscale) = yarn(dims, base, s)?;
                rope.freqs = Some(freqs);
                rope.mscale = mscale;
            }
            other => {
                return Err(Error::InvalidConfig(format!(
                    "unsupported rope_scaling type {other:?}"
                )));
            }
        }
        Ok(rope)
    }

    /// Gemma 4's "proportional" RoPE: only the first `rotated_dims` of the
    /// `dims` features rotate, at the frequencies full-width RoPE would give
    /// them (`base^(2i/dims)`, times `factor`); the rest keep their values
    /// (an infinite wavelength turns by nothing).
    pub fn proportional(dims: i32, rotated_dims: i32, base: f32, factor: f32) -> Result<Self> {
        if rotated_dims > dims || rotated_dims < 0 {
            return Err(Error::InvalidConfig(format!(
                "partial_rotary_factor rotates {rotated_dims} of {dims} features"
            )));
        }
        let freqs: Vec<f32> = (0..dims / 2)
            .map(|i| {
                if 2 * i < rotated_dims {
                    factor * base.powf(2.0 * i as f32 / dims as f32)
                } else {
                    f32::INFINITY
                }
            })
            .collect();
        Ok(Rope {
            freqs: Some(Array::from_slice(&freqs, &[dims / 2])),
            ..Self::new(dims, base, false, None)?
        })
    }

    /// Multimodal RoPE (M-RoPE) over the first `dims` features of each head:
    /// the `dims / 2` frequencies are assigned to the temporal, height and
    /// width axes by `sections` in `layout`, each rotated by its own position
    /// axis. Text positions are equal on all axes, where this is plain RoPE
    /// with `base`.
    pub fn multimodal(
        dims: i32,
        base: f32,
        sections: [i32; 3],
        layout: MRopeLayout,
    ) -> Result<Self> {
        Ok(Rope {
            mrope: Some(MRope::new(dims, base, sections, layout)?),
            ..Self::new(dims, base, false, None)?
        })
    }

    /// Rotates `x` `[B, heads, L, head_dim]` for `positions`.
    pub fn apply(&self, x: &Array, positions: &Positions) -> Result<Array> {
        self.rotate(x, &self.prepare(positions)?)
    }

    /// What a step's positions mean for every layer's rotation, computed once
    /// per step (explicit M-RoPE positions become cos/sin tables).
    pub fn prepare<'a>(&self, positions: &'a Positions) -> Result<Rotation<'a>> {
        match (positions, &self.mrope) {
            (Positions::Multimodal(p), Some(mrope)) => {
                let (cos, sin) = mrope.cos_sin(p)?;
                Ok(Rotation::Tables { cos, sin })
            }
            (Positions::Multimodal(_), None) => {
                Err(Error::InvalidRequest("this model has no multimodal (M-RoPE) positions".into()))
            }
            (positions, _) => Ok(Rotation::Offset(positions)),
        }
    }

    /// Rotates `x` `[B, heads, L, head_dim]` as [`Self::prepare`] decided.
    pub fn rotate(&self, x: &Array, rotation: &Rotation) -> Result<Array> {
        let base = if self.freqs.is_some() { None } else { Some(self.base) };
        let scaled;
        let x = if self.mscale == 1.0 {
            x
        } else {
            // Only the rotated features are scaled (all of them in gpt-oss).
            let m = Array::from_f32(self.mscale).as_dtype(x.dtype())?;
            scaled = if x.dim(-1) > self.dims {
                let parts = x.split_at_indices(&[self.dims], -1)?;
                mlx_rs::ops::concatenate(&[parts[0].multiply(&m)?, parts[1].clone()], -1)?
            } else {
                x.multiply(&m)?
            };
            &scaled
        };
        Ok(match rotation {
            Rotation::Offset(Positions::Start(o)) => fast::rope(
                x,
                self.dims,
                self.traditional,
                base,
                self.scale,
                *o,
                self.freqs.as_ref(),
            )?,
            Rotation::Offset(Positions::PerRow(o)) => fast::rope_dynamic(
                x,
                self.dims,
                self.traditional,
                base,
                self.scale,
                o,
                self.freqs.as_ref(),
            )?,
            Rotation::Offset(Positions::Multimodal(_)) => {
                unreachable!("prepare turns explicit positions into tables")
            }
            Rotation::Tables { cos, sin } => mrope::rotate_leading(x, cos, sin)?,
        })
    }
}

/// A step's rotation: by offset (fast RoPE kernel) or by precomputed tables.
pub enum Rotation<'a> {
    Offset(&'a Positions),
    /// `[B, 1, L, head_dim]` each.
    Tables {
        cos: Array,
        sin: Array,
    },
}

/// YaRN (gpt-oss, DeepSeek): frequencies that turn many times within the
/// original context are kept, those that turn less than once are slowed by
/// `factor`, with a linear ramp between the two correction dimensions; and
/// queries and keys are scaled by `mscale` (0.1 ln(factor) + 1, over the
/// same for `mscale_all_dim`). As mlx-lm's `YarnRoPE`: the correction range
/// is rounded outwards (floor, ceil) and clipped to the features.
fn yarn(dims: i32, base: f32, s: &RopeScaling) -> Result<(Array, f32)> {
    let factor =
        s.factor.ok_or_else(|| Error::InvalidConfig("rope_scaling yarn needs `factor`".into()))?;
    let old_ctx = s.original_max_position_embeddings.unwrap_or(4096.0);
    let (beta_fast, beta_slow) = (s.beta_fast.unwrap_or(32.0), s.beta_slow.unwrap_or(1.0));
    let d = dims as f32;
    let correction = |rotations: f32| {
        d * (old_ctx / (rotations * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
    };
    let low = correction(beta_fast).floor().max(0.0);
    let high = correction(beta_slow).ceil().min(d - 1.0);
    let high = if low == high { high + 0.001 } else { high };
    let get_mscale = |m: f32| if factor <= 1.0 { 1.0 } else { 0.1 * m * factor.ln() + 1.0 };
    let mscale = get_mscale(s.mscale.unwrap_or(1.0)) / get_mscale(s.mscale_all_dim.unwrap_or(0.0));
    let freqs: Vec<f32> = (0..dims / 2)
        .map(|i| {
            let extra = base.powf(2.0 * i as f32 / d);
            let inter = factor * extra;
            let ramp = ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
            let keep = 1.0 - ramp;
            inter * extra / (inter * keep + extra * (1.0 - keep))
        })
        .collect();
    Ok((Array::from_slice(&freqs, &[dims / 2]), mscale))
}

/// Llama 3.1's scaling: long wavelengths are slowed by `factor`, short ones
/// kept, and the band in between interpolated smoothly.
fn llama3_freqs(dims: i32, base: f32, s: &RopeScaling) -> Result<Array> {
    let need = |v: Option<f32>, name: &str| {
        v.ok_or_else(|| Error::InvalidConfig(format!("rope_scaling llama3 needs `{name}`")))
    };
    let factor = need(s.factor, "factor")?;
    let low = need(s.low_freq_factor, "low_freq_factor")?;
    let high = need(s.high_freq_factor, "high_freq_factor")?;
    let old_ctx = need(s.original_max_position_embeddings, "original_max_position_embeddings")?;
    let low_wavelen = old_ctx / low;
    let high_wavelen = old_ctx / high;
    let freqs: Vec<f32> = (0..dims / 2)
        .map(|i| {
            let freq = base.powf(2.0 * i as f32 / dims as f32);
            let wavelen = 2.0 * std::f32::consts::PI * freq;
            if wavelen > low_wavelen {
                freq * factor
            } else if wavelen > high_wavelen {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                freq / ((1.0 - smooth) / factor + smooth)
            } else {
                freq
            }
        })
        .collect();
    Ok(Array::from_slice(&freqs, &[dims / 2]))
}
