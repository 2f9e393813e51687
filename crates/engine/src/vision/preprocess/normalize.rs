//! The step every image processor ends with: `x · rescale_factor`, then
//! `(x − mean) / std` per channel, as the checkpoint's processor config
//! says. It depends on nothing but the 8-bit level, so a processor computes
//! it once per level and maps each pixel through the table.
use serde_json::{Map, Value};

use super::triple;
use crate::error::{Error, Result};

/// Where the rescale is computed: the references differ, and the last bit
/// of a pixel value shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RescalePrecision {
    /// In float64, then rounded to float32 (transformers' PIL processors).
    Float64,
    /// In float32 (numpy multiplying a float32 image by a Python float).
    Float32,
}

/// A processor's rescale and normalization.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    pub rescale_factor: f64,
    pub precision: RescalePrecision,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    pub do_rescale: bool,
    pub do_normalize: bool,
}

impl Normalize {
    /// `x / 255`, then mean and std 0.5 on every channel: most processors'
    /// defaults.
    pub const fn halves(precision: RescalePrecision) -> Self {
        Self {
            rescale_factor: 1.0 / 255.0,
            precision,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            do_rescale: true,
            do_normalize: true,
        }
    }

    /// The 8-bit levels as they are (for tests that follow pixels through).
    pub const RAW: Self =
        Self { do_rescale: false, do_normalize: false, ..Self::halves(RescalePrecision::Float32) };

    /// `rescale_factor`, `image_mean`, `image_std`, `do_rescale` and
    /// `do_normalize` from a processor's merged settings, `defaults` for
    /// what they omit (a `rescale_factor` that is not a number or a flag
    /// that is not a boolean counts as omitted; a bad mean or std is an
    /// error, and so is a zero std, naming the `family`'s processor).
    pub fn read(raw: &Map<String, Value>, defaults: Self, family: &str) -> Result<Self> {
        let flag =
            |key: &str, default: bool| raw.get(key).and_then(Value::as_bool).unwrap_or(default);
        let n = Self {
            rescale_factor: raw
                .get("rescale_factor")
                .and_then(Value::as_f64)
                .unwrap_or(defaults.rescale_factor),
            precision: defaults.precision,
            image_mean: triple(raw, "image_mean")?.unwrap_or(defaults.image_mean),
            image_std: triple(raw, "image_std")?.unwrap_or(defaults.image_std),
            do_rescale: flag("do_rescale", defaults.do_rescale),
            do_normalize: flag("do_normalize", defaults.do_normalize),
        };
        if n.image_std.iter().any(|&s| s == 0.0 || !s.is_finite()) {
            return Err(Error::InvalidConfig(format!(
                "{family} image processor: image_std must be non-zero"
            )));
        }
        Ok(n)
    }

    /// The value of each 8-bit level per channel, in float32 as the
    /// reference computes it.
    pub fn levels(&self) -> Vec<[f32; 3]> {
        (0..256)
            .map(|v| {
                std::array::from_fn(|c| {
                    let mut x = v as f32;
                    if self.do_rescale {
                        x = match self.precision {
                            RescalePrecision::Float64 => (v as f64 * self.rescale_factor) as f32,
                            RescalePrecision::Float32 => x * self.rescale_factor as f32,
                        };
                    }
                    if self.do_normalize {
                        x = (x - self.image_mean[c]) / self.image_std[c];
                    }
                    x
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_rescale_rounds_where_its_reference_does() {
        // 1/255 in float64 and in float32 differ in the last bit of some levels
        let f64_levels =
            Normalize { do_normalize: false, ..Normalize::halves(RescalePrecision::Float64) };
        let f32_levels = Normalize { precision: RescalePrecision::Float32, ..f64_levels };
        let (a, b) = (f64_levels.levels(), f32_levels.levels());
        assert!((0..256).any(|v| a[v][0] != b[v][0]));
        for v in [0usize, 1, 128, 255] {
            assert_eq!(a[v][0], (v as f64 / 255.0) as f32);
            assert_eq!(b[v][0], v as f32 * (1.0f64 / 255.0) as f32);
        }
        // normalized: (x − 0.5) / 0.5 in float32
        let halves = Normalize::halves(RescalePrecision::Float32).levels();
        assert_eq!((halves[0], halves[255]), ([-1.0; 3], [(b[255][0] - 0.5) / 0.5; 3]));
    }

    #[test]
    fn settings_override_the_family_defaults() {
        let defaults = Normalize::halves(RescalePrecision::Float32);
        let raw = json!({"image_mean": [0.1, 0.2, 0.3], "image_std": 0.25, "do_normalize": false,
            "rescale_factor": "not a number"});
        let n = Normalize::read(raw.as_object().unwrap(), defaults, "Test").unwrap();
        assert_eq!((n.image_mean, n.image_std), ([0.1, 0.2, 0.3], [0.25; 3]));
        assert_eq!((n.rescale_factor, n.do_rescale, n.do_normalize), (1.0 / 255.0, true, false));
        let zero = json!({"image_std": [0.5, 0.0, 0.5]});
        let err = Normalize::read(zero.as_object().unwrap(), defaults, "Test").unwrap_err();
        assert!(err.to_string().contains("Test image processor: image_std"), "{err}");
        let bad = json!({"image_mean": [0.5, 0.5]});
        assert!(Normalize::read(bad.as_object().unwrap(), defaults, "Test").is_err());
    }
}
