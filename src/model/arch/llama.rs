//! Llama (`LlamaForCausalLM`, Llama 2 and 3.x, SmolLM2): the base family.
//!
//! Hugging Face: RMSNorm `x̂ * w`, SwiGLU MLP, rotate-half RoPE (scaling `linear` / `llama3`
//! from `config.json`), untied head unless `tie_word_embeddings` (default false).
//! GGUF (`general.architecture = llama`): llama.cpp's converter permutes the `attn_q` /
//! `attn_k` rows of every head so that RoPE rotates adjacent pairs ([`qk_gguf_row`]); rml keeps
//! them as stored and rotates interleaved pairs. Llama 3.x GGUFs carry the `llama3` scaling as
//! `rope_freqs.weight` (divisors of each inverse frequency) instead of keys.

use super::{ArchSpec, LLAMA_LIKE};
use crate::error::{Error, Result};

/// The Llama family.
pub const SPEC: ArchSpec = ArchSpec { gguf_qk_permuted: true, ..LLAMA_LIKE };

/// For a q or k projection of a Llama GGUF with heads of `head_dim` rows: the GGUF row that
/// holds Hugging Face row `hf_row`. Within a head, HF row `j * head_dim/2 + i` (`j` in 0..2,
/// `i` in 0..head_dim/2) is GGUF row `2 * i + j`; heads stay in place.
///
/// # Panics
///
/// If `head_dim` is odd or zero.
pub fn qk_gguf_row(hf_row: usize, head_dim: usize) -> usize {
    assert!(head_dim > 0 && head_dim % 2 == 0, "head_dim {head_dim} must be even and non-zero");
    let half = head_dim / 2;
    let (head, r) = (hf_row / head_dim, hf_row % head_dim);
    let (j, i) = (r / half, r % half);
    head * head_dim + 2 * i + j
}

/// Copies a Llama GGUF `attn_q` / `attn_k` weight (`src`: `rows` rows of `row_bytes` bytes
/// each, any dtype — rows move whole) into `dst` in Hugging Face's rotate-half row order, for
/// heads of `head_dim` rows ([`qk_gguf_row`]).
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `head_dim` is odd or zero or does not divide `rows`.
///
/// # Panics
///
/// If `src` or `dst` is not `rows * row_bytes` long.
pub fn unpermute_qk_rows(
    src: &[u8],
    dst: &mut [u8],
    rows: usize,
    row_bytes: usize,
    head_dim: usize,
) -> Result<()> {
    reorder_qk_rows(src, dst, rows, row_bytes, head_dim, false)
}

/// The inverse of [`unpermute_qk_rows`]: copies a q or k weight in Hugging Face's
/// rotate-half row order (`src`) into `dst` in a Llama GGUF's order, as llama.cpp's converter
/// writes it.
///
/// # Errors
///
/// As [`unpermute_qk_rows`].
///
/// # Panics
///
/// As [`unpermute_qk_rows`].
pub fn permute_qk_rows(
    src: &[u8],
    dst: &mut [u8],
    rows: usize,
    row_bytes: usize,
    head_dim: usize,
) -> Result<()> {
    reorder_qk_rows(src, dst, rows, row_bytes, head_dim, true)
}

/// [`permute_qk_rows`] (`to_gguf`) or [`unpermute_qk_rows`]: row `r` of the Hugging Face order
/// is row [`qk_gguf_row`]`(r)` of the GGUF order.
fn reorder_qk_rows(
    src: &[u8],
    dst: &mut [u8],
    rows: usize,
    row_bytes: usize,
    head_dim: usize,
    to_gguf: bool,
) -> Result<()> {
    let what = if to_gguf { "permute" } else { "un-permute" };
    let total = rows.checked_mul(row_bytes);
    assert!(
        total == Some(src.len()) && total == Some(dst.len()),
        "q/k {what}: src {} / dst {} bytes for {rows} rows of {row_bytes}",
        src.len(),
        dst.len()
    );
    if head_dim == 0 || head_dim % 2 != 0 || rows % head_dim != 0 {
        return Err(Error::invalid_argument(format_args!(
            "q/k {what}: head_dim {head_dim} must be even, non-zero and divide {rows} rows"
        )));
    }
    if row_bytes == 0 {
        return Ok(());
    }
    for hf_row in 0..rows {
        let g = qk_gguf_row(hf_row, head_dim);
        let (hf, gguf) =
            (hf_row * row_bytes..(hf_row + 1) * row_bytes, g * row_bytes..(g + 1) * row_bytes);
        if to_gguf {
            dst[gguf].copy_from_slice(&src[hf]);
        } else {
            dst[hf].copy_from_slice(&src[gguf]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn qk_row_map_inverts_llama_cpp_permute() {
        // llama.cpp's converter: HF rows of one head [h0 .. h7] (two halves [0..4), [4..8))
        // are stored interleaved: 0, 4, 1, 5, 2, 6, 3, 7.
        let stored: Vec<usize> = (0..8).map(|g| (g % 2) * 4 + g / 2).collect();
        assert_eq!(stored, [0, 4, 1, 5, 2, 6, 3, 7]);
        for hf in 0..8 {
            assert_eq!(stored[qk_gguf_row(hf, 8)], hf);
        }
        // Second head keeps its place.
        assert_eq!(qk_gguf_row(8 + 4, 8), 8 + 1);
    }

    #[test]
    fn unpermute_moves_whole_rows() {
        let head_dim = 4;
        // GGUF rows hold the HF row number in both bytes: stored order 0, 2, 1, 3.
        let src = [0u8, 0, 2, 2, 1, 1, 3, 3];
        let mut dst = [0u8; 8];
        unpermute_qk_rows(&src, &mut dst, 4, 2, head_dim).unwrap();
        assert_eq!(dst, [0, 0, 1, 1, 2, 2, 3, 3]);
        assert!(unpermute_qk_rows(&src, &mut dst, 4, 2, 3).is_err());
    }

    #[test]
    fn permute_inverts_unpermute() {
        let (hd, heads, rb) = (8, 3, 5);
        let n = hd * heads;
        let data: Vec<u8> = (0..n * rb).map(|i| i as u8).collect();
        let (mut g, mut back) = (vec![0u8; data.len()], vec![0u8; data.len()]);
        permute_qk_rows(&data, &mut g, n, rb, hd).unwrap();
        assert_ne!(g, data);
        unpermute_qk_rows(&g, &mut back, n, rb, hd).unwrap();
        assert_eq!(back, data);
        assert!(permute_qk_rows(&data, &mut g, n, rb, 7).is_err());
    }
}
