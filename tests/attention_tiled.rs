//! The grouped, tiled, online-softmax attention (`rml::ops::attention_group`) against the
//! per-head oracle (`rml::ops::attention_head`: all scores, softmax, weighted sum) over ragged
//! shapes (keys 1..=300 around the 32-key tiles, head widths 64/128/80 and odd ones, groups
//! 1/2/3/4/8, query tiles of 1..=9 rows, sliding windows), bit-identity across kernel tiers and
//! groupings, and the f16 cache path.

use rml::kernels::{table, Isa};
use rml::ops::{attention_group, attention_group_on, attention_head, GroupShape, KvRows};

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-a, a).
    fn f(&mut self, a: f32) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
    }
    fn vec(&mut self, n: usize, a: f32) -> Vec<f32> {
        (0..n).map(|_| self.f(a)).collect()
    }
}

struct Case {
    shape: GroupShape,
    q: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
}

fn case(
    rows: usize,
    heads: usize,
    d: usize,
    n_keys: usize,
    window: Option<usize>,
    seed: u64,
) -> Case {
    let mut rng = Rng(seed);
    // Rows end at key n_keys: pos0 + rows = n_keys (the last row sees all of them).
    let rows = rows.min(n_keys);
    let pad = (seed % 3) as usize * 8; // some room between rows, as in the decoder's q
    let shape = GroupShape {
        rows,
        heads,
        head_dim: d,
        row_stride: heads * d + pad,
        pos0: n_keys - rows,
        window,
        scale: 1.0 / (d as f32).sqrt(),
    };
    // Scores up to about ±8 (sharp and flat softmaxes both appear).
    let q = rng.vec(shape.io_floats(), 2.0);
    let keys = rng.vec(n_keys * d, 2.0);
    let values = rng.vec(n_keys * d, 1.0);
    Case { shape, q, keys, values }
}

/// The oracle's output for vector (r, h).
fn oracle(c: &Case, r: usize, h: usize) -> Vec<f32> {
    let s = &c.shape;
    let d = s.head_dim;
    let hi = s.pos0 + r + 1;
    let lo = hi.saturating_sub(s.window.unwrap_or(usize::MAX));
    let at = r * s.row_stride + h * d;
    let mut scores = vec![0f32; hi - lo];
    let mut out = vec![0f32; d];
    attention_head(
        &c.q[at..at + d],
        &c.keys[lo * d..],
        &c.values[lo * d..],
        hi - lo,
        s.scale,
        &mut scores,
        &mut out,
    );
    out
}

fn run(c: &Case) -> Vec<f32> {
    let mut scratch = vec![0f32; c.shape.scratch_floats()];
    let mut out = vec![f32::NAN; c.shape.io_floats()];
    attention_group(
        &c.shape,
        &c.q,
        KvRows::F32(&c.keys),
        KvRows::F32(&c.values),
        &mut scratch,
        &mut out,
    );
    out
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

const KEYS: [usize; 17] = [1, 2, 7, 8, 9, 31, 32, 33, 40, 63, 64, 65, 97, 255, 256, 257, 300];

#[test]
fn tiled_matches_the_per_head_oracle_over_ragged_shapes() {
    let mut worst = 0f32;
    let mut cases = 0;
    for d in [64usize, 128, 80, 16, 13] {
        for heads in [1usize, 2, 3, 4, 8] {
            for (i, &n) in KEYS.iter().enumerate() {
                for window in [None, Some(1), Some(7), Some(40)] {
                    let rows = 1 + (i + heads + d) % 9;
                    let c = case(rows, heads, d, n, window, (d * 1000 + heads * 100 + i) as u64);
                    let out = run(&c);
                    for r in 0..c.shape.rows {
                        for h in 0..heads {
                            let at = r * c.shape.row_stride + h * d;
                            let want = oracle(&c, r, h);
                            for (a, b) in out[at..at + d].iter().zip(&want) {
                                let e = (a - b).abs();
                                worst = worst.max(e);
                                assert!(
                                    e <= 2e-6 * (1.0 + b.abs()),
                                    "d {d} heads {heads} keys {n} window {window:?} row {r} \
                                     head {h}: {a} vs {b}"
                                );
                            }
                        }
                    }
                    cases += 1;
                }
            }
        }
    }
    eprintln!("{cases} shapes, max abs difference from the per-head oracle {worst:.2e}");
}

#[test]
fn every_rows_result_is_independent_of_its_tile_and_group() {
    // The decoder groups heads and rows differently for prefill and decode, and per thread
    // split; one vector's bits must not depend on it.
    for (d, heads, n, window) in [(64, 3, 300, None), (80, 4, 97, Some(33)), (13, 2, 65, None)] {
        let c = case(9, heads, d, n, window, 7);
        let whole = run(&c);
        for r in 0..c.shape.rows {
            for h in 0..heads {
                let shape = GroupShape {
                    rows: 1,
                    heads: 1,
                    row_stride: d,
                    pos0: c.shape.pos0 + r,
                    ..c.shape
                };
                let at = r * c.shape.row_stride + h * d;
                let single = Case {
                    shape,
                    q: c.q[at..at + d].to_vec(),
                    keys: c.keys.clone(),
                    values: c.values.clone(),
                };
                assert_eq!(bits(&run(&single)), bits(&whole[at..at + d]), "d {d} row {r} head {h}");
            }
        }
    }
}

#[test]
fn every_kernel_tier_gives_the_portable_bits() {
    let portable = table(Isa::Scalar).unwrap();
    let mut tiers = 0;
    for isa in Isa::ALL {
        let Ok(k) = table(isa) else {
            eprintln!("SKIPPED {isa}: not available on this CPU");
            continue;
        };
        tiers += 1;
        for d in [64usize, 128, 80, 13] {
            for heads in [1usize, 3, 8] {
                for (i, &n) in KEYS.iter().enumerate() {
                    let c = case(1 + i % 9, heads, d, n, [None, Some(5)][i % 2], i as u64);
                    let mut scratch = vec![0f32; c.shape.scratch_floats()];
                    let mut want = vec![0f32; c.shape.io_floats()];
                    let mut got = want.clone();
                    for (f16, kk) in [(false, 0), (true, 1)] {
                        let _ = kk;
                        let kh: Vec<u16> =
                            c.keys.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
                        let vh: Vec<u16> =
                            c.values.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
                        let (ks, vs) = if f16 {
                            (KvRows::F16(&kh), KvRows::F16(&vh))
                        } else {
                            (KvRows::F32(&c.keys), KvRows::F32(&c.values))
                        };
                        attention_group_on(
                            portable,
                            &c.shape,
                            &c.q,
                            ks,
                            vs,
                            &mut scratch,
                            &mut want,
                        );
                        attention_group_on(k, &c.shape, &c.q, ks, vs, &mut scratch, &mut got);
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{isa} d {d} heads {heads} keys {n} f16 {f16}"
                        );
                    }
                }
            }
        }
    }
    eprintln!("{tiers} tiers checked");
}

#[test]
fn f16_rows_equal_f32_rows_holding_the_rounded_values() {
    let c = case(5, 3, 64, 257, None, 11);
    let kh: Vec<u16> = c.keys.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
    let vh: Vec<u16> = c.values.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
    let kw: Vec<f32> = kh.iter().map(|&b| half::f16::from_bits(b).to_f32()).collect();
    let vw: Vec<f32> = vh.iter().map(|&b| half::f16::from_bits(b).to_f32()).collect();
    let mut scratch = vec![0f32; c.shape.scratch_floats()];
    let mut a = vec![0f32; c.shape.io_floats()];
    let mut b = a.clone();
    attention_group(&c.shape, &c.q, KvRows::F16(&kh), KvRows::F16(&vh), &mut scratch, &mut a);
    attention_group(&c.shape, &c.q, KvRows::F32(&kw), KvRows::F32(&vw), &mut scratch, &mut b);
    assert_eq!(bits(&a), bits(&b));
}

/// `attention_decode` over rows of different sequences (positions around the 256-position
/// segments, windows, f32 and f16 caches of different capacities) gives every row the bits
/// `attention_layer` gives it alone, on one thread and on a pool.
#[test]
fn decode_rows_together_equal_each_alone() {
    use rml::exec::Executor;
    use rml::ops::{
        attention_decode, attention_layer, decode_attention_floats, layer_attention_floats,
    };
    use rml::ops::{DecodeRow, DecodeShape, LayerAttention};
    let mut execs: Vec<Box<dyn Executor>> = vec![Box::new(rml::InlineExecutor)];
    #[cfg(feature = "std")]
    execs.push(Box::new(rml::exec::ThreadPool::new(3)));
    let positions = [0usize, 300, 31, 255, 256, 600, 3, 511];
    for (heads, kv_heads, d) in [(9usize, 3usize, 64usize), (4, 1, 80), (2, 2, 13)] {
        for window in [None, Some(100)] {
            for f16 in [false, true] {
                let mut rng = Rng((heads * 100 + d) as u64 + u64::from(f16));
                let qd = heads * d;
                let caps: Vec<usize> = positions.iter().map(|&p| p + 1 + p % 7).collect();
                let caches: Vec<(Vec<f32>, Vec<f32>)> = caps
                    .iter()
                    .map(|&c| (rng.vec(kv_heads * c * d, 2.0), rng.vec(kv_heads * c * d, 1.0)))
                    .collect();
                let halves: Vec<(Vec<u16>, Vec<u16>)> = caches
                    .iter()
                    .map(|(k, v)| {
                        let h = |x: &Vec<f32>| -> Vec<u16> {
                            x.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect()
                        };
                        (h(k), h(v))
                    })
                    .collect();
                let kv = |i: usize| -> (KvRows<'_>, KvRows<'_>) {
                    if f16 {
                        (KvRows::F16(&halves[i].0), KvRows::F16(&halves[i].1))
                    } else {
                        (KvRows::F32(&caches[i].0), KvRows::F32(&caches[i].1))
                    }
                };
                // Rows in a shuffled order of the sequences: row `j` is sequence `order[j]`.
                let order = [5usize, 0, 7, 2, 1, 6, 3, 4];
                let q = rng.vec(order.len() * qd, 2.0);
                let scale = 1.0 / (d as f32).sqrt();
                let rows: Vec<DecodeRow<'_>> = order
                    .iter()
                    .enumerate()
                    .map(|(j, &i)| {
                        let (keys, values) = kv(i);
                        DecodeRow { row: j, pos: positions[i], keys, values, capacity: caps[i] }
                    })
                    .collect();
                let need: usize = rows
                    .iter()
                    .map(|r| decode_attention_floats(heads, kv_heads, d, r.pos, f16).unwrap())
                    .sum();
                let shape = DecodeShape { heads, kv_heads, head_dim: d, window, scale };
                for exec in &execs {
                    let mut scratch = vec![f32::NAN; need];
                    let mut out = vec![f32::NAN; order.len() * qd];
                    attention_decode(exec.as_ref(), &shape, &rows, &q, &mut scratch, &mut out);
                    for (j, r) in rows.iter().enumerate() {
                        let s = LayerAttention {
                            rows: 1,
                            pos0: r.pos,
                            heads,
                            kv_heads,
                            head_dim: d,
                            capacity: r.capacity,
                            window,
                            scale,
                            per_head: false,
                        };
                        let floats =
                            layer_attention_floats(heads, kv_heads, d, 1, r.pos + 1, false, f16);
                        let mut scratch = vec![f32::NAN; floats.unwrap()];
                        let mut alone = vec![f32::NAN; qd];
                        let qj = &q[j * qd..(j + 1) * qd];
                        let e = exec.as_ref();
                        attention_layer(e, &s, qj, r.keys, r.values, &mut scratch, &mut alone);
                        assert_eq!(
                            bits(&out[j * qd..(j + 1) * qd]),
                            bits(&alone),
                            "heads {heads}/{kv_heads} d {d} window {window:?} f16 {f16} row {j} \
                             at {} on {} threads",
                            r.pos,
                            exec.threads()
                        );
                    }
                }
            }
        }
    }
}
