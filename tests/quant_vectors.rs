//! Every quantized format against `tests/data/quant-vectors/quant_vectors.safetensors` (made by
//! ggml and the `gguf` Python package, see tests/data/README.md):
//!
//! - dequantize: bit-identical to `T.values` / `T.values_random` (ggml's `to_float`);
//! - weight quantizers (the types with ggml reference arithmetic): `T.quant_input` rows give
//!   `T.ggml_quant_output` (and `T.quant_output`, gguf's), and `T.source` gives `T.raw` again;
//! - the scalar dot products (the oracle of every SIMD kernel): within `1e-5 · Σ|w·x|` of a
//!   float64 dot of the dequantized weights with the f32 activations (f32 mode) or with the
//!   dequantized int8 activations (int8 mode), so a wrong oracle cannot pass.

use rml::exec::InlineExecutor;
use rml::kernels::{table, Isa};
use rml::ops::{gemm_with, scratch_bytes, Activations, Matrix};
use rml::quant::{self, Q8Acts, TYPES};
use rml::DType;
use safetensors::SafeTensors;

fn fixture() -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/quant-vectors/quant_vectors.safetensors");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn bytes(st: &SafeTensors<'_>, name: &str) -> Vec<u8> {
    st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}")).data().to_vec()
}

fn f32s(st: &SafeTensors<'_>, name: &str) -> Vec<f32> {
    bytes(st, name).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

fn has(st: &SafeTensors<'_>, name: &str) -> bool {
    st.tensor(name).is_ok()
}

/// The fixture's types rml implements (IQ4_XS is in the fixture, not in rml).
fn types() -> Vec<DType> {
    let want = [
        "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K", "IQ4_NL",
    ];
    want.iter()
        .map(|n| {
            TYPES.iter().find(|t| t.name == *n).unwrap_or_else(|| panic!("rml lacks {n}")).dtype
        })
        .collect()
}

#[test]
fn dequantize_is_bit_identical_to_ggml() {
    let f = fixture();
    let st = SafeTensors::deserialize(&f).unwrap();
    for dt in types() {
        for (raw, values) in [("raw", "values"), ("raw_random", "values_random")] {
            let raw = bytes(&st, &format!("{dt}.{raw}"));
            let want = f32s(&st, &format!("{dt}.{values}"));
            let mut got = vec![0f32; want.len()];
            quant::dequantize(dt, &raw, &mut got).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{dt} {values}[{i}]: {g} vs {w}");
            }
        }
    }
}

#[test]
fn quantizers_give_ggml_bytes() {
    let f = fixture();
    let st = SafeTensors::deserialize(&f).unwrap();
    let mut checked = Vec::new();
    for dt in types() {
        let info = quant::info(dt);
        let Some(q) = info.quantize else { continue };
        let bb = info.block_bytes;
        let input = f32s(&st, &format!("{dt}.quant_input"));
        let rows = input.len() / info.block_elems;
        let mut outs = vec![("ggml_quant_output", bytes(&st, &format!("{dt}.ggml_quant_output")))];
        if has(&st, &format!("{dt}.quant_output")) {
            outs.push(("quant_output", bytes(&st, &format!("{dt}.quant_output"))));
        }
        for r in 0..rows {
            let x = &input[r * info.block_elems..(r + 1) * info.block_elems];
            let mut got = vec![0u8; bb];
            q(x, &mut got).unwrap();
            for (what, want) in &outs {
                assert_eq!(got, want[r * bb..(r + 1) * bb], "{dt} row {r} vs {what}");
            }
        }
        // The source weights llama-quantize was given quantize back to its blocks.
        let src = f32s(&st, &format!("{dt}.source"));
        let mut got = vec![0u8; src.len() / info.block_elems * bb];
        q(&src, &mut got).unwrap();
        assert_eq!(got, bytes(&st, &format!("{dt}.raw")), "{dt}: source -> raw");
        checked.push(dt);
    }
    for must in [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0] {
        assert!(checked.contains(&must), "{must} has no weight quantizer");
    }
}

/// SplitMix64.
fn rng(seed: u64) -> impl FnMut() -> f32 {
    let mut s = seed;
    move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// `|got - Σ w·x| <= 1e-5 · Σ|w·x|` in float64.
fn check_dot(what: &str, got: f32, w: &[f32], x: &[f64]) {
    let exact: f64 = w.iter().zip(x).map(|(&a, &b)| a as f64 * b).sum();
    let mag: f64 = w.iter().zip(x).map(|(&a, &b)| (a as f64 * b).abs()).sum();
    let err = (got as f64 - exact).abs();
    assert!(err <= 1e-5 * mag, "{what}: {got} vs f64 {exact} (err {err:e}, Σ|wx| {mag:e})");
}

#[test]
fn scalar_dots_match_a_float64_dot() {
    let f = fixture();
    let st = SafeTensors::deserialize(&f).unwrap();
    let kern = table(Isa::Scalar).unwrap();
    for dt in types().into_iter().filter(|d| d.is_quantized()) {
        let info = quant::info(dt);
        for raw_name in ["raw", "raw_random"] {
            // Every block of the tensor as one row; two activation rows.
            let raw = bytes(&st, &format!("{dt}.{raw_name}"));
            let k = raw.len() / info.block_bytes * info.block_elems;
            let mut wv = vec![0f32; k];
            quant::dequantize(dt, &raw, &mut wv).unwrap();
            let m = Matrix::new(dt, 1, k, &raw).unwrap();
            let mut next = rng(k as u64 + dt as u64);
            let n = 2;
            let x: Vec<f32> = (0..n * k).map(|_| next()).collect();
            let mut y = vec![0f32; n];
            let mut none = [];
            gemm_with(kern, &InlineExecutor, None, &m, &x, n, &mut y, Activations::F32, &mut none)
                .unwrap();
            for t in 0..n {
                let xt: Vec<f64> = x[t * k..(t + 1) * k].iter().map(|&v| v as f64).collect();
                check_dot(&format!("{dt} {raw_name} f32 row {t}"), y[t], &wv, &xt);
            }
            let mut scratch = vec![0u8; scratch_bytes(k, n, Activations::Int8Plain)];
            gemm_with(
                kern,
                &InlineExecutor,
                None,
                &m,
                &x,
                n,
                &mut y,
                Activations::Int8Plain,
                &mut scratch,
            )
            .unwrap();
            let fmt = info.act.unwrap();
            let mut s2 = vec![0u8; scratch_bytes(k, n, Activations::Int8Plain)];
            let xq = Q8Acts::quantize_as(fmt, kern, &x, n, k, &mut s2).unwrap();
            let per = k / xq.nb();
            for (t, &yt) in y.iter().enumerate() {
                let xt: Vec<f64> = (0..k)
                    .map(|i| {
                        let b = t * xq.nb() + i / per;
                        xq.qs()[t * k + i] as f64 * xq.d()[b] as f64
                    })
                    .collect();
                check_dot(&format!("{dt} {raw_name} int8 row {t}"), yt, &wv, &xt);
            }
        }
    }
}
