//! The setup of the int8 GEMV per type, shared by `gemv_types` (`benches/kernels.rs`) and
//! `kernels_timing types` (`examples/kernels_timing.rs`), which include this file by `#[path]`:
//! the deterministic values, the weights of every type, the shapes (SmolLM2's two, 8192²
//! and one larger than the last-level cache, sized at run time) and a plain read loop over
//! the weights (the memory-bandwidth roof).

// Each includer uses part of it.
#![allow(dead_code)]

use rml::kernels::{self, Isa, Kernels};
use rml::mem::AlignedBlock;
use rml::DType;

/// Deterministic values in [-1, 1).
pub fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// The most rows [`type_weights`] generates; taller matrices repeat them (so that a matrix
/// larger than the last-level cache needs no f32 copy of itself).
pub const TILE_ROWS: usize = 8192;

/// `rows × k` weights of `dtype`: quantized from values where rml has a quantizer, else
/// random bits with small f16 scales at ggml's offsets (no NaN, no subnormal products); the
/// first [`TILE_ROWS`] rows repeated down a taller matrix.
pub fn type_weights(dtype: DType, rows: usize, k: usize) -> AlignedBlock {
    let tile = tile_bytes(dtype, rows.min(TILE_ROWS), k);
    if rows <= TILE_ROWS {
        return AlignedBlock::try_from_slice(&tile).unwrap();
    }
    let mut out = AlignedBlock::try_new(rows * dtype.row_bytes(k).unwrap()).unwrap();
    // The tile is whole rows, so is the last (shorter) chunk.
    for chunk in out.as_mut_slice().chunks_mut(tile.len()) {
        chunk.copy_from_slice(&tile[..chunk.len()]);
    }
    out
}

/// The bytes of [`type_weights`]' first `rows` rows.
fn tile_bytes(dtype: DType, rows: usize, k: usize) -> Vec<u8> {
    let info = rml::quant::info(dtype);
    let rb = dtype.row_bytes(k).unwrap();
    let mut bytes = vec![0u8; rows * rb];
    if let Some(q) = info.quantize {
        let wv = values(rows * k, 5);
        for (src, dst) in wv.chunks_exact(k).zip(bytes.chunks_exact_mut(rb)) {
            q(src, dst).unwrap();
        }
    } else {
        let mut s = 0x1234_5678u32;
        for b in bytes.iter_mut() {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            *b = s as u8;
        }
        let offsets: &[usize] = match dtype {
            DType::IQ4_NL => &[0],
            DType::Q2_K => &[80, 82],
            DType::Q3_K => &[108],
            DType::Q4_K | DType::Q5_K => &[0, 2],
            DType::Q6_K => &[208],
            _ => &[],
        };
        let h = half::f16::from_f32(0.01).to_le_bytes();
        for blk in bytes.chunks_exact_mut(info.block_bytes) {
            for &o in offsets {
                blk[o..o + 2].copy_from_slice(&h);
            }
        }
    }
    bytes
}

/// The types with an int8 GEMV, in [`rml::quant::TYPES`] order.
pub fn int8_types() -> Vec<DType> {
    rml::quant::TYPES.iter().filter(|t| t.act.is_some()).map(|t| t.dtype).collect()
}

/// The int8 tiers to compare: every x86 tier the CPU has (AVX2, AVX-VNNI, AVX-512, AVX-512 +
/// GFNI), else the best ISA alone.
pub fn int8_tiers() -> Vec<&'static Kernels> {
    let x86: Vec<_> = [Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Avx512Gfni]
        .into_iter()
        .filter_map(|isa| kernels::table(isa).ok())
        .collect();
    if x86.is_empty() {
        vec![kernels::table(kernels::best()).unwrap()]
    } else {
        x86
    }
}

/// The last-level cache in bytes: the data or unified cache of the highest level in
/// `/sys/devices/system/cpu/cpu0/cache` (Linux); `None` where that cannot be read.
pub fn llc_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let mut best: Option<(u32, usize)> = None;
    for e in dir.flatten() {
        let p = e.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).ok().map(|s| s.trim().to_owned());
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        let (Ok(level), false) = (level.parse::<u32>(), kind == "Instruction") else {
            continue;
        };
        let (num, mult) = match size.as_bytes().last() {
            Some(b'K') => (&size[..size.len() - 1], 1 << 10),
            Some(b'M') => (&size[..size.len() - 1], 1 << 20),
            Some(b'G') => (&size[..size.len() - 1], 1 << 30),
            _ => (&size[..], 1),
        };
        let Ok(n) = num.parse::<usize>() else { continue };
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, n * mult));
        }
    }
    best.map(|(_, b)| b)
}

/// The last-level cache assumed where [`llc_bytes`] finds none.
pub const LLC_FALLBACK: usize = 1 << 30;

/// The `k` of [`big_shape`] (whole K-quant super-blocks).
pub const BIG_K: usize = 8192;

/// A `rows × BIG_K` shape whose matrix is at least twice `llc` bytes in every type of
/// `types` (rows a multiple of 1024).
pub fn big_shape(llc: usize, types: &[DType]) -> (usize, usize) {
    let rb = types.iter().map(|t| t.row_bytes(BIG_K).unwrap()).min().unwrap();
    ((2 * llc).div_ceil(rb).div_ceil(1024) * 1024, BIG_K)
}

/// The shapes of the int8 GEMV per type: SmolLM2's (576 × 1536, 1536 × 576), 8192 × 8192 and
/// [`big_shape`] for this machine's last-level cache (the cache size used, and whether it was
/// detected, with it).
/// `KT_DIMS=ROWSxK,..` (up to four) replaces the first shapes (e.g. a model's own matrices).
pub fn shapes(types: &[DType]) -> ([(usize, usize); 4], usize, bool) {
    let (llc, found) = match llc_bytes() {
        Some(b) => (b, true),
        None => (LLC_FALLBACK, false),
    };
    let mut s = [(576, 1536), (1536, 576), (8192, 8192), big_shape(llc, types)];
    if let Ok(dims) = std::env::var("KT_DIMS") {
        for (slot, d) in s.iter_mut().zip(dims.split(',')) {
            let (r, k) = d.split_once('x').expect("KT_DIMS: ROWSxK,..");
            *slot = (r.trim().parse().expect("KT_DIMS rows"), k.trim().parse().expect("KT_DIMS k"));
        }
    }
    (s, llc, found)
}

/// Reads every byte of `b` once (whole 128-byte lines; 16 independent u64 sums, vectorised
/// by the compiler): the memory-bandwidth roof of a GEMV over the same bytes.
pub fn read_bytes(b: &[u8]) -> u64 {
    let mut acc = [0u64; 16];
    for c in b.chunks_exact(128) {
        for (i, a) in acc.iter_mut().enumerate() {
            *a = a.wrapping_add(u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().unwrap()));
        }
    }
    acc.iter().fold(0, |s, &a| s.wrapping_add(a))
}
