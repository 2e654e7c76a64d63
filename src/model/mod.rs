//! The Llama-family decoder: configuration, weights, the forward pass and sampling.

pub mod config;
