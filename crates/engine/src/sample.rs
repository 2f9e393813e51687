//! Turning logits into the next token: greedy, or temperature sampling with
//! top-k, top-p, min-p, repetition penalty, logit bias and a per-request seed.
//!
//! Everything stays lazy on MLX arrays: the sampled token is read back once,
//! by the caller, after the next step has been queued.
use std::collections::BTreeMap;

use mlx_rs::{
    ops::{
        self,
        indexing::{argmax_axis, put_along_axis, take_along_axis, IndexOp},
    },
    random, Array,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod greedy_rows;
mod logit_bias;
pub use greedy_rows::greedy_rows;
pub use logit_bias::LogitBias;

/// Per-request sampling settings. The defaults are greedy decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// Nucleus sampling: keep the smallest set of tokens whose probability
    /// reaches `top_p`. 1.0 disables it.
    pub top_p: f32,
    /// Keep only the `top_k` most likely tokens. 0 disables it.
    pub top_k: i32,
    /// Drop tokens less likely than `min_p` × the most likely one. 0 disables it.
    pub min_p: f32,
    /// > 1 discourages tokens seen in the last `repetition_context` tokens. 1.0 disables it.
    pub repetition_penalty: f32,
    pub repetition_context: usize,
    /// Fixes the random stream of this request (same seed, same output).
    pub seed: Option<u64>,
    /// Added to the logits of the given token ids before sampling.
    pub logit_bias: BTreeMap<u32, f32>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repetition_context: 64,
            seed: None,
            logit_bias: BTreeMap::new(),
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self::default()
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Rejects values that would make sampling meaningless or crash it.
    pub fn validate(&self, vocab_size: i32) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidRequest(m));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(format!("temperature must be >= 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if self.top_k < 0 {
            return bad(format!("top_k must be >= 0, got {}", self.top_k));
        }
        if !(0.0..1.0).contains(&self.min_p) {
            return bad(format!("min_p must be in [0, 1), got {}", self.min_p));
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return bad(format!("repetition_penalty must be > 0, got {}", self.repetition_penalty));
        }
        if let Some((&id, _)) =
            self.logit_bias.iter().find(|(&id, _)| id as i64 >= vocab_size as i64)
        {
            return bad(format!(
                "logit_bias names token {id}, outside the vocabulary of {vocab_size}"
            ));
        }
        if let Some((id, b)) =
            self.logit_bias.iter().find(|(_, b)| !b.is_finite() && **b != f32::NEG_INFINITY)
        {
            return bad(format!("logit_bias for token {id} is {b}"));
        }
        Ok(())
    }
}

/// The sampling state of one sequence: its parameters and its random key.
pub struct Sampler {
    params: SamplingParams,
    /// Split on every sampled token, so a seeded request gives the same tokens
    /// whatever else runs beside it.
    key: Option<Array>,
    /// `params.logit_bias` as arrays, built once.
    bias: Option<LogitBias>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Self> {
        let key = if params.is_greedy() {
            None
        } else {
            let seed = params.seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0)
            });
            Some(random::key(seed)?)
        };
        let bias = LogitBias::new(&params.logit_bias);
        Ok(Self { params, key, bias })
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The request's logit bias, built once (`None`: it has none).
    pub fn logit_bias(&self) -> Option<&LogitBias> {
        self.bias.as_ref()
    }

    /// Samples from `logits` `[1, vocab]` given the tokens so far; returns a
    /// lazy `[1]` int32 array. `pending` is the previous sampled token when it
    /// has not been read back yet (decoding queues a step ahead); it counts as
    /// history for the repetition penalty.
    pub fn sample(
        &mut self,
        logits: &Array,
        history: &[u32],
        pending: Option<&Array>,
    ) -> Result<Array> {
        let logits = self.adjusted(logits, history, pending)?;
        if self.key.is_none() {
            return Ok(argmax_axis(&logits, -1, false)?.as_dtype(mlx_rs::Dtype::Int32)?);
        }
        let sub = self.next_key()?;
        let logprobs = self.filtered_logprobs(&logits)?;
        Ok(random::categorical(&logprobs, -1, None, &sub)?.as_dtype(mlx_rs::Dtype::Int32)?)
    }

    /// Speculative sampling against a draft proposed without randomness
    /// (prompt lookup, a greedy draft model). `logits` `[n + 1, vocab]` were
    /// computed after the row's last token and after each of the `n`
    /// `drafts`. Draft `j` is kept with the probability this sampler gives
    /// it there; the first one refused is replaced by a draw from that
    /// position's distribution without it (renormalised); after `n` kept
    /// drafts a bonus token is drawn at the last position. This is the
    /// standard rejection rule with a one-hot proposal: the tokens follow
    /// this sampler's distribution exactly. Returns, lazily, which drafts
    /// were kept (`[n]` bool), the replacements (`[n]` int32) and the bonus
    /// (`[1]` int32). For sampling rows only (greedy rows compare argmaxes).
    pub fn verify_drafts(
        &mut self,
        logits: &Array,
        history: &[u32],
        drafts: &[u32],
    ) -> Result<(Array, Array, Array)> {
        assert!(self.key.is_some(), "verify_drafts is for sampling rows");
        let n = drafts.len() as i32;
        assert_eq!(logits.dim(0), n + 1, "a position after each draft");
        let mut history = history.to_vec();
        let mut positions = Vec::with_capacity(drafts.len() + 1);
        for j in 0..=n {
            let at = self.adjusted(&logits.index(j..j + 1), &history, None)?;
            positions.push(self.filtered_logprobs(&at)?);
            if let Some(&d) = drafts.get(j as usize) {
                history.push(d);
            }
        }
        let logprobs = ops::concatenate(&positions, 0)?;
        // Three independent draws: the acceptance tests, the replacements, the bonus.
        let (accept_key, rest) = random::split(&self.next_key()?, 2)?;
        let (replace_key, bonus_key) = random::split(&rest, 2)?;
        let drafted = logprobs.index(0..n);
        let ids: Vec<i32> = drafts.iter().map(|&d| d as i32).collect();
        let ids = Array::from_slice(&ids, &[n, 1]);
        let p_draft = take_along_axis(&drafted, &ids, -1)?.exp()?.reshape(&[n])?;
        let draws = random::uniform::<_, f32>(0.0, 1.0, &[n][..], &accept_key)?;
        let kept = draws.lt(&p_draft)?;
        let fill = ops::broadcast_to(neg_inf(), &[n, 1])?;
        let without_draft = put_along_axis(&drafted, &ids, &fill, -1)?;
        let replacements = random::categorical(&without_draft, -1, None, &replace_key)?
            .as_dtype(mlx_rs::Dtype::Int32)?;
        let bonus = random::categorical(logprobs.index(n..n + 1), -1, None, &bonus_key)?
            .as_dtype(mlx_rs::Dtype::Int32)?;
        Ok((kept, replacements, bonus))
    }

    /// The logits with the repetition penalty and logit bias applied (float32).
    fn adjusted(&self, logits: &Array, history: &[u32], pending: Option<&Array>) -> Result<Array> {
        let mut logits = logits.as_dtype(mlx_rs::Dtype::Float32)?;
        if self.params.repetition_penalty != 1.0 && !(history.is_empty() && pending.is_none()) {
            logits = self.penalize_repeats(&logits, history, pending)?;
        }
        if let Some(bias) = &self.bias {
            logits = bias.add_to_row(&logits)?;
        }
        Ok(logits)
    }

    /// A fresh key for one draw; the stream moves on.
    fn next_key(&mut self) -> Result<Array> {
        let key = self.key.take().expect("a sampling row has a key");
        let (next_key, sub) = random::split(&key, 2)?;
        self.key = Some(next_key);
        Ok(sub)
    }

    /// What a sampling row draws from: adjusted logits `[1, vocab]` →
    /// log-probabilities at the temperature, cut by top-k, min-p and top-p.
    fn filtered_logprobs(&self, logits: &Array) -> Result<Array> {
        let mut logprobs = logits.multiply(Array::from_f32(1.0 / self.params.temperature))?;
        logprobs = logprobs.subtract(logprobs.logsumexp_axis(-1, true)?)?;
        if self.params.top_k > 0 && self.params.top_k < logprobs.dim(-1) {
            logprobs = apply_top_k(&logprobs, self.params.top_k)?;
        }
        if self.params.min_p > 0.0 {
            logprobs = apply_min_p(&logprobs, self.params.min_p)?;
        }
        if self.params.top_p < 1.0 {
            logprobs = apply_top_p(&logprobs, self.params.top_p)?;
        }
        Ok(logprobs)
    }

    fn penalize_repeats(
        &self,
        logits: &Array,
        history: &[u32],
        pending: Option<&Array>,
    ) -> Result<Array> {
        let window = self.params.repetition_context.saturating_sub(pending.is_some() as usize);
        let start = history.len().saturating_sub(window);
        let mut ids: Vec<i32> = history[start..].iter().map(|&t| t as i32).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut ids = Array::from_slice(&ids, &[1, ids.len() as i32]);
        if let Some(p) = pending {
            // A duplicate index is harmless: both writes carry the same value.
            ids = ops::concatenate(&[ids, p.reshape(&[1, 1])?.as_dtype(mlx_rs::Dtype::Int32)?], 1)?;
        }
        let seen = take_along_axis(logits, &ids, -1)?;
        let p = Array::from_f32(self.params.repetition_penalty);
        // A penalty shrinks positive logits and grows negative ones.
        let penalized =
            ops::select(seen.lt(Array::from_f32(0.0))?, seen.multiply(&p)?, seen.divide(&p)?)?;
        Ok(put_along_axis(logits, &ids, &penalized, -1)?)
    }
}

/// `logits` with every token outside `allowed` (`[1, vocab]` bool) at -inf:
/// a structured answer's grammar, applied before any sampling step.
pub fn keep_allowed(logits: &Array, allowed: &Array) -> Result<Array> {
    Ok(ops::select(allowed, logits, neg_inf())?)
}

fn neg_inf() -> Array {
    Array::from_f32(f32::NEG_INFINITY)
}

fn apply_top_k(logprobs: &Array, k: i32) -> Result<Array> {
    let vocab = logprobs.dim(-1);
    let order = ops::argpartition_axis(logprobs.negative()?, k - 1, -1)?;
    let dropped = order.index((.., k..vocab));
    let fill = ops::broadcast_to(neg_inf(), dropped.shape())?;
    Ok(put_along_axis(logprobs, &dropped, &fill, -1)?)
}

fn apply_min_p(logprobs: &Array, min_p: f32) -> Result<Array> {
    let threshold = logprobs.max_axis(-1, true)?.add(Array::from_f32(min_p.ln()))?;
    Ok(ops::select(logprobs.lt(&threshold)?, neg_inf(), logprobs)?)
}

fn apply_top_p(logprobs: &Array, top_p: f32) -> Result<Array> {
    let order = ops::argsort_axis(logprobs, -1)?; // ascending
    let sorted = take_along_axis(logprobs, &order, -1)?.exp()?;
    let cumulative = sorted.cumsum(-1, None, None)?;
    // Keep the tokens whose cumulative mass (from the least likely up) passes
    // 1 - top_p: the most likely ones that together reach top_p.
    let keep_sorted = cumulative.gt(Array::from_f32(1.0 - top_p))?;
    let sorted_logprobs = take_along_axis(logprobs, &order, -1)?;
    let kept = ops::select(&keep_sorted, &sorted_logprobs, neg_inf())?;
    Ok(put_along_axis(logprobs, &order, &kept, -1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(v: &[f32]) -> Array {
        Array::from_slice(v, &[1, v.len() as i32])
    }

    fn draw(s: &mut Sampler, l: &Array) -> i32 {
        let t = s.sample(l, &[], None).unwrap();
        t.eval().unwrap();
        t.as_slice::<i32>()[0]
    }

    /// Pearson's statistic of `counts` against `probs`.
    fn chi_square(counts: &[usize], probs: &[f64]) -> f64 {
        let n: usize = counts.iter().sum();
        counts
            .iter()
            .zip(probs)
            .map(|(&c, &p)| {
                let e = p * n as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    fn softmax(v: &[f32], t: f32) -> Vec<f64> {
        let e: Vec<f64> = v.iter().map(|&x| ((x / t) as f64).exp()).collect();
        let z: f64 = e.iter().sum();
        e.into_iter().map(|x| x / z).collect()
    }

    /// The rejection rule keeps the sampler's distribution: over many
    /// draws, the first token emitted after a one-token draft (the draft if
    /// kept, else the replacement) and the token after a kept draft follow
    /// the target's probabilities at those positions, within a chi-square
    /// bound (4 degrees of freedom, p = 0.001: 18.47). A rule that always
    /// kept the draft, or never, would miss it by far.
    #[test]
    fn verified_drafts_follow_the_samplers_distribution() {
        let first = [1.0f32, 0.2, -0.5, 0.7, 0.0];
        let second = [-1.0f32, 0.5, 0.9, 0.1, 0.3];
        let mut flat = first.to_vec();
        flat.extend(second);
        let logits = Array::from_slice(&flat, &[2, 5]);
        let p = SamplingParams { temperature: 0.8, seed: Some(7), ..Default::default() };
        let mut s = Sampler::new(p).unwrap();
        let (draws, draft) = (4000, 3u32);
        let (mut at_first, mut after_kept) = (vec![0usize; 5], vec![0usize; 5]);
        let mut kept_count = 0;
        for _ in 0..draws {
            let (kept, replacements, bonus) = s.verify_drafts(&logits, &[], &[draft]).unwrap();
            mlx_rs::transforms::eval([&kept, &replacements, &bonus]).unwrap();
            if kept.as_slice::<bool>()[0] {
                kept_count += 1;
                at_first[draft as usize] += 1;
                after_kept[bonus.as_slice::<i32>()[0] as usize] += 1;
            } else {
                let r = replacements.as_slice::<i32>()[0] as usize;
                assert_ne!(r, draft as usize, "a replacement is never the refused draft");
                at_first[r] += 1;
            }
        }
        let (p1, p2) = (softmax(&first, 0.8), softmax(&second, 0.8));
        let (c1, c2) = (chi_square(&at_first, &p1), chi_square(&after_kept, &p2));
        assert!(c1 < 18.47, "first token {at_first:?} vs {p1:?}: chi-square {c1}");
        assert!(c2 < 18.47, "after a kept draft {after_kept:?} vs {p2:?}: chi-square {c2}");
        let kept_share = kept_count as f64 / draws as f64;
        assert!((kept_share - p1[draft as usize]).abs() < 0.03, "kept {kept_share} of the drafts");
    }

    /// With top-k the draft is judged against the cut distribution: a draft
    /// outside the top k is never kept, and replacements stay inside it.
    #[test]
    fn a_draft_outside_top_k_is_always_replaced() {
        let logits =
            Array::from_slice(&[2.0f32, 1.5, -3.0, 1.0, -2.0, 0.0, 0.5, 0.1, 0.3, 0.2], &[2, 5]);
        let p = SamplingParams { temperature: 1.0, top_k: 2, seed: Some(1), ..Default::default() };
        let mut s = Sampler::new(p).unwrap();
        for _ in 0..200 {
            let (kept, replacements, _) = s.verify_drafts(&logits, &[], &[2]).unwrap();
            mlx_rs::transforms::eval([&kept, &replacements]).unwrap();
            assert!(!kept.as_slice::<bool>()[0]);
            assert!([0, 1].contains(&replacements.as_slice::<i32>()[0]));
        }
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(draw(&mut s, &logits(&[0.1, 3.0, -1.0, 2.9])), 1);
    }

    #[test]
    fn top_k_one_is_greedy_even_when_hot() {
        let p = SamplingParams { temperature: 5.0, top_k: 1, seed: Some(3), ..Default::default() };
        let mut s = Sampler::new(p).unwrap();
        for _ in 0..20 {
            assert_eq!(draw(&mut s, &logits(&[0.1, 3.0, -1.0, 2.9])), 1);
        }
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // probabilities ~ [0.0003, 0.5, 0.0001, 0.5]: top_p 0.6 keeps ids 1 and 3
        let p =
            SamplingParams { temperature: 1.0, top_p: 0.6, seed: Some(1), ..Default::default() };
        let mut s = Sampler::new(p).unwrap();
        let l = logits(&[-5.0, 3.0, -6.0, 3.0]);
        let draws: Vec<i32> = (0..60).map(|_| draw(&mut s, &l)).collect();
        assert!(draws.iter().all(|&t| t == 1 || t == 3), "{draws:?}");
        assert!(draws.contains(&1) && draws.contains(&3), "{draws:?}");
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        let p =
            SamplingParams { temperature: 1.0, min_p: 0.5, seed: Some(2), ..Default::default() };
        let mut s = Sampler::new(p).unwrap();
        let l = logits(&[0.0, 2.0, 1.9, -3.0]);
        for _ in 0..40 {
            let t = draw(&mut s, &l);
            assert!(t == 1 || t == 2, "{t}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let p = SamplingParams { temperature: 1.0, seed: Some(42), ..Default::default() };
        let l = logits(&[0.5, 0.4, 0.3, 0.2, 0.1]);
        let mut a = Sampler::new(p.clone()).unwrap();
        let mut b = Sampler::new(p).unwrap();
        let da: Vec<i32> = (0..30).map(|_| draw(&mut a, &l)).collect();
        let db: Vec<i32> = (0..30).map(|_| draw(&mut b, &l)).collect();
        assert_eq!(da, db);
        assert!(
            da.iter().collect::<std::collections::HashSet<_>>().len() > 1,
            "not random: {da:?}"
        );
    }

    #[test]
    fn repetition_penalty_and_logit_bias_change_the_argmax() {
        let p = SamplingParams { repetition_penalty: 2.0, ..Default::default() };
        let mut s = Sampler::new(p).unwrap();
        let t = s.sample(&logits(&[1.0, 3.0, 2.0]), &[1], None).unwrap();
        t.eval().unwrap();
        assert_eq!(t.as_slice::<i32>()[0], 2); // 3.0 / 2 = 1.5 < 2.0

        let mut bias = BTreeMap::new();
        bias.insert(0, 10.0);
        let mut s =
            Sampler::new(SamplingParams { logit_bias: bias, ..Default::default() }).unwrap();
        assert_eq!(draw(&mut s, &logits(&[1.0, 3.0, 2.0])), 0);
    }

    #[test]
    fn bad_parameters_are_rejected() {
        let v = 10;
        assert!(SamplingParams { temperature: -1.0, ..Default::default() }.validate(v).is_err());
        assert!(SamplingParams { top_p: 0.0, ..Default::default() }.validate(v).is_err());
        assert!(SamplingParams { min_p: 1.5, ..Default::default() }.validate(v).is_err());
        let mut bias = BTreeMap::new();
        bias.insert(99, 1.0);
        let err =
            SamplingParams { logit_bias: bias, ..Default::default() }.validate(v).unwrap_err();
        assert_eq!(err.code(), "INVALID_REQUEST");
        assert!(SamplingParams::default().validate(v).is_ok());
    }
}
