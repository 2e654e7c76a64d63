//! Fidelity of rml against llama.cpp: teacher-forced logits of the same GGUF, position by
//! position, in both engines' exact (f32) and int8 paths. Driven per weight type by
//! `tools/fidelity.sh`, which requantizes SmolLM2 with llama.cpp and writes llama.cpp's
//! logits with `tools/llamacpp_logits.c`.
//!
//! ```text
//! cargo run --release --features cli --example fidelity -- tokens DIR
//! cargo run --release --features cli --example fidelity -- compare TYPE MODEL.gguf DEQ.gguf DIR
//! cargo run --release --features cli --example fidelity -- dequant MODEL.gguf OUT_DIR [SUBSTRING]
//! ```
//!
//! `tokens` writes `DIR/NAME.tokens` (u32 little-endian ids; `tests/data/smollm2-135m`'s
//! tokenizer, chat prompts in SmolLM2's chat template) for every prompt of
//! `tests/data/agreement/prompts.json` but `long_code` (set `RML_FIDELITY_LONG=1` to keep it).
//!
//! `compare` reads, for every `DIR/NAME.tokens`, llama.cpp's logits `DIR/NAME.llama-f32.f32`
//! (llama.cpp on `DEQ.gguf`, an F32 requantization of `MODEL.gguf`: the same weights
//! dequantized by llama.cpp, run with an f32 KV cache and flash attention off, so every
//! product is f32) and `DIR/NAME.llama-q.f32` (llama.cpp on `MODEL.gguf` as it runs by
//! default: activations quantized to its 8-bit block formats, f16 KV cache), each
//! `positions × vocab` f32 little-endian. It prints one Markdown table row per type
//! ([`HEADER`]) over all positions of all prompts:
//! - `f32`: rml [`Activations::F32`] on `MODEL.gguf` (weights dequantized inside the
//!   kernels) against llama.cpp's f32 path on `DEQ.gguf`;
//! - `deq`: rml [`Activations::F32`] on `MODEL.gguf` against rml on `DEQ.gguf`: isolates
//!   rml's dequantization (llama.cpp wrote `DEQ.gguf`) from everything else;
//! - `int8`, `plain`: rml [`Activations::Int8`] and [`Activations::Int8Plain`], f16 KV cache
//!   like llama.cpp's, against llama.cpp's int8 path on `MODEL.gguf`;
//! - `ll-q`: llama.cpp's int8 path against its own f32 path: the size of llama.cpp's own
//!   int8 error, the scale the cross-engine differences are read against.
//!
//! Each entry is `max |Δlogit| / mean |Δlogit| / top-1 agreement %`. After the row, on
//! standard error, for the `fixture` prompt (the README's story prompt and the first words of
//! its f32 continuation) and `story` (when `DIR/story.tokens` exists: `tools/fidelity.sh` writes
//! there the README's prompt and llama.cpp's greedy continuation on `MODEL.gguf`), it lists
//! each engine's greedy token and top-2 gap per position (also rml [`Activations::Int8`] with
//! an f32 KV cache, what `rml generate` runs by default) and each position where two engines'
//! greedy choices differ: the text so far, each
//! engine's top token and its top-2 gap (logit of the first minus the second), and `Δ`, how
//! much the two engines disagree on the difference between the two candidate tokens
//! (`(r[a] - r[b]) - (l[a] - l[b])`, `a` rml's choice, `b` llama.cpp's). A near-tie shows as
//! top-2 gaps below `Δ` and below the differences seen everywhere else; an error as large
//! `|Δlogit|` or low agreement across all prompts for one type.
//!
//! `dequant` writes rml's dequantization ([`rml::quant::dequantize`]) of every quantized
//! tensor whose name contains `SUBSTRING` (all by default) to `OUT_DIR/NAME.f32`, f32
//! little-endian in storage order, and prints `NAME DTYPE` lines: `tools/dequant_check.py`
//! compares them with gguf-py's `dequantize` on the same file.

use std::path::{Path, PathBuf};

use rml::exec::ThreadPool;
use rml::load::Model;
use rml::model::packed::PackedSource;
use rml::model::{DecoderLM, DecoderOptions, KvDtype};
use rml::ops::Activations;
use rml::tokenizer::Tokenizer;
use rml::{Error, Result};

/// The table's header (Markdown), printed by `compare` when `RML_FIDELITY_HEADER=1`.
const HEADER: &str = "| type | f32: rml vs llama.cpp | deq: rml q vs rml deq | int8: rml vs llama.cpp | plain: rml vs llama.cpp | ll-q: llama.cpp q vs f32 |\n|---|---|---|---|---|---|";

/// SmolLM2's chat template (ChatML with its default system turn) for one user turn.
fn chat_prompt(prompt: &str) -> String {
    format!(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    )
}

/// Sums of the differences between two sets of logits.
#[derive(Default, Clone, Copy)]
struct Diff {
    positions: usize,
    same_top1: usize,
    abs_sum: f64,
    values: usize,
    max_abs: f32,
}

impl Diff {
    fn add(&mut self, a: &[f32], b: &[f32], vocab: usize) {
        for (x, y) in a.chunks_exact(vocab).zip(b.chunks_exact(vocab)) {
            self.positions += 1;
            self.same_top1 += usize::from(top2(x).0 == top2(y).0);
            for (u, v) in x.iter().zip(y) {
                let d = (u - v).abs();
                self.abs_sum += f64::from(d);
                self.max_abs = self.max_abs.max(d);
            }
            self.values += vocab;
        }
    }

    fn cell(&self) -> String {
        format!(
            "{:.2e} / {:.2e} / {:.2}%",
            self.max_abs,
            self.abs_sum / self.values.max(1) as f64,
            100.0 * self.same_top1 as f64 / self.positions.max(1) as f64
        )
    }
}

/// The indices of the largest and second-largest values (the first of equals).
fn top2(v: &[f32]) -> (usize, usize) {
    let (mut a, mut b) = (0, usize::from(v.len() > 1));
    if v.len() > 1 && v[1] > v[0] {
        (a, b) = (1, 0);
    }
    for (i, &x) in v.iter().enumerate().skip(2) {
        if x > v[a] {
            (a, b) = (i, a);
        } else if x > v[b] {
            b = i;
        }
    }
    (a, b)
}

fn rml_logits(
    model: &Model,
    pool: &ThreadPool,
    ids: &[u32],
    act: Activations,
    kv: KvDtype,
) -> Result<Vec<f32>> {
    let c = model.config();
    let opts = DecoderOptions {
        context_len: Some(ids.len()),
        activations: act,
        kv_dtype: kv,
        ..DecoderOptions::default()
    };
    let mut dec = DecoderLM::new(c, &PackedSource::new(model)?, pool, opts)?;
    let mut out = vec![0f32; ids.len() * c.vocab_size];
    dec.forward(ids, Some(&mut out), None)?;
    Ok(out)
}

fn read_u32s(path: &Path) -> Result<Vec<u32>> {
    let b = std::fs::read(path)?;
    Ok(b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

fn read_f32s(path: &Path, want: usize) -> Result<Vec<f32>> {
    let b = std::fs::read(path)
        .map_err(|e| Error::invalid_argument(format_args!("{}: {e}", path.display())))?;
    let v: Vec<f32> =
        b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if v.len() != want {
        return Err(Error::invalid_argument(format_args!(
            "{}: {} values, want {want}",
            path.display(),
            v.len()
        )));
    }
    Ok(v)
}

fn tokenizer() -> Result<Tokenizer> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    Tokenizer::from_file(&root.join("tests/data/smollm2-135m/tokenizer.json"))
}

/// `tokens DIR`.
fn tokens(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tok = tokenizer()?;
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("tests/data/agreement/prompts.json"))?)
            .map_err(|e| Error::invalid_argument(format_args!("prompts.json: {e}")))?;
    let long = std::env::var("RML_FIDELITY_LONG").as_deref() == Ok("1");
    for p in spec["prompts"].as_array().cloned().unwrap_or_default() {
        let name = p["name"].as_str().unwrap_or("?");
        if name == "long_code" && !long {
            continue;
        }
        let text = p["text"].as_str().unwrap_or("");
        let text = if p["chat"].as_bool() == Some(true) { chat_prompt(text) } else { text.into() };
        let ids = tok.encode(&text)?;
        let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        std::fs::write(dir.join(format!("{name}.tokens")), bytes)?;
        println!("{name}: {} tokens", ids.len());
    }
    Ok(())
}

/// The last 24 characters of `ids` as text, for a position's label.
fn story_tail(tok: &Tokenizer, ids: &[u32]) -> Result<String> {
    let text = tok.decode(ids)?;
    let n = text.chars().count();
    let tail: String = text.chars().skip(n.saturating_sub(24)).collect();
    Ok(format!("{tail:?}"))
}

/// One position where two engines' greedy choices differ, as a line of text.
fn divergence(tok: &Tokenizer, ids: &[u32], pos: usize, r: &[f32], l: &[f32]) -> Result<String> {
    let (ra, rb) = top2(r);
    let (la, lb) = top2(l);
    let word = |i: usize| tok.decode(&[i as u32]).map(|s| format!("{s:?}"));
    let delta = (r[ra] - r[la]) - (l[ra] - l[la]);
    let text = story_tail(tok, &ids[..=pos])?;
    Ok(format!(
        "  pos {pos:>3} after {text}: rml {} (gap {:.3} over {}), llama.cpp {} (gap {:.3} over {}), Δ {delta:.3}",
        word(ra)?,
        r[ra] - r[rb],
        word(rb)?,
        word(la)?,
        l[la] - l[lb],
        word(lb)?,
    ))
}

/// `compare TYPE MODEL DEQ DIR`.
fn compare(label: &str, model_path: &Path, deq_path: &Path, dir: &Path) -> Result<()> {
    let model = Model::open(model_path)?;
    let deq = Model::open(deq_path)?;
    let vocab = model.config().vocab_size;
    let pool = ThreadPool::builder().build()?;
    let tok = tokenizer()?;
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tokens"))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(Error::invalid_argument(format_args!(
            "no .tokens files in {} (run `fidelity tokens` first)",
            dir.display()
        )));
    }
    let [mut f32d, mut deqd, mut int8d, mut plaind, mut llqd] = [Diff::default(); 5];
    let mut story = Vec::new();
    for path in &names {
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
        let ids = read_u32s(path)?;
        let n = ids.len() * vocab;
        let ll_f32 = read_f32s(&dir.join(format!("{name}.llama-f32.f32")), n)?;
        let ll_q = read_f32s(&dir.join(format!("{name}.llama-q.f32")), n)?;
        let r_f32 = rml_logits(&model, &pool, &ids, Activations::F32, KvDtype::F32)?;
        f32d.add(&r_f32, &ll_f32, vocab);
        deqd.add(&r_f32, &rml_logits(&deq, &pool, &ids, Activations::F32, KvDtype::F32)?, vocab);
        let r_int8 = rml_logits(&model, &pool, &ids, Activations::Int8, KvDtype::F16)?;
        int8d.add(&r_int8, &ll_q, vocab);
        let r_plain = rml_logits(&model, &pool, &ids, Activations::Int8Plain, KvDtype::F16)?;
        plaind.add(&r_plain, &ll_q, vocab);
        llqd.add(&ll_q, &ll_f32, vocab);
        if name == "fixture" || name == "story" {
            // What `rml generate` runs by default: int8 with an f32 KV cache.
            let r_int8_kv32 = rml_logits(&model, &pool, &ids, Activations::Int8, KvDtype::F32)?;
            story.push(format!("  {name}:"));
            let sources = [
                ("rml f32", &r_f32),
                ("llama.cpp f32", &ll_f32),
                ("rml int8", &r_int8),
                ("rml int8 kv-f32", &r_int8_kv32),
                ("rml int8-plain", &r_plain),
                ("llama.cpp int8", &ll_q),
            ];
            story.push(format!(
                "  greedy choice (top-2 gap) per position: {}",
                sources.map(|s| s.0).join(" | ")
            ));
            for pos in 0..ids.len() {
                let mut line = format!("  {pos:>3} {:<28}", story_tail(&tok, &ids[..=pos])?);
                for (_, l) in sources {
                    let row = &l[pos * vocab..][..vocab];
                    let (a, b) = top2(row);
                    line += &format!(
                        " | {:<9} {:.3}",
                        format!("{:?}", tok.decode(&[a as u32])?),
                        row[a] - row[b]
                    );
                }
                story.push(line);
            }
            for (what, r, l) in [
                ("f32", &r_f32, &ll_f32),
                ("int8", &r_int8, &ll_q),
                ("int8-plain", &r_plain, &ll_q),
                ("int8 kv-f32", &r_int8_kv32, &ll_q),
            ] {
                story.push(format!("  {what}: rml vs llama.cpp, greedy choices that differ:"));
                for (pos, (rr, lr)) in r.chunks_exact(vocab).zip(l.chunks_exact(vocab)).enumerate()
                {
                    if top2(rr).0 != top2(lr).0 {
                        story.push(divergence(&tok, &ids, pos, rr, lr)?);
                    }
                }
            }
        }
    }
    if std::env::var("RML_FIDELITY_HEADER").as_deref() == Ok("1") {
        println!("{HEADER}");
    }
    println!(
        "| {label} | {} | {} | {} | {} | {} |",
        f32d.cell(),
        deqd.cell(),
        int8d.cell(),
        plaind.cell(),
        llqd.cell()
    );
    for line in story {
        eprintln!("{line}");
    }
    Ok(())
}

/// `dequant MODEL OUT_DIR [SUBSTRING]`.
fn dequant(model_path: &Path, out: &Path, filter: &str) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let model = Model::open(model_path)?;
    let c = model.container();
    for info in c.tensor_infos() {
        if !info.name.contains(filter) {
            continue;
        }
        let t = c.tensor(&info.name)?;
        if !t.dtype.is_quantized() {
            continue;
        }
        let mut v = vec![0f32; t.shape.numel()];
        rml::quant::dequantize(t.dtype, t.data, &mut v)?;
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(out.join(format!("{}.f32", info.name)), bytes)?;
        println!("{} {}", info.name, t.dtype);
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["tokens", dir] => tokens(Path::new(dir)),
        ["compare", label, model, deq, dir] => {
            compare(label, Path::new(model), Path::new(deq), Path::new(dir))
        }
        ["dequant", model, out] => dequant(Path::new(model), Path::new(out), ""),
        ["dequant", model, out, filter] => dequant(Path::new(model), Path::new(out), filter),
        _ => Err(Error::invalid_argument(
            "usage: fidelity tokens DIR | compare TYPE MODEL.gguf DEQ.gguf DIR | \
             dequant MODEL.gguf OUT_DIR [NAME_SUBSTRING]",
        )),
    }
}
