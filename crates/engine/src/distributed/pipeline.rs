//! Pipeline parallelism (as mlx-lm's `pipeline`): the decoder's layers in
//! contiguous stages, one per rank, sized by their bytes; the hidden states
//! go from stage to stage with `send`/`recv`. Unlike tensor parallelism it
//! works for every family (a family only runs its own range of layers) and
//! any number of ranks, and it exchanges one `[rows, len, hidden]` array per
//! rank per pass instead of two `all_sum`s per layer: the better split over
//! Ethernet, where each message costs a round trip.
//!
//! Each stage's share of the bytes follows the memory its rank offers
//! ([`super::GroupConfig::stage_memory`], gathered from every rank at load):
//! a Mac with twice the memory runs twice the layers; a stage whose weights
//! alone exceed its rank's memory is refused at load, on every rank.
//!
//! Stages run in reverse rank order, as in mlx-lm: the last rank holds the
//! first layers and rank 0 the last ones, so the final hidden states end on
//! rank 0, which alone computes logits and samples. Each rank sends only to
//! its ring neighbour `rank - 1`. The token ids reach the first stage inside
//! the pass (the `all_sum` every split model already uses).
//!
//! The embedding table is read only where it is used (MLX loads lazily):
//! by the first stage, which embeds, and by rank 0 when its output head is
//! tied to it; the other stages take only the shape of their input from it.
//! Each rank keeps only its own layers' caches
//! (the cache layout stays the whole model's, so rows, columns and
//! quantization match rank 0's; the other layers' slots stay empty).
use std::ops::Range;
use std::rc::Rc;

use mlx_rs::Array;

use super::group::Group;
use super::ops;
use crate::{Error, Result};

/// This process's part of a pipeline-parallel model: which rank of which
/// group it is (the layers come from [`Pipeline::stage`]).
#[derive(Clone)]
pub struct Pipeline {
    group: Rc<Group>,
    /// The bytes this rank offers the model; `None`: unknown (every rank
    /// then gets an equal share).
    memory: Option<u64>,
}

impl Pipeline {
    /// A pipeline over every rank of `group`, each rank's stage sized in
    /// proportion to the memory it offers (`memory`; equal shares unless
    /// every rank says).
    pub fn new(group: Rc<Group>, memory: Option<u64>) -> Pipeline {
        Pipeline { group, memory }
    }

    pub fn group(&self) -> &Rc<Group> {
        &self.group
    }

    /// The stage rank `rank` runs (the last rank runs stage 0).
    fn stage_of(&self, rank: usize) -> usize {
        self.group.size() - 1 - rank
    }

    /// This rank's stage of a decoder whose layer `i` holds `layer_bytes[i]`
    /// bytes; `keep_together`: layers that must run on one rank (Gemma 4's
    /// KV-shared layers and the layers they read).
    pub fn stage(
        &self,
        layer_bytes: &[u64],
        keep_together: Option<Range<usize>>,
    ) -> Result<StageLayers> {
        let size = self.group.size();
        // Every rank's offer, by rank (a collective: every rank loads alike).
        let own = [self.memory.unwrap_or(0) as i64];
        let all = ops::all_gather(&Array::from_slice(&own, &[1]), &self.group)?;
        all.eval()?;
        let memory: Vec<u64> = all.as_slice::<i64>().iter().map(|&m| m.max(0) as u64).collect();
        let known = memory.iter().all(|&m| m > 0);
        let shares: Vec<f64> = (0..size)
            .map(|stage| if known { memory[size - 1 - stage] as f64 } else { 1.0 })
            .collect();
        let stages = plan(layer_bytes, &shares, keep_together)?;
        if known {
            for (stage, layers) in stages.iter().enumerate() {
                let rank = size - 1 - stage;
                let need: u64 = layer_bytes[layers.clone()].iter().sum();
                if need > memory[rank] {
                    return Err(Error::InvalidConfig(format!(
                        "rank {rank}'s layers {}..{} need {:.1} GB of weights, and it offers {:.1} GB: add a machine, or free memory on that one",
                        layers.start,
                        layers.end,
                        need as f64 / 1e9,
                        memory[rank] as f64 / 1e9
                    )));
                }
            }
        }
        let layers = stages[self.stage_of(self.group.rank())].clone();
        Ok(StageLayers { layers, total: layer_bytes.len(), link: Some(self.clone()) })
    }
}

/// Contiguous ranges of layers, one per stage, in order: stage `s` near
/// `shares[s] / sum(shares)` of the bytes (each holds at least one layer).
pub fn plan(
    layer_bytes: &[u64],
    shares: &[f64],
    keep_together: Option<Range<usize>>,
) -> Result<Vec<Range<usize>>> {
    let (n, stages) = (layer_bytes.len(), shares.len());
    if stages == 0 || n < stages {
        return Err(Error::InvalidConfig(format!(
            "{n} layers cannot be split into {stages} pipeline stages"
        )));
    }
    let mut prefix = vec![0u64; n + 1];
    for (i, b) in layer_bytes.iter().enumerate() {
        prefix[i + 1] = prefix[i] + b.max(&1);
    }
    let total = prefix[n] as f64;
    let all_shares: f64 = shares.iter().sum();
    let mut bounds = vec![0usize];
    for k in 1..stages {
        let target = total * shares[..k].iter().sum::<f64>() / all_shares;
        // Room for the stages before and after: one layer each at least.
        let (low, high) = (bounds[k - 1] + 1, n - (stages - k));
        let mut best = (low..=high)
            .min_by(|&a, &b| {
                (prefix[a] as f64 - target).abs().total_cmp(&(prefix[b] as f64 - target).abs())
            })
            .expect("low <= high: n >= stages");
        if let Some(together) = &keep_together {
            if together.start < best && best < together.end {
                best = together.start;
            }
        }
        if best < low {
            return Err(Error::InvalidConfig(format!(
                "layers {}..{} must run on one rank: {n} layers cannot make {stages} pipeline stages around them",
                keep_together.as_ref().map_or(0, |r| r.start),
                keep_together.as_ref().map_or(0, |r| r.end),
            )));
        }
        bounds.push(best);
    }
    bounds.push(n);
    Ok(bounds.windows(2).map(|w| w[0]..w[1]).collect())
}

/// The decoder layers this process runs, and how hidden states reach and
/// leave them. A whole model runs every layer and has no link.
#[derive(Clone)]
pub struct StageLayers {
    layers: Range<usize>,
    total: usize,
    link: Option<Pipeline>,
}

impl StageLayers {
    /// Every one of `total` layers, in this process.
    pub fn whole(total: usize) -> StageLayers {
        StageLayers { layers: 0..total, total, link: None }
    }

    /// The layers this process runs.
    pub fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    /// Whether this process runs every layer (no pipeline split).
    pub fn is_whole(&self) -> bool {
        self.layers.len() == self.total
    }

    /// Whether layer `i` runs here.
    pub fn runs(&self, i: usize) -> bool {
        self.layers.contains(&i)
    }

    /// The model's number of layers (every stage's).
    pub fn total(&self) -> usize {
        self.total
    }

    /// Whether this process computes the final hidden states (rank 0, or
    /// the whole model).
    pub fn is_last(&self) -> bool {
        self.link.as_ref().is_none_or(|p| p.group.rank() == 0)
    }

    /// The hidden states this stage starts from: `embedded` on the first
    /// stage, else the previous stage's output, shaped like `embedded` and
    /// received after the pass's shared `tokens` (so the collectives that
    /// lead to them run first on every rank). A later stage never computes
    /// `embedded`, so it never reads the embedding table (with an untied
    /// output head, rank 0 holds none of it).
    pub fn enter(&self, embedded: Array, tokens: &Array) -> Result<Array> {
        match &self.link {
            Some(p) if p.stage_of(p.group.rank()) > 0 => {
                let received = ops::recv_like(&embedded, p.group.rank() + 1, &p.group)?;
                ops::after(&received, &[tokens])
            }
            _ => Ok(embedded),
        }
    }

    /// What this stage's forward pass returns: `finish(hidden)` (the final
    /// norm) on the last stage, else `hidden` sent on to the next stage
    /// (evaluating the result sends it).
    pub fn leave(
        &self,
        hidden: Array,
        finish: impl FnOnce(&Array) -> Result<Array>,
    ) -> Result<Array> {
        match &self.link {
            Some(p) if p.group.rank() > 0 => ops::send(&hidden, p.group.rank() - 1, &p.group),
            _ => finish(&hidden),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn stages_split_by_bytes_not_by_count() {
        assert_eq!(plan(&[1; 8], &[1.0; 2], None).unwrap(), vec![0..4, 4..8]);
        assert_eq!(plan(&[1; 9], &[1.0; 3], None).unwrap(), vec![0..3, 3..6, 6..9]);
        // A heavy first layer: the first stage takes fewer layers.
        assert_eq!(plan(&[6, 1, 1, 1, 1, 1, 1], &[1.0; 2], None).unwrap(), vec![0..1, 1..7]);
        // Every stage keeps a layer, however heavy the last one.
        assert_eq!(plan(&[1, 1, 100], &[1.0; 3], None).unwrap(), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn a_stage_with_more_memory_runs_more_layers() {
        // 64 GB and 32 GB: two thirds and one third.
        assert_eq!(plan(&[1; 12], &[64.0, 32.0], None).unwrap(), vec![0..8, 8..12]);
        assert_eq!(plan(&[1; 12], &[16.0, 32.0, 16.0], None).unwrap(), vec![0..3, 3..9, 9..12]);
    }

    #[test]
    fn layers_kept_together_stay_on_one_stage() {
        assert_eq!(plan(&[1; 8], &[1.0; 2], Some(2..8)).unwrap(), vec![0..2, 2..8]);
        assert_eq!(plan(&[1; 8], &[1.0; 2], Some(5..8)).unwrap(), vec![0..4, 4..8]);
        let err = plan(&[1; 4], &[1.0; 2], Some(0..4)).unwrap_err();
        assert!(err.to_string().contains("layers 0..4 must run on one rank"), "{err}");
    }

    #[test]
    fn fewer_layers_than_stages_is_refused() {
        let err = plan(&[1; 2], &[1.0; 3], None).unwrap_err();
        assert!(
            err.to_string().contains("2 layers cannot be split into 3 pipeline stages"),
            "{err}"
        );
    }
}
