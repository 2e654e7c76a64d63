//! Models: decoder-only language models (configuration, families, weights, the forward pass,
//! sampling) and encoders for sentence embeddings.
//!
//! - [`config`]: [`config::ModelConfig`] from `config.json` or GGUF metadata;
//! - [`arch`]: the families as data (the only place that names one);
//! - [`weights`], [`decoder`]: one forward pass for every family;
//! - [`sample`]: greedy, temperature, top-k, top-p;
//! - [`encoder`]: BERT-family encoders for sentence embeddings (with a sentence-transformers
//!   folder's tokenizer, pooling and normalization under feature `tokenizer`).

pub mod arch;
pub mod config;
pub mod decoder;
pub mod encoder;
pub mod packed;
pub mod plan;
pub mod sample;
pub mod weights;

pub use decoder::{
    AttentionPath, DecoderBatch, DecoderLM, DecoderOptions, Hidden, KvCache, KvDtype, SeqInput,
    Stage, KV_SEGMENT, ROW_TILE,
};
pub use plan::MemoryPlan;
pub use sample::{Sampler, SamplerConfig};
pub use weights::{WeightFormat, Weights};
