//! The RoPE inverse-frequency tables of a decoder: the global layers' (with the config's
//! `rope_scaling`), the sliding layers' own base when they have one, and a GGUF's
//! `rope_freqs.weight` divisors.

use crate::model::config::{ModelConfig, RopeScaling};
use crate::model::weights::Vector;
use crate::ops;

/// RoPE inverse frequencies of `config`'s global layers (`head_dim / 2` values), with its
/// `rope_scaling` applied as transformers' `modeling_rope_utils.py` does.
///
/// # Panics
///
/// If `out.len() * 2 != config.head_dim`.
pub fn rope_frequencies(config: &ModelConfig, out: &mut [f32]) {
    rope_frequencies_for(config.rope_theta, config.rope_scaling, config.head_dim, out);
}

/// RoPE inverse frequencies for base `theta`, `scaling` and heads of `head_dim`.
///
/// # Panics
///
/// If `out.len() * 2 != head_dim`.
pub fn rope_frequencies_for(theta: f64, scaling: RopeScaling, head_dim: usize, out: &mut [f32]) {
    ops::rope_inv_freq(theta as f32, head_dim, out);
    match scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => {
            for f in out.iter_mut() {
                *f = (*f as f64 / factor) as f32;
            }
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let old = original_max_position_embeddings as f64;
            let (low_wavelen, high_wavelen) = (old / low_freq_factor, old / high_freq_factor);
            for f in out.iter_mut() {
                let inv = *f as f64;
                let wavelen = 2.0 * core::f64::consts::PI / inv;
                *f = if wavelen < high_wavelen {
                    inv
                } else if wavelen > low_wavelen {
                    inv / factor
                } else {
                    let smooth =
                        (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                    (1.0 - smooth) * inv / factor + smooth * inv
                } as f32;
            }
        }
    }
}

/// Fills a decoder's RoPE table (`head_dim / 2` floats, then as many again for the sliding
/// layers when `config.local_rope_theta` is set): [`rope_frequencies`] of `config`, the
/// sliding layers' frequencies for their own base, each divided by `rope_freqs` (llama.cpp's
/// `rope_freqs.weight`) when the file has it.
pub(super) fn fill_table(config: &ModelConfig, rope_freqs: Option<&Vector>, f: &mut [f32]) {
    let c = config;
    let half = c.head_dim / 2;
    let (global, local) = f.split_at_mut(half);
    rope_frequencies(config, global);
    if let Some(theta) = c.local_rope_theta {
        rope_frequencies_for(theta, RopeScaling::None, c.head_dim, local);
    }
    // llama.cpp's `rope_freqs.weight`: each inverse frequency divided by its factor.
    if let Some(div) = rope_freqs {
        for part in f.chunks_exact_mut(half) {
            for (x, &d) in part.iter_mut().zip(div.as_slice()) {
                *x /= d;
            }
        }
    }
}
