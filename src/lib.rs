#![doc = include_str!("../README.md")]
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "capi")]
pub mod capi;
pub mod error;
pub mod exec;
pub mod format;
pub mod kernels;
#[cfg(feature = "std")]
pub mod load;
pub(crate) mod math;
pub mod mem;
pub mod model;
pub mod ops;
pub mod quant;
pub mod tensor;
#[cfg(feature = "tokenizer")]
pub mod tokenizer;

pub use error::{Code, Error, Result};
pub use exec::{Executor, InlineExecutor, Schedule};
pub use tensor::{DType, Shape, Storage, Tensor};
