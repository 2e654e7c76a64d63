//! rml's C library: `librml_capi.a` (static) and `librml_capi.so` (shared), exporting the
//! `extern "C"` functions of [`rml::capi`], declared for C in `include/rml.h`.
//!
//! Build with `cargo build --release -p rml-capi` from the repository root; link a C program
//! with `-lrml_capi -lpthread -ldl -lm` (see `features/c-api/README.md`).

pub use rml::capi::*;
