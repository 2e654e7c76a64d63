//! GGUF files of every weight type, mixed per tensor, against transformers' f32 forward on the
//! weights the `gguf` package dequantizes (`reference_<TYPE>.safetensors`, see
//! tests/data/README.md), teacher-forced over the prompt and the reference's own decode
//! tokens (the random models' top-2 margins are small, so free-running tokens are never
//! compared). Files: tiny-llama-gguf (F32, Q8_0, Q4_0-pure, Q4_K_M = Q5_0 + Q8_0 + F16, and a
//! BF16 file written by `make_bf16.py`), tiny-qwen3/gguf (every type `--pure`, plus the Q2_K,
//! Q3_K_M, Q4_K_M and Q5_K_M mixes), tiny-qwen2/gguf (Q8_0, Q4_K_M), tiny-gemma3/gguf (Q4_K_M),
//! tiny-llama3/gguf (Q8_0).
//!
//! - f32 activations: max abs logit diff <= 1e-4 and the argmax equal at every position;
//! - int8 activations: against llama.cpp's own int8 path on the same file, teacher-forced the
//!   same way ([`LLAMACPP`], made by tests/data/tools/llamacpp_teacher_forced.py; the
//!   MANIFEST's decode figure only covers the steps before llama.cpp's greedy path leaves the
//!   reference's): the prefill within [`PREFILL_FACTOR`] x llama.cpp's, every decode step
//!   within [`STEP_FACTOR`] x llama.cpp's at that step, the worst step within
//!   [`DECODE_FACTOR`] x llama.cpp's worst.
//!
//! Measured (max abs logit diff; rml / llama.cpp: prefill, worst decode step, worst per-step
//! ratio):
//!
//! | file | prefill | decode | step ratio |
//! |---|---|---|---|
//! | tiny-llama F32 | 0 / 0 | 0 / 0 | - |
//! | tiny-llama Q8_0 (+F16) | 0.1399 / 0.1447 (0.97) | 0.1306 / 0.1160 (1.13) | 1.15 |
//! | tiny-llama Q4_0-pure (+F16) | 0.1348 / 0.1239 (1.09) | 0.2189 / 0.2098 (1.04) | 1.23 |
//! | tiny-llama Q4_K_M (Q5_0, Q8_0, F16) | 0.1286 / 0.1027 (1.25) | 0.1222 / 0.0999 (1.22) | 1.37 |
//! | tiny-qwen3 Q8_0 | 0.0920 / 0.0934 (0.99) | 0.1456 / 0.1378 (1.06) | 1.51 |
//! | tiny-qwen3 Q6_K | 0.1209 / 0.1209 (1.00) | 0.2398 / 0.2398 (1.00) | 1.00 |
//! | tiny-qwen3 Q5_1-pure | 0.0911 / 0.0749 (1.22) | 0.1212 / 0.1137 (1.07) | 1.35 |
//! | tiny-qwen3 Q5_0-pure | 0.0834 / 0.0833 (1.00) | 0.1000 / 0.1018 (0.98) | 1.24 |
//! | tiny-qwen3 Q4_1-pure | 0.1029 / 0.0957 (1.08) | 0.1070 / 0.1004 (1.07) | 1.20 |
//! | tiny-qwen3 Q4_0-pure | 0.0939 / 0.0874 (1.07) | 0.0790 / 0.1146 (0.69) | 1.25 |
//! | tiny-qwen3 IQ4_NL-pure | 0.0889 / 0.1070 (0.83) | 0.1553 / 0.1769 (0.88) | 1.53 |
//! | tiny-qwen3 Q5_K-pure | 0.1263 / 0.1263 (1.00) | 0.1697 / 0.1697 (1.00) | 1.00 |
//! | tiny-qwen3 Q4_K-pure | 0.1298 / 0.1298 (1.00) | 0.1510 / 0.1510 (1.00) | 1.00 |
//! | tiny-qwen3 Q3_K-pure | 0.1510 / 0.1510 (1.00) | 0.1535 / 0.1535 (1.00) | 1.00 |
//! | tiny-qwen3 Q2_K-pure | 0.1471 / 0.1450 (1.01) | 0.1716 / 0.1678 (1.02) | 1.15 |
//! | tiny-qwen3 Q5_K_M | 0.1126 / 0.1126 (1.00) | 0.1558 / 0.1558 (1.00) | 1.04 |
//! | tiny-qwen3 Q4_K_M | 0.1292 / 0.1292 (1.00) | 0.1415 / 0.1415 (1.00) | 1.00 |
//! | tiny-qwen3 Q3_K_M | 0.1101 / 0.1101 (1.00) | 0.1491 / 0.1491 (1.00) | 1.00 |
//! | tiny-qwen3 Q2_K | 0.1468 / 0.1468 (1.00) | 0.1653 / 0.1653 (1.00) | 1.00 |
//! | tiny-qwen2 Q8_0 | 0.1057 / 0.0866 (1.22) | 0.1344 / 0.0964 (1.39) | 1.39 |
//! | tiny-qwen2 Q4_K_M | 0.1500 / 0.1500 (1.00) | 0.1450 / 0.1450 (1.00) | 1.00 |
//! | tiny-gemma3 Q4_K_M | 0.1944 / 0.1961 (0.99) | 0.1322 / 0.1354 (0.98) | 1.36 |
//! | tiny-llama3 Q8_0 (+ rope_freqs) | 0.0724 / 0.1014 (0.71) | 0.0740 / 0.0851 (0.87) | 1.24 |
//!
//! The K-quants pair with Q8_K activations (f32 scale per 256 values), which rml rounds as
//! ggml does: their files give llama.cpp's figures to four digits at every step (Q2_K-pure
//! differs only as much as llama.cpp itself does between ISAs; Q5_K_M's last steps and
//! Gemma 3, whose GELU ggml reads from an f16 table, by a little). The 32-value types
//! (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, and the F16 `ffn_down` beside them) pair with
//! 32-value int8 blocks: rml keeps an f32 scale and rounds `x / d`, ggml stores an f16 scale
//! and rounds `x · (1/d)`, so the two errors are of one size, not one value: rml is further
//! than llama.cpp on some files and steps and nearer on others. The 1.0x the issue asks for
//! holds for the K-quant files, not for the 32-value ones (worst 1.25x at the prefill,
//! 1.39x at the worst step, 1.53x at a single step).
//!
//! Every matrix is used in place: the very bytes of the mapped file (same address), whatever
//! its type, when repacking is off; with it (the default on AVX-512), the Q5_0 matrices are
//! repacked copies that give the same logits bit for bit
//! ([`repacked_q5_0_gives_the_same_logits`]).
#![cfg(feature = "std")]

mod decoder_common;

use decoder_common::{argmax, data, max_abs_diff, Reference};
use rml::load::Model;
use rml::model::{DecoderLM, DecoderOptions};
use rml::ops::Activations;
use rml::InlineExecutor;

/// rml's int8 error may be at most this many times llama.cpp's on the same file, teacher-forced
/// (see the module docs for the measured figures these were set from): over the prompt, at
/// each decode step, and the worst decode step against llama.cpp's worst.
const PREFILL_FACTOR: f32 = 1.26;
/// See [`PREFILL_FACTOR`].
const STEP_FACTOR: f32 = 1.55;
/// See [`PREFILL_FACTOR`].
const DECODE_FACTOR: f32 = 1.40;

/// The MANIFEST entry of `file` in `dir`.
fn manifest(dir: &str, file: &str) -> serde_json::Value {
    let p = data(&format!("{dir}/MANIFEST.json"));
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let e = m[file].clone();
    assert!(e.is_object(), "{file} is not in {}", p.display());
    e
}

struct Diffs {
    prefill: f32,
    /// The largest over the teacher-forced decode steps.
    decode: f32,
    /// Each decode step's.
    steps: Vec<f32>,
    argmax_agree: usize,
    positions: usize,
}

/// Teacher-forced logits of the GGUF at `tests/data/<path>` against the reference at
/// `tests/data/<reference>` under `act`. Checks first that every matrix has the type `want_type`
/// gives for its name and is the file's own bytes (the very address of the mapped tensor, not
/// a copy).
fn run(path: &str, reference: &str, want_type: &dyn Fn(&str) -> String, act: Activations) -> Diffs {
    let model = Model::open(data(path)).unwrap();
    // In place: no repacking (`repacked_q5_0_gives_the_same_logits` checks that one).
    let opts =
        DecoderOptions { activations: act, repack_weights: false, ..DecoderOptions::default() };
    let mut m = DecoderLM::new(model.config(), &&model, &InlineExecutor, opts).unwrap();
    let mut typed = 0;
    for l in m.weights().matrices() {
        assert!(l.is_borrowed(), "{path}: {} ({}) was copied", l.name(), l.dtype());
        let mapped = model.container().raw_bytes(l.name()).unwrap();
        let used = l.matrix().unwrap().data();
        assert!(
            core::ptr::eq(used, mapped),
            "{path}: {} ({}) is not the file's bytes",
            l.name(),
            l.dtype()
        );
        assert_eq!(l.dtype().name(), want_type(l.name()), "{path}: {}", l.name());
        typed += 1;
    }
    assert!(typed >= 15, "{path}: only {typed} matrices");
    let r = Reference::open(&data(reference));
    let (prompt, generated) = (r.tokens("prompt"), r.tokens("generated"));
    let vocab = m.config().vocab_size;
    let want = r.f32s("prefill_logits");
    let mut logits = vec![0f32; prompt.len() * vocab];
    m.forward(&prompt, Some(&mut logits), None).unwrap();
    let prefill = max_abs_diff(&logits, &want);
    let mut agree = 0;
    for (t, row) in logits.chunks_exact(vocab).enumerate() {
        agree += usize::from(argmax(row) == argmax(&want[t * vocab..(t + 1) * vocab]));
    }
    let dec = r.f32s("decode_logits");
    let mut steps = Vec::new();
    for (i, &tok) in generated[..generated.len() - 1].iter().enumerate() {
        let got = m.decode(tok).unwrap();
        let w = &dec[i * vocab..(i + 1) * vocab];
        steps.push(max_abs_diff(got, w));
        agree += usize::from(argmax(got) == argmax(w));
    }
    let decode = steps.iter().copied().fold(0.0, f32::max);
    let positions = prompt.len() + generated.len() - 1;
    Diffs { prefill, decode, steps, argmax_agree: agree, positions }
}

/// The MANIFEST's type of every matrix of `dir/file`, and its reference's path.
fn manifest_case(dir: &str, file: &str) -> (String, String, impl Fn(&str) -> String) {
    let entry = manifest(dir, file);
    let reference = format!("{dir}/{}", entry["reference"].as_str().unwrap());
    let path = format!("{dir}/{file}");
    let what = path.clone();
    let types = move |name: &str| {
        let t = entry["tensor_types"][name].as_str();
        t.unwrap_or_else(|| panic!("{what}: {name} is not in the MANIFEST")).to_string()
    };
    (path, reference, types)
}

fn check(dir: &str, file: &str) {
    let (path, reference, types) = manifest_case(dir, file);
    let f = run(&path, &reference, &types, Activations::F32);
    eprintln!(
        "{file}, f32 activations: max abs logit diff prefill {:.2e}, decode {:.2e}, argmax \
         {}/{}",
        f.prefill, f.decode, f.argmax_agree, f.positions
    );
    assert!(f.prefill <= 1e-4 && f.decode <= 1e-4, "{file} f32: {} / {}", f.prefill, f.decode);
    assert_eq!(f.argmax_agree, f.positions, "{file} f32: argmax");
    let (lp, lsteps) = llamacpp(file);
    let q = run(&path, &reference, &types, Activations::Int8Plain);
    // The F32 file has no quantized matrix: int8 is f32 there, and llama.cpp's 4e-6 is its
    // own f32 rounding.
    let floor = |x: f32| x.max(1e-4);
    let lmax = lsteps.iter().copied().fold(0.0, f32::max);
    let step_ratio = q.steps.iter().zip(&lsteps).map(|(r, l)| r / floor(*l)).fold(0.0, f32::max);
    eprintln!(
        "{file}, int8 activations: prefill {:.4} (llama.cpp {lp:.4}, x{:.2}), decode {:.4} \
         (llama.cpp {lmax:.4}, x{:.2}; worst step x{step_ratio:.2}), argmax {}/{}",
        q.prefill,
        q.prefill / floor(lp),
        q.decode,
        q.decode / floor(lmax),
        q.argmax_agree,
        q.positions
    );
    eprintln!("  rml steps {:.4?}\n  llama.cpp {lsteps:.4?}", q.steps);
    assert!(
        q.prefill <= PREFILL_FACTOR * floor(lp),
        "{file} int8 prefill {} > {PREFILL_FACTOR} x llama.cpp's {lp}",
        q.prefill
    );
    for (i, (r, l)) in q.steps.iter().zip(&lsteps).enumerate() {
        assert!(
            *r <= STEP_FACTOR * floor(*l),
            "{file} int8 decode step {i}: {r} > {STEP_FACTOR} x llama.cpp's {l}"
        );
    }
    assert!(
        q.decode <= DECODE_FACTOR * floor(lmax),
        "{file} int8 decode {} > {DECODE_FACTOR} x llama.cpp's {lmax}",
        q.decode
    );
}

/// llama.cpp's int8 error on each file, teacher-forced exactly as rml's here: (file, max abs
/// logit diff over the prompt, the same for each of the 8 decode steps). Made by
/// `tests/data/tools/llamacpp_teacher_forced.py` (llama.cpp 0c1e570, the peers' build: CPU,
/// 1 thread, F32 KV cache, flash attention off, no weight repacking). The prefill figures
/// equal MANIFEST.json's `llamacpp_max_abs_diff_prefill_logits` except Q2_K-pure's (0.1450
/// here, 0.1471 in the MANIFEST: ggml's kernels add in another order on another ISA). The
/// MANIFEST's decode figure covers only the steps before llama.cpp's greedy path leaves the
/// reference's (1 of 8 for Q4_1-pure and Q4_K-pure); these cover all 8.
const LLAMACPP: &[(&str, f32, [f32; 8])] = &[
    (
        "tiny-llama-F32.gguf",
        0.0000,
        [0.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
    ),
    (
        "tiny-llama-Q4_0-pure.gguf",
        0.1239,
        [0.0662, 0.0546, 0.2098, 0.0564, 0.0723, 0.0509, 0.0356, 0.0395],
    ),
    (
        "tiny-llama-Q4_K_M.gguf",
        0.1027,
        [0.0522, 0.0574, 0.0595, 0.0681, 0.0637, 0.0891, 0.0999, 0.0975],
    ),
    (
        "tiny-llama-Q8_0.gguf",
        0.1447,
        [0.0530, 0.0579, 0.0869, 0.1160, 0.0854, 0.0920, 0.0892, 0.0462],
    ),
    (
        "tiny-qwen3-IQ4_NL-pure.gguf",
        0.1070,
        [0.0834, 0.0737, 0.0686, 0.0932, 0.0783, 0.0883, 0.1769, 0.1033],
    ),
    (
        "tiny-qwen3-Q2_K-pure.gguf",
        0.1450,
        [0.1288, 0.1162, 0.1003, 0.0944, 0.1630, 0.1678, 0.1185, 0.0967],
    ),
    (
        "tiny-qwen3-Q2_K.gguf",
        0.1468,
        [0.1398, 0.1037, 0.0893, 0.1213, 0.1653, 0.0885, 0.1309, 0.1376],
    ),
    (
        "tiny-qwen3-Q3_K-pure.gguf",
        0.1510,
        [0.1058, 0.1535, 0.1299, 0.0998, 0.0647, 0.1428, 0.1353, 0.1460],
    ),
    (
        "tiny-qwen3-Q3_K_M.gguf",
        0.1101,
        [0.1125, 0.0897, 0.1051, 0.1226, 0.1023, 0.1491, 0.0932, 0.0881],
    ),
    (
        "tiny-qwen3-Q4_0-pure.gguf",
        0.0874,
        [0.0686, 0.0594, 0.0934, 0.0775, 0.0817, 0.0629, 0.0770, 0.1146],
    ),
    (
        "tiny-qwen3-Q4_1-pure.gguf",
        0.0957,
        [0.0968, 0.0895, 0.0603, 0.0859, 0.1004, 0.0896, 0.0795, 0.0880],
    ),
    (
        "tiny-qwen3-Q4_K-pure.gguf",
        0.1298,
        [0.0920, 0.1013, 0.0950, 0.0858, 0.1017, 0.1510, 0.1204, 0.1343],
    ),
    (
        "tiny-qwen3-Q4_K_M.gguf",
        0.1292,
        [0.0976, 0.0897, 0.1042, 0.0972, 0.1415, 0.0950, 0.0988, 0.0939],
    ),
    (
        "tiny-qwen3-Q5_0-pure.gguf",
        0.0833,
        [0.0813, 0.0650, 0.0418, 0.0839, 0.0707, 0.0787, 0.0895, 0.1018],
    ),
    (
        "tiny-qwen3-Q5_1-pure.gguf",
        0.0749,
        [0.0969, 0.0732, 0.0934, 0.0570, 0.0873, 0.1137, 0.0787, 0.0758],
    ),
    (
        "tiny-qwen3-Q5_K-pure.gguf",
        0.1263,
        [0.0877, 0.1013, 0.1697, 0.1148, 0.0976, 0.1134, 0.1045, 0.1274],
    ),
    (
        "tiny-qwen3-Q5_K_M.gguf",
        0.1126,
        [0.1029, 0.1558, 0.0857, 0.1480, 0.1309, 0.1057, 0.1423, 0.1436],
    ),
    (
        "tiny-qwen3-Q6_K.gguf",
        0.1209,
        [0.1055, 0.1226, 0.1197, 0.1050, 0.0841, 0.1132, 0.1107, 0.2398],
    ),
    (
        "tiny-qwen3-Q8_0.gguf",
        0.0934,
        [0.0679, 0.0573, 0.0908, 0.0844, 0.0701, 0.1378, 0.0971, 0.0934],
    ),
    (
        "tiny-qwen2-Q4_K_M.gguf",
        0.1500,
        [0.1160, 0.0629, 0.1366, 0.0662, 0.0790, 0.0827, 0.1450, 0.1035],
    ),
    (
        "tiny-qwen2-Q8_0.gguf",
        0.0866,
        [0.0518, 0.0522, 0.0891, 0.0613, 0.0964, 0.0689, 0.0601, 0.0750],
    ),
    (
        "tiny-gemma3-Q4_K_M.gguf",
        0.1961,
        [0.1354, 0.1302, 0.1285, 0.1270, 0.0814, 0.1339, 0.1064, 0.0775],
    ),
    (
        "tiny-llama3-Q8_0.gguf",
        0.1014,
        [0.0717, 0.0788, 0.0614, 0.0700, 0.0419, 0.0597, 0.0851, 0.0574],
    ),
];

fn llamacpp(file: &str) -> (f32, [f32; 8]) {
    let row = LLAMACPP.iter().find(|r| r.0 == file);
    let row = row.unwrap_or_else(|| panic!("{file}: no llama.cpp figures"));
    (row.1, row.2)
}

/// A BF16 GGUF (`tiny-llama-gguf/make_bf16.py`: tiny-llama/bf16's weights as llama.cpp's
/// converter writes them with `--outtype bf16`, q/k rows permuted, norms F32) against the f32
/// reference of those weights (`tiny-llama/bf16/reference.safetensors`): every matrix BF16,
/// used in place, in both activation modes (int8 applies to block-quantized matrices only, so
/// both are the f32 computation).
#[test]
fn tiny_llama_bf16() {
    let path = "tiny-llama-gguf/tiny-llama-BF16.gguf";
    let reference = "tiny-llama/bf16/reference.safetensors";
    let bf16 = |_: &str| "BF16".to_string();
    for act in [Activations::F32, Activations::Int8Plain, Activations::Int8] {
        let f = run(path, reference, &bf16, act);
        eprintln!(
            "tiny-llama-BF16.gguf, {act:?} activations: max abs logit diff prefill {:.2e}, \
             decode {:.2e}, argmax {}/{}",
            f.prefill, f.decode, f.argmax_agree, f.positions
        );
        assert!(f.prefill <= 1e-4 && f.decode <= 1e-4, "{act:?}: {} / {}", f.prefill, f.decode);
        assert_eq!(f.argmax_agree, f.positions, "{act:?}: argmax");
    }
}

/// [`DecoderOptions::repack_weights`] on the files with Q5_0 matrices: where the active
/// kernels have the Q5_0x2 int8 body (AVX-512), every Q5_0 matrix of the layers and the head
/// (a tied embedding included) with rows a multiple of 64 long is repacked (a copy, `Q5_0x2`)
/// and nothing else is; elsewhere no dtype changes (the row-interleaved tiers copy the same
/// matrices of their types into that layout, checked here too). Either
/// way the prefill and decode logits, with corrected and plain int8 activations, are the
/// in-place decoder's bit for bit. With f32 activations the tiers whose f32 kernels run a
/// type faster as Q8_0 (`Kernels::f32_via_q8_0`: AVX2 and AVX-VNNI, for Q5_0 and IQ4_NL)
/// widen those matrices to Q8_0 (same values; the f32 logits bit for bit too), and nothing
/// else is copied.
#[test]
fn repacked_q5_0_gives_the_same_logits() {
    let kern = rml::kernels::active().unwrap();
    let simd = kern.has_simd_q8(rml::DType::Q5_0x2);
    if !simd {
        eprintln!(
            "kernels {}: no Q5_0x2 body, so no dtype may change (checked below); the \
             repacked kernels themselves are checked in tests/kernels_conformance.rs",
            rml::kernels::active().unwrap().isa()
        );
    }
    let mut widened_total = 0;
    for path in [
        "tiny-qwen3/gguf/tiny-qwen3-Q5_0-pure.gguf",
        "tiny-llama-gguf/tiny-llama-Q4_K_M.gguf",
        "tiny-qwen3/gguf/tiny-qwen3-IQ4_NL-pure.gguf",
    ] {
        let model = Model::open(data(path)).unwrap();
        for act in [Activations::Int8, Activations::Int8Plain, Activations::F32] {
            let build = |repack| {
                let opts = DecoderOptions {
                    activations: act,
                    repack_weights: repack,
                    ..DecoderOptions::default()
                };
                DecoderLM::new(model.config(), &&model, &InlineExecutor, opts).unwrap()
            };
            let (mut a, mut b) = (build(false), build(true));
            let mut repacked = 0;
            for (la, lb) in a.weights().matrices().zip(b.weights().matrices()) {
                // The layers and the output head: the head matrix, or the embedding when
                // tied to it (an untied embedding is only looked up and stays as stored).
                let head = la.name() == "output.weight"
                    || (la.name() == "token_embd.weight" && model.config().tie_word_embeddings);
                let want = simd
                    && act != Activations::F32
                    && (la.name().starts_with("blk.") || head)
                    && la.dtype() == rml::DType::Q5_0
                    && la.k() % 64 == 0;
                // Row-interleaved copies (AVX2, AVX-VNNI) keep the dtype.
                let rows8 = kern.matmul_q8_rows8(la.dtype()).is_some()
                    && la.rows() % 8 == 0
                    && act != Activations::F32
                    && (la.name().starts_with("blk.") || head);
                // Widened to Q8_0 for the f32 kernels.
                let widened = act == Activations::F32
                    && kern.f32_via_q8_0(la.dtype())
                    && (la.name().starts_with("blk.") || head);
                if want {
                    assert_eq!(lb.dtype(), rml::DType::Q5_0x2, "{path}: {}", la.name());
                    assert!(!lb.is_borrowed(), "{path}: {}", la.name());
                    repacked += 1;
                } else if widened {
                    assert_eq!(lb.dtype(), rml::DType::Q8_0, "{path}: {}", la.name());
                    assert!(!lb.is_borrowed(), "{path}: {}", la.name());
                    repacked += 1;
                    widened_total += 1;
                } else {
                    assert_eq!(lb.dtype(), la.dtype(), "{path} {act:?}: {}", la.name());
                    assert_eq!(lb.is_rows8(), rows8, "{path} {act:?}: {}", la.name());
                    assert_eq!(lb.is_borrowed(), !rows8, "{path} {act:?}: {} copied", la.name());
                }
                // The matrix says it was repacked exactly when one of the three happened; the
                // decoder built without repacking has none.
                assert_eq!(
                    lb.is_repacked(),
                    want || widened || rows8,
                    "{path} {act:?}: {}",
                    la.name()
                );
                assert!(!la.is_repacked(), "{path}: {} repacked with repacking off", la.name());
            }
            if simd && act != Activations::F32 && !path.contains("IQ4_NL") {
                assert!(repacked >= 8, "{path}: only {repacked} matrices repacked");
            }
            let prompt: Vec<u32> = (0..20u32).map(|i| (i * 37 + 5) % 200).collect();
            let vocab = a.config().vocab_size;
            let (mut la, mut lb) =
                (vec![0f32; prompt.len() * vocab], vec![0f32; prompt.len() * vocab]);
            a.forward(&prompt, Some(&mut la), None).unwrap();
            b.forward(&prompt, Some(&mut lb), None).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&la), bits(&lb), "{path} {act:?}: prefill logits");
            for tok in [3u32, 17, 101, 42] {
                let da = bits(a.decode(tok).unwrap());
                assert_eq!(da, bits(b.decode(tok).unwrap()), "{path} {act:?}: decode logits");
            }
            eprintln!("{path} {act:?}: {repacked} matrices repacked, same logits");
        }
    }
    // The f32 widening ran where the kernels ask for it (the Q5_0 and IQ4_NL files' layers).
    let widens = kern.f32_via_q8_0(rml::DType::Q5_0) || kern.f32_via_q8_0(rml::DType::IQ4_NL);
    assert_eq!(widened_total > 0, widens, "{widened_total} matrices widened on {}", kern.isa());
}

/// One test per file: `name => (folder under tests/data, file)`.
macro_rules! files {
    ($($name:ident => ($dir:literal, $file:literal);)*) => {
        $(
            #[test]
            fn $name() {
                check($dir, $file);
            }
        )*

        /// Every file the test list names is in its MANIFEST, and every MANIFEST entry of
        /// these folders has a test.
        #[test]
        fn every_manifest_file_is_tested() {
            let listed: &[(&str, &str)] = &[$(($dir, $file)),*];
            let mut dirs: Vec<&str> = listed.iter().map(|(d, _)| *d).collect();
            dirs.sort_unstable();
            dirs.dedup();
            for dir in dirs {
                let p = data(&format!("{dir}/MANIFEST.json"));
                let m: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                for file in m.as_object().unwrap().keys() {
                    if data(&format!("{dir}/{file}")).exists() {
                        assert!(
                            listed.contains(&(dir, file.as_str())),
                            "{dir}/{file} has no test here"
                        );
                    }
                }
            }
        }
    };
}

files! {
    tiny_llama_f32 => ("tiny-llama-gguf", "tiny-llama-F32.gguf");
    tiny_llama_q8_0 => ("tiny-llama-gguf", "tiny-llama-Q8_0.gguf");
    tiny_llama_q4_0_pure => ("tiny-llama-gguf", "tiny-llama-Q4_0-pure.gguf");
    tiny_llama_q4_k_m_falls_back_to_q5_0_q8_0_f16 => ("tiny-llama-gguf", "tiny-llama-Q4_K_M.gguf");
    tiny_qwen3_q8_0 => ("tiny-qwen3/gguf", "tiny-qwen3-Q8_0.gguf");
    tiny_qwen3_q6_k => ("tiny-qwen3/gguf", "tiny-qwen3-Q6_K.gguf");
    tiny_qwen3_q5_1_pure => ("tiny-qwen3/gguf", "tiny-qwen3-Q5_1-pure.gguf");
    tiny_qwen3_q5_0_pure => ("tiny-qwen3/gguf", "tiny-qwen3-Q5_0-pure.gguf");
    tiny_qwen3_q4_1_pure => ("tiny-qwen3/gguf", "tiny-qwen3-Q4_1-pure.gguf");
    tiny_qwen3_q4_0_pure => ("tiny-qwen3/gguf", "tiny-qwen3-Q4_0-pure.gguf");
    tiny_qwen3_iq4_nl_pure => ("tiny-qwen3/gguf", "tiny-qwen3-IQ4_NL-pure.gguf");
    tiny_qwen3_q5_k_pure => ("tiny-qwen3/gguf", "tiny-qwen3-Q5_K-pure.gguf");
    tiny_qwen3_q4_k_pure => ("tiny-qwen3/gguf", "tiny-qwen3-Q4_K-pure.gguf");
    tiny_qwen3_q3_k_pure => ("tiny-qwen3/gguf", "tiny-qwen3-Q3_K-pure.gguf");
    tiny_qwen3_q2_k_pure => ("tiny-qwen3/gguf", "tiny-qwen3-Q2_K-pure.gguf");
    tiny_qwen3_q5_k_m => ("tiny-qwen3/gguf", "tiny-qwen3-Q5_K_M.gguf");
    tiny_qwen3_q4_k_m => ("tiny-qwen3/gguf", "tiny-qwen3-Q4_K_M.gguf");
    tiny_qwen3_q3_k_m => ("tiny-qwen3/gguf", "tiny-qwen3-Q3_K_M.gguf");
    tiny_qwen3_q2_k => ("tiny-qwen3/gguf", "tiny-qwen3-Q2_K.gguf");
    tiny_qwen2_q8_0 => ("tiny-qwen2/gguf", "tiny-qwen2-Q8_0.gguf");
    tiny_qwen2_q4_k_m => ("tiny-qwen2/gguf", "tiny-qwen2-Q4_K_M.gguf");
    tiny_gemma3_q4_k_m => ("tiny-gemma3/gguf", "tiny-gemma3-Q4_K_M.gguf");
    tiny_llama3_q8_0_with_rope_freqs => ("tiny-llama3/gguf", "tiny-llama3-Q8_0.gguf");
}
