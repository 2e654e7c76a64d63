//! The Llama-family decoder: configuration, weights, the forward pass and sampling.

pub mod config;
pub mod decoder;
pub mod packed;
pub mod plan;
pub mod sample;
pub mod weights;

pub use decoder::{DecoderLM, DecoderOptions, Hidden, KvCache, Stage};
pub use plan::MemoryPlan;
pub use sample::{Sampler, SamplerConfig};
pub use weights::{WeightFormat, Weights};
