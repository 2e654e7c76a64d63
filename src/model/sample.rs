//! [`Sampler`]: picks the next token from a row of logits — greedy, or random with temperature,
//! top-k, top-p (nucleus) and a repetition penalty, from a seeded PCG stream.
//!
//! The processing order is Hugging Face `generate`'s: repetition penalty, then temperature,
//! then top-k, then top-p, then a draw from what is left. Every buffer is allocated once in
//! [`Sampler::new`] (sized by the vocabulary), so [`Sampler::sample`] never allocates. The
//! same seed, configuration and logits always give the same tokens, on every platform (the
//! RNG is `rand_pcg::Pcg64`, ties between equal logits go to the lower token id).

use alloc::vec::Vec;
use core::cmp::Ordering;

use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg64;

use crate::error::{Error, Result};

/// How [`Sampler`] chooses tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature; `0` means greedy (argmax). Must be finite and `>= 0`.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; `0` keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`;
    /// `1.0` keeps all. Must be in `(0, 1]`.
    pub top_p: f32,
    /// Hugging Face's repetition penalty: a token already seen (prompt or generated) has its
    /// logit divided by this if positive, multiplied if negative. `1.0` is off; must be > 0.
    pub repetition_penalty: f32,
    /// Seed of the random stream.
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// Greedy decoding: temperature 0, no top-k / top-p, no penalty, seed 0.
    fn default() -> Self {
        SamplerConfig { temperature: 0.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, seed: 0 }
    }
}

impl SamplerConfig {
    /// Greedy decoding (the default).
    pub fn greedy() -> Self {
        Self::default()
    }

    fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Error::invalid_argument(format_args!(
                "sampler: temperature must be finite and >= 0, got {}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::invalid_argument(format_args!(
                "sampler: top_p must be in (0, 1], got {}",
                self.top_p
            )));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(Error::invalid_argument(format_args!(
                "sampler: repetition_penalty must be finite and > 0, got {}",
                self.repetition_penalty
            )));
        }
        Ok(())
    }
}

/// A candidate token: its (processed) logit, later its probability weight.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    value: f32,
    id: u32,
}

/// Most likely first; ties (and NaN, which sorts as the least likely) broken by the lower id.
fn by_likelihood(a: &Candidate, b: &Candidate) -> Ordering {
    let (x, y) = (nan_low(a.value), nan_low(b.value));
    y.total_cmp(&x).then(a.id.cmp(&b.id))
}

fn nan_low(v: f32) -> f32 {
    if v.is_nan() {
        f32::NEG_INFINITY
    } else {
        v
    }
}

/// How many top candidates top-p first tries before sorting the whole vocabulary.
const TOP_P_PREFIX: usize = 256;

/// Chooses tokens from logits; see the module docs.
///
/// ```
/// use rml::model::sample::{Sampler, SamplerConfig};
/// let mut s = Sampler::new(SamplerConfig::greedy(), 4).unwrap();
/// assert_eq!(s.sample(&[0.1, 2.0, -1.0, 1.5]).unwrap(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct Sampler {
    config: SamplerConfig,
    rng: Pcg64,
    vocab: usize,
    candidates: Vec<Candidate>,
    /// One bit per token id: seen in the prompt or generated.
    seen_bits: Vec<u64>,
    /// The distinct seen ids, in first-seen order (capacity `vocab`, never grows past it).
    seen: Vec<u32>,
}

impl Sampler {
    /// A sampler for a vocabulary of `vocab` tokens.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for `vocab == 0`, a vocabulary past `u32`, or a
    /// configuration value out of range (named in the message);
    /// [`crate::Code::ResourceExhausted`] if the buffers cannot be allocated.
    pub fn new(config: SamplerConfig, vocab: usize) -> Result<Self> {
        config.validate()?;
        if vocab == 0 || vocab > u32::MAX as usize {
            return Err(Error::invalid_argument(format_args!(
                "sampler: vocabulary size {vocab} is not in 1..=u32::MAX"
            )));
        }
        let mut candidates = Vec::new();
        let mut seen = Vec::new();
        let mut seen_bits = Vec::new();
        let oom = |_| Error::resource_exhausted(format_args!("sampler: {vocab}-token buffers"));
        candidates.try_reserve_exact(vocab).map_err(oom)?;
        seen.try_reserve_exact(vocab).map_err(oom)?;
        seen_bits.try_reserve_exact(vocab.div_ceil(64)).map_err(oom)?;
        seen_bits.resize(vocab.div_ceil(64), 0);
        Ok(Sampler {
            rng: Pcg64::seed_from_u64(config.seed),
            config,
            vocab,
            candidates,
            seen_bits,
            seen,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Forgets the seen tokens and restarts the random stream from the seed.
    pub fn reset(&mut self) {
        self.rng = Pcg64::seed_from_u64(self.config.seed);
        self.seen.clear();
        self.seen_bits.fill(0);
    }

    /// Records `tokens` as seen (the prompt), for the repetition penalty. [`Sampler::sample`]
    /// records the tokens it returns by itself.
    ///
    /// # Errors
    ///
    /// [`crate::Code::OutOfRange`] naming the first id `>= vocab`; the ids before it are
    /// recorded.
    pub fn record(&mut self, tokens: &[u32]) -> Result<()> {
        for &t in tokens {
            if t as usize >= self.vocab {
                return Err(Error::out_of_range(format_args!(
                    "sampler: token id {t} is past the vocabulary of {}",
                    self.vocab
                )));
            }
            self.mark(t);
        }
        Ok(())
    }

    fn mark(&mut self, t: u32) {
        let (word, bit) = (t as usize / 64, 1u64 << (t % 64));
        if self.seen_bits[word] & bit == 0 {
            self.seen_bits[word] |= bit;
            // Never reallocates: at most `vocab` distinct ids, and the capacity is `vocab`.
            self.seen.push(t);
        }
    }

    fn penalised(&self, id: usize, logit: f32) -> f32 {
        let p = self.config.repetition_penalty;
        if p != 1.0 && self.seen_bits[id / 64] & (1u64 << (id % 64)) != 0 {
            if logit > 0.0 {
                logit / p
            } else {
                logit * p
            }
        } else {
            logit
        }
    }

    /// Picks the next token from `logits` (one per vocabulary entry) and records it as seen.
    /// NaN logits count as `-inf`. Allocates nothing.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `logits.len()` is not the vocabulary size.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        if logits.len() != self.vocab {
            return Err(Error::invalid_argument(format_args!(
                "sampler: {} logits for a vocabulary of {}",
                logits.len(),
                self.vocab
            )));
        }
        let id =
            if self.config.temperature == 0.0 { self.argmax(logits) } else { self.draw(logits) };
        self.mark(id);
        Ok(id)
    }

    fn argmax(&self, logits: &[f32]) -> u32 {
        let mut best = Candidate { value: f32::NEG_INFINITY, id: 0 };
        for (i, &l) in logits.iter().enumerate() {
            let c = Candidate { value: self.penalised(i, l), id: i as u32 };
            if by_likelihood(&c, &best) == Ordering::Less {
                best = c;
            }
        }
        best.id
    }

    fn draw(&mut self, logits: &[f32]) -> u32 {
        let inv_t = 1.0 / self.config.temperature;
        let mut cands = core::mem::take(&mut self.candidates);
        cands.clear();
        // Never reallocates: capacity is `vocab` and there are `vocab` logits.
        cands.extend(logits.iter().enumerate().map(|(i, &l)| Candidate {
            value: nan_low(self.penalised(i, l)) * inv_t,
            id: i as u32,
        }));
        let id = self.draw_from(&mut cands);
        self.candidates = cands;
        id
    }

    fn draw_from(&mut self, cands: &mut Vec<Candidate>) -> u32 {
        let k = self.config.top_k;
        if k > 0 && k < cands.len() {
            cands.select_nth_unstable_by(k - 1, by_likelihood);
            cands.truncate(k);
        }
        let max = cands.iter().map(|c| c.value).fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY || max.is_nan() {
            // Nothing is possible (every logit -inf): fall back to the lowest id.
            return cands.iter().map(|c| c.id).min().unwrap_or(0);
        }
        let mut total = 0f64;
        for c in cands.iter_mut() {
            c.value = crate::ops::expf(c.value - max);
            total += c.value as f64;
        }
        let mut keep = cands.len();
        let top_p = self.config.top_p;
        if top_p < 1.0 {
            let target = top_p as f64 * total;
            // Exact shortcut: if the best few already reach the target, the nucleus lies
            // inside them and only they need sorting.
            let m = TOP_P_PREFIX.min(cands.len());
            if m < cands.len() {
                cands.select_nth_unstable_by(m - 1, by_likelihood);
            }
            cands[..m].sort_unstable_by(by_likelihood);
            keep = nucleus(&cands[..m], target).unwrap_or_else(|| {
                cands.sort_unstable_by(by_likelihood);
                nucleus(cands, target).unwrap_or(cands.len())
            });
            total = cands[..keep].iter().map(|c| c.value as f64).sum();
        }
        let r = (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * total;
        let mut acc = 0f64;
        for c in &cands[..keep] {
            acc += c.value as f64;
            if r < acc {
                return c.id;
            }
        }
        // Rounding left `r` at the very top: the last kept candidate with any weight.
        cands[..keep].iter().rev().find(|c| c.value > 0.0).map_or(cands[0].id, |c| c.id)
    }
}

/// The length of the shortest prefix of `sorted` (most likely first) whose weights reach
/// `target`, or `None` if the whole slice does not.
fn nucleus(sorted: &[Candidate], target: f64) -> Option<usize> {
    let mut acc = 0f64;
    for (i, c) in sorted.iter().enumerate() {
        acc += c.value as f64;
        if acc >= target {
            return Some(i + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn cfg(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplerConfig {
        SamplerConfig { temperature, top_k, top_p, repetition_penalty: 1.0, seed }
    }

    #[test]
    fn greedy_takes_argmax_and_lowest_id_on_ties() {
        let mut s = Sampler::new(SamplerConfig::greedy(), 5).unwrap();
        assert_eq!(s.sample(&[0.0, 3.0, 1.0, 3.0, -2.0]).unwrap(), 1);
        assert_eq!(s.sample(&[f32::NAN, -1.0, -5.0, -1.0, -3.0]).unwrap(), 1);
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative() {
        let c = SamplerConfig { repetition_penalty: 2.0, ..SamplerConfig::greedy() };
        let mut s = Sampler::new(c, 3).unwrap();
        s.record(&[0]).unwrap();
        // 3.0 / 2 = 1.5 < 2.0: token 1 wins.
        assert_eq!(s.sample(&[3.0, 2.0, 1.0]).unwrap(), 1);
        // Now 0 and 1 are seen: both become -1 * 2 = -2, below the unseen token 2 at -1.5.
        assert_eq!(s.sample(&[-1.0, -1.0, -1.5]).unwrap(), 2);
        assert_eq!(s.record(&[3]).unwrap_err().code(), crate::Code::OutOfRange);
    }

    #[test]
    fn seeded_draws_repeat_and_follow_the_distribution() {
        let logits = [0.0f32, (2f32).ln(), (7f32).ln()]; // p = 0.1, 0.2, 0.7
        let mut a = Sampler::new(cfg(1.0, 0, 1.0, 42), 3).unwrap();
        let mut b = Sampler::new(cfg(1.0, 0, 1.0, 42), 3).unwrap();
        let mut counts = [0usize; 3];
        for _ in 0..20_000 {
            let x = a.sample(&logits).unwrap();
            assert_eq!(x, b.sample(&logits).unwrap());
            counts[x as usize] += 1;
        }
        for (i, p) in [0.1, 0.2, 0.7].iter().enumerate() {
            let f = counts[i] as f64 / 20_000.0;
            assert!((f - p).abs() < 0.015, "token {i}: {f} vs {p}");
        }
        // A different seed gives a different stream.
        let mut c = Sampler::new(cfg(1.0, 0, 1.0, 43), 3).unwrap();
        a.reset();
        let sa: Vec<u32> = (0..64).map(|_| a.sample(&logits).unwrap()).collect();
        let sc: Vec<u32> = (0..64).map(|_| c.sample(&logits).unwrap()).collect();
        assert_ne!(sa, sc);
    }

    #[test]
    fn top_k_and_top_p_restrict_the_support() {
        let logits: Vec<f32> = (0..1000).map(|i| -(i as f32) * 0.01).collect();
        let mut k = Sampler::new(cfg(1.0, 3, 1.0, 7), 1000).unwrap();
        let mut p = Sampler::new(cfg(1.0, 0, 0.01, 7), 1000).unwrap();
        for _ in 0..2000 {
            assert!(k.sample(&logits).unwrap() < 3);
            // The nucleus of 1% of the mass: the first few ids (each about 0.1% of the mass).
            assert!(p.sample(&logits).unwrap() < 20);
        }
        // A nucleus past the 256-candidate shortcut (flat distribution, p = 0.9) still works.
        let flat = vec![0.0f32; 1000];
        let mut q = Sampler::new(cfg(1.0, 0, 0.9, 3), 1000).unwrap();
        let mut max_id = 0;
        for _ in 0..2000 {
            max_id = max_id.max(q.sample(&flat).unwrap());
        }
        assert!((800..900).contains(&max_id), "max id {max_id}");
        // top_k = 1 is greedy whatever the temperature.
        let mut g = Sampler::new(cfg(5.0, 1, 1.0, 9), 1000).unwrap();
        assert_eq!(g.sample(&logits).unwrap(), 0);
    }

    #[test]
    fn bad_configs_and_lengths_are_errors() {
        for c in [cfg(-1.0, 0, 1.0, 0), cfg(f32::NAN, 0, 1.0, 0), cfg(1.0, 0, 0.0, 0)] {
            assert_eq!(Sampler::new(c, 4).unwrap_err().code(), crate::Code::InvalidArgument);
        }
        let bad = SamplerConfig { repetition_penalty: 0.0, ..SamplerConfig::greedy() };
        assert!(Sampler::new(bad, 4).is_err());
        assert!(Sampler::new(SamplerConfig::greedy(), 0).is_err());
        let mut s = Sampler::new(SamplerConfig::greedy(), 4).unwrap();
        assert_eq!(s.sample(&[0.0; 3]).unwrap_err().code(), crate::Code::InvalidArgument);
    }
}
