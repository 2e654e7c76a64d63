//! Teacher-forced agreement of rml's int8-activation logits ([`Activations::Int8`], the
//! default with outlier correction; [`Activations::Int8Plain`]; [`Activations::Mixed`]; and,
//! when given, llama.cpp's) with rml's own f32-activation logits, the yardstick (3e-5 from
//! PyTorch on the SmolLM2 fixture).
//!
//! ```text
//! cargo run --release --features cli --example int8_agreement -- MODEL.gguf OUT_DIR
//! ```
//!
//! For every prompt of `tests/data/agreement/prompts.json` (chat prompts wrapped in the
//! SmolLM2 chat template) it tokenizes with `tests/data/smollm2-135m/tokenizer.json`, writes
//! the ids to `OUT_DIR/NAME.tokens` (u32 little-endian; an existing file is reused), runs them
//! through the model with f32 activations and once per mode of `RML_AGREE_MODES`
//! (comma-separated `int8`, `int8-plain`, `mixed`; all three by default), every position's
//! logits, and reports
//! per prompt, over the short prompts (all but `long_code`) and over all positions: argmax agreement (the share of positions whose top token is the f32
//! one), and the mean and largest absolute logit difference. If `OUT_DIR/NAME.llama.f32`
//! exists (llama.cpp's logits for the same ids, `positions × vocab` f32 little-endian, as
//! written by `tools/llamacpp_logits.c` with its defaults, llama.cpp's own int8 path:
//! `target/fidelity/llamacpp_logits MODEL.gguf OUT_DIR/NAME.tokens OUT_DIR/NAME.llama.f32
//! ...`, built by `tools/fidelity.sh`), llama.cpp is compared with the same yardstick.

use std::path::{Path, PathBuf};

use rml::exec::ThreadPool;
use rml::load::Model;
use rml::model::packed::PackedSource;
use rml::model::{DecoderLM, DecoderOptions};
use rml::ops::Activations;
use rml::tokenizer::Tokenizer;
use rml::{Error, Result};

/// SmolLM2's chat template (ChatML with its default system turn, as in its GGUF's
/// `tokenizer.chat_template`) for one user turn, ready for the assistant's reply.
fn chat_prompt(prompt: &str) -> String {
    format!(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    )
}

/// Agreement sums over positions.
#[derive(Default, Clone, Copy)]
struct Agree {
    positions: usize,
    same_argmax: usize,
    abs_sum: f64,
    values: usize,
    max_abs: f32,
}

impl Agree {
    fn add(&mut self, yard: &[f32], other: &[f32], vocab: usize) {
        for (a, b) in yard.chunks_exact(vocab).zip(other.chunks_exact(vocab)) {
            self.positions += 1;
            self.same_argmax += usize::from(argmax(a) == argmax(b));
            for (x, y) in a.iter().zip(b) {
                let d = (x - y).abs();
                self.abs_sum += d as f64;
                self.max_abs = self.max_abs.max(d);
            }
            self.values += vocab;
        }
    }

    fn merge(&mut self, o: &Agree) {
        self.positions += o.positions;
        self.same_argmax += o.same_argmax;
        self.abs_sum += o.abs_sum;
        self.values += o.values;
        self.max_abs = self.max_abs.max(o.max_abs);
    }

    fn show(&self) -> String {
        format!(
            "{:>4}/{:<4} {:>6.2}%  mean {:.4}  max {:.3}",
            self.same_argmax,
            self.positions,
            100.0 * self.same_argmax as f64 / self.positions.max(1) as f64,
            self.abs_sum / self.values.max(1) as f64,
            self.max_abs
        )
    }
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

fn logits(model: &Model, pool: &ThreadPool, ids: &[u32], act: Activations) -> Result<Vec<f32>> {
    let c = model.config();
    let opts = DecoderOptions {
        context_len: Some(ids.len()),
        activations: act,
        ..DecoderOptions::default()
    };
    let mut dec = DecoderLM::new(c, &PackedSource::new(model)?, pool, opts)?;
    let mut out = vec![0f32; ids.len() * c.vocab_size];
    dec.forward(ids, Some(&mut out), None)?;
    Ok(out)
}

fn read_f32(path: &Path) -> Option<Vec<f32>> {
    let b = std::fs::read(path).ok()?;
    Some(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        return Err(Error::invalid_argument("usage: int8_agreement MODEL.gguf OUT_DIR"));
    }
    let (model_path, out) = (PathBuf::from(&args[1]), PathBuf::from(&args[2]));
    std::fs::create_dir_all(&out)?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tok = Tokenizer::from_file(&root.join("tests/data/smollm2-135m/tokenizer.json"))?;
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("tests/data/agreement/prompts.json"))?)
            .map_err(|e| Error::invalid_argument(format_args!("prompts.json: {e}")))?;
    let prompts = spec["prompts"].as_array().cloned().unwrap_or_default();
    let model = Model::open(&model_path)?;
    let vocab = model.config().vocab_size;
    let pool = ThreadPool::builder().build()?;
    println!(
        "{} | yardstick: rml f32 activations | kernels {}",
        model_path.display(),
        rml::kernels::active()?.isa()
    );
    // The modes compared with the yardstick: RML_AGREE_MODES (comma-separated, of int8,
    // int8-plain, mixed), all three by default.
    let modes: Vec<(&str, Activations)> = std::env::var("RML_AGREE_MODES")
        .unwrap_or_else(|_| "int8,int8-plain,mixed".into())
        .split(',')
        .map(|m| match m {
            "int8" => Ok(("rml int8", Activations::Int8)),
            "int8-plain" => Ok(("rml int8-plain", Activations::Int8Plain)),
            "mixed" => Ok(("rml mixed", Activations::Mixed)),
            other => Err(Error::invalid_argument(format_args!(
                "RML_AGREE_MODES: unknown mode {other:?} (int8, int8-plain, mixed)"
            ))),
        })
        .collect::<Result<_>>()?;
    print!("{:<18} {:>6}", "prompt", "tokens");
    for (label, _) in &modes {
        print!("  {label:<44}");
    }
    println!("  llama.cpp");
    // Sums per mode, the last being llama.cpp's: [short prompts, all prompts].
    let mut sums = vec![[Agree::default(); 2]; modes.len() + 1];
    let mut llama_prompts = 0;
    for p in &prompts {
        let name = p["name"].as_str().unwrap_or("?");
        let text = p["text"].as_str().unwrap_or("");
        let text = if p["chat"].as_bool() == Some(true) { chat_prompt(text) } else { text.into() };
        // Ids from an earlier run are reused, so that llama.cpp's logits stay aligned.
        let tokens_path = out.join(format!("{name}.tokens"));
        let ids: Vec<u32> = match std::fs::read(&tokens_path) {
            Ok(b) => {
                b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
            }
            Err(_) => {
                let ids = tok.encode(&text)?;
                let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
                std::fs::write(&tokens_path, bytes)?;
                ids
            }
        };
        let short = usize::from(name != "long_code");
        let yard = logits(&model, &pool, &ids, Activations::F32)?;
        print!("{name:<18} {:>6}", ids.len());
        for (i, &(_, act)) in modes.iter().enumerate() {
            let mut a = Agree::default();
            a.add(&yard, &logits(&model, &pool, &ids, act)?, vocab);
            sums[i][1].merge(&a);
            if short == 1 {
                sums[i][0].merge(&a);
            }
            print!("  {:<44}", a.show());
        }
        let llama = match read_f32(&out.join(format!("{name}.llama.f32"))) {
            Some(l) if l.len() == yard.len() => {
                let mut b = Agree::default();
                b.add(&yard, &l, vocab);
                sums[modes.len()][1].merge(&b);
                if short == 1 {
                    sums[modes.len()][0].merge(&b);
                }
                llama_prompts += 1;
                b.show()
            }
            Some(l) => format!("(llama logits have {} values, want {})", l.len(), yard.len()),
            None => "(no llama.cpp logits)".into(),
        };
        println!("  {llama}");
    }
    for (which, label) in [(0, "SHORT"), (1, "ALL")] {
        print!("{label:<18} {:>6}", sums[0][which].positions);
        for s in &sums {
            print!("  {:<44}", s[which].show());
        }
        println!(" ({llama_prompts} prompts with llama.cpp logits)");
    }
    Ok(())
}
