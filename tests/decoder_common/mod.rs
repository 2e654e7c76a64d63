//! Shared by the decoder tests: fixture paths, reference tensors, comparisons.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rml::format::safetensors::SafeTensors;
use rml::format::TensorSource;

/// `tests/data/<rel>`.
pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

#[path = "../common/smollm2.rs"]
mod smollm2;
#[allow(unused_imports)]
pub use smollm2::smollm2_gguf;

/// File bytes in a 64-byte aligned buffer that lives for the whole test process, as an mmap
/// would (so that in-place weights are really in place).
pub fn leak_aligned(path: &Path) -> &'static [u8] {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut block = rml::mem::AlignedBlock::try_new(bytes.len()).unwrap();
    block.as_mut_slice().copy_from_slice(&bytes);
    let block: &'static rml::mem::AlignedBlock = Box::leak(Box::new(block));
    block.as_slice()
}

/// A reference file's tensors.
pub struct Reference {
    st: SafeTensors<'static>,
}

impl Reference {
    pub fn open(path: &Path) -> Self {
        Reference { st: SafeTensors::parse(leak_aligned(path)).unwrap() }
    }

    pub fn f32s(&self, name: &str) -> Vec<f32> {
        let v = self.st.tensor(name).unwrap();
        let mut out = vec![0f32; v.shape.numel()];
        v.dequantize_into(&mut out).unwrap();
        out
    }

    pub fn tokens(&self, name: &str) -> Vec<u32> {
        let v = self.st.tensor(name).unwrap();
        v.data.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32).collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.st.tensor(name).is_ok()
    }
}

/// Largest |a - b|.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Index of the largest value (lowest index on ties).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}
