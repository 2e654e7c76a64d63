//! `rml convert IN OUT --dtype f32|bf16|q8_0`: a GGUF file or Hugging Face folder in, a
//! Hugging Face folder out (`config.json`, `model.safetensors` written with the `safetensors`
//! crate, `tokenizer.json`).
//!
//! Every Llama tensor is widened or dequantized to f32, renamed to its Hugging Face name, and
//! (from GGUF) its q/k rows are put back in Hugging Face's rotate-half order
//! ([`rml::model::arch::llama::unpermute_qk_rows`]); then it is stored as f32, bf16 (rounded to
//! nearest even) or, for `q8_0`, matrices whose rows split into 32-blocks are quantized to
//! Q8_0 and stored packed ([`rml::model::packed`]: a `U8` tensor of the blocks, marked in the
//! metadata; Q8_0 sources are copied as they are) and the rest as f32. Tensors are converted
//! one at a time while the file is written.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use clap::ValueEnum;
use rml::kernels::quant::quantize_row_q8_0;
use rml::load::{Model, ModelFormat};
use rml::model::arch::llama::{hf_tensor_name, unpermute_qk_rows};
use rml::model::config::{ModelConfig, RopeScaling};
use rml::model::packed;
use rml::{DType, Error, Result};
use safetensors::tensor::{Dtype, View};

/// The element type `convert` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutDType {
    /// IEEE binary32.
    F32,
    /// bfloat16, rounded to nearest even.
    Bf16,
    /// Q8_0 blocks for matrices (rows a multiple of 32), f32 for the rest.
    #[value(name = "q8_0")]
    Q8_0,
}

/// One output tensor, converted when the writer asks for its bytes.
struct Lazy<'m> {
    model: &'m Model,
    source: String,
    /// The logical shape.
    logical: Vec<usize>,
    /// The shape written (`[rows, row_bytes]` for packed Q8_0).
    stored: Vec<usize>,
    /// Heads of `head_dim` rows to un-permute (GGUF q/k), if any.
    unpermute: Option<usize>,
    /// What is written: F32, BF16, or Q8_0 (packed as U8 `[rows, row_bytes]`).
    dtype: DType,
    failure: &'m std::sync::Mutex<Option<Error>>,
}

impl Lazy<'_> {
    fn convert(&self) -> Result<Vec<u8>> {
        let view = self.model.tensor(&self.source)?;
        if self.dtype == DType::Q8_0 && view.dtype == DType::Q8_0 && self.unpermute.is_none() {
            return Ok(view.data.to_vec());
        }
        let n = view.shape.numel();
        let mut f = vec![0f32; n];
        view.dequantize_into(&mut f)
            .map_err(|e| e.context(format_args!("tensor {:?}", self.source)))?;
        let mut bytes: Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
        if let Some(head_dim) = self.unpermute {
            let rows = self.logical[0];
            let row_bytes = bytes.len() / rows.max(1);
            let mut out = vec![0u8; bytes.len()];
            unpermute_qk_rows(&bytes, &mut out, rows, row_bytes, head_dim)
                .map_err(|e| e.context(format_args!("tensor {:?}", self.source)))?;
            bytes = out;
        }
        let floats = || bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        Ok(match self.dtype {
            DType::BF16 => {
                floats().flat_map(|v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect()
            }
            DType::Q8_0 => {
                let (rows, k) = (self.logical[0], self.logical[1]);
                let rb = DType::Q8_0.row_bytes(k)?;
                let f: Vec<f32> = floats().collect();
                let mut out = vec![0u8; rows * rb];
                for (x, q) in f.chunks_exact(k).zip(out.chunks_exact_mut(rb)) {
                    quantize_row_q8_0(x, q)
                        .map_err(|e| e.context(format_args!("tensor {:?}", self.source)))?;
                }
                out
            }
            _ => bytes,
        })
    }
}

impl View for Lazy<'_> {
    fn dtype(&self) -> Dtype {
        match self.dtype {
            DType::BF16 => Dtype::BF16,
            DType::Q8_0 => Dtype::U8,
            _ => Dtype::F32,
        }
    }

    fn shape(&self) -> &[usize] {
        &self.stored
    }

    fn data(&self) -> Cow<'_, [u8]> {
        match self.convert() {
            Ok(b) => Cow::Owned(b),
            Err(e) => {
                // The writer cannot fail from here: remember the error, write zeros, and
                // delete the file afterwards.
                if let Ok(mut slot) = self.failure.lock() {
                    slot.get_or_insert(e);
                }
                Cow::Owned(vec![0u8; self.data_len()])
            }
        }
    }

    fn data_len(&self) -> usize {
        self.stored.iter().product::<usize>()
            * if self.dtype == DType::Q8_0 { 1 } else { self.dtype.block_bytes() }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).context(path.display())
}

/// The Hugging Face `config.json` for `c` (transformers 4 dialect).
fn config_json(c: &ModelConfig, dtype: OutDType) -> serde_json::Value {
    let rope_scaling = match c.rope_scaling {
        RopeScaling::None => serde_json::Value::Null,
        RopeScaling::Linear { factor } => {
            serde_json::json!({"rope_type": "linear", "factor": factor})
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            serde_json::json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings,
            })
        }
    };
    serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "attention_bias": false,
        "mlp_bias": false,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "max_position_embeddings": c.max_position_embeddings,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "rope_scaling": rope_scaling,
        "tie_word_embeddings": c.tie_word_embeddings,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": match c.eos_token_ids.as_slice() {
            [one] => serde_json::json!(one),
            many => serde_json::json!(many),
        },
        "torch_dtype": match dtype { OutDType::Bf16 => "bfloat16", _ => "float32" },
    })
}

/// Converts `input` into the folder `output`.
///
/// # Errors
///
/// The input's open errors; `INVALID_ARGUMENT` if `output` exists and is not an empty
/// folder; I/O errors naming the file.
pub fn run(input: &Path, output: &Path, dtype: OutDType) -> Result<()> {
    let model = Model::open(input)?;
    if output.exists() && std::fs::read_dir(output).map_err(io(output))?.next().is_some() {
        return Err(Error::invalid_argument(format_args!(
            "{}: output folder exists and is not empty",
            output.display()
        )));
    }
    let c = model.config().clone();
    let gguf = model.format() == ModelFormat::Gguf;
    let failure = std::sync::Mutex::new(None);
    let mut meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    let mut tensors = Vec::new();
    let mut skipped = Vec::new();
    for info in model.tensor_infos() {
        let name = if gguf { hf_tensor_name(&info.name) } else { Some(info.name.clone()) };
        let Some(name) = name else {
            skipped.push(info.name.clone());
            continue;
        };
        if c.tie_word_embeddings && name == "lm_head.weight" {
            continue;
        }
        let unpermute = (gguf
            && (name.ends_with("self_attn.q_proj.weight")
                || name.ends_with("self_attn.k_proj.weight")))
        .then_some(c.head_dim);
        let shape = info.shape.dims().to_vec();
        let (out, stored) = match dtype {
            OutDType::F32 => (DType::F32, shape.clone()),
            OutDType::Bf16 => (DType::BF16, shape.clone()),
            OutDType::Q8_0 => match shape[..] {
                [rows, k] if k % 32 == 0 => {
                    let (key, value) = packed::metadata_entry(&name, DType::Q8_0);
                    meta.insert(key, value);
                    (DType::Q8_0, vec![rows, DType::Q8_0.row_bytes(k)?])
                }
                _ => (DType::F32, shape.clone()),
            },
        };
        tensors.push((
            name,
            Lazy {
                model: &model,
                source: info.name.clone(),
                logical: shape,
                stored,
                unpermute,
                dtype: out,
                failure: &failure,
            },
        ));
    }
    std::fs::create_dir_all(output).map_err(io(output))?;
    let weights = output.join("model.safetensors");
    eprintln!("rml: writing {} tensors to {}", tensors.len(), weights.display());
    safetensors::serialize_to_file(tensors, Some(meta), &weights)
        .map_err(|e| Error::data_loss(format_args!("{}: {e}", weights.display())))?;
    if let Some(e) = failure.lock().ok().and_then(|mut f| f.take()) {
        let _ = std::fs::remove_file(&weights);
        return Err(e);
    }
    let cfg_path = output.join("config.json");
    let text = serde_json::to_string_pretty(&config_json(&c, dtype))
        .map_err(|e| Error::internal(format_args!("config.json: {e}")))?;
    std::fs::write(&cfg_path, text).map_err(io(&cfg_path))?;
    let tok_path = output.join("tokenizer.json");
    match crate::load_tokenizer(&model) {
        Ok(tok) => tok.save(&tok_path)?,
        Err(e) => eprintln!("rml: warning: no tokenizer written: {e}"),
    }
    if !skipped.is_empty() {
        eprintln!(
            "rml: skipped {} tensors that are not Llama weights: {}",
            skipped.len(),
            skipped.join(", ")
        );
    }
    eprintln!("rml: wrote {}", output.display());
    Ok(())
}
