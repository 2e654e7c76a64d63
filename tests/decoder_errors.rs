//! `DecoderLM::forward`'s error contract: an error in a later prefill chunk leaves the position
//! (and so the cache) as it was, and non-finite values are one documented error — `DataLoss`
//! naming the position — with f32 and with int8 activations.
//!
//! The tiny Llama with one token's embedding row set to NaN: a forward without that token is
//! clean, one with it turns the hidden states at and after it into NaN.

mod decoder_common;

use std::collections::HashMap;

use decoder_common::{data, leak_aligned};
use rml::format::safetensors::SafeTensors;
use rml::format::{TensorSource, TensorView};
use rml::model::config::parse_config;
use rml::model::{DecoderLM, DecoderOptions};
use rml::ops::Activations;
use rml::{Code, DType, InlineExecutor, Shape};

/// The poisoned token.
const BAD: u32 = 77;

/// Tensors by name, each in a 64-byte aligned buffer that lives for the test process.
struct Source(HashMap<String, (DType, Shape, &'static [u8])>);

impl<'a> TensorSource<'a> for &'a Source {
    fn tensor(&self, name: &str) -> rml::Result<TensorView<'a>> {
        let (dtype, shape, data) = self.0.get(name).ok_or_else(|| {
            rml::Error::not_found(format_args!("tensor {name:?} is not in the model"))
        })?;
        Ok(TensorView { dtype: *dtype, shape: *shape, data })
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

fn leak(bytes: Vec<u8>) -> &'static [u8] {
    let mut block = rml::mem::AlignedBlock::try_new(bytes.len()).unwrap();
    block.as_mut_slice().copy_from_slice(&bytes);
    Box::leak(Box::new(block)).as_slice()
}

/// The tiny f32 model, its matrices with rows of 32-multiples in Q8_0 when `q8`, and token
/// `BAD`'s embedding row NaN when `poison`.
fn source(q8: bool, poison: bool) -> Source {
    let dir = data("tiny-llama/f32");
    let st = SafeTensors::parse(leak_aligned(&dir.join("model.safetensors"))).unwrap();
    let mut map = HashMap::new();
    for name in st.tensor_names() {
        let v = st.tensor(name).unwrap();
        let mut f = vec![0f32; v.shape.numel()];
        v.dequantize_into(&mut f).unwrap();
        let dims = v.shape.dims().to_vec();
        if poison && name == "model.embed_tokens.weight" {
            let h = dims[1];
            f[BAD as usize * h..(BAD as usize + 1) * h].fill(f32::NAN);
        }
        let entry = match dims[..] {
            [rows, k] if q8 && k % 32 == 0 && name != "model.embed_tokens.weight" => {
                let rb = k / 32 * 34;
                let mut q = vec![0u8; rows * rb];
                for (x, out) in f.chunks_exact(k).zip(q.chunks_exact_mut(rb)) {
                    rml::quant::quantize_row_q8_0(x, out).unwrap();
                }
                (DType::Q8_0, v.shape, leak(q))
            }
            _ => (DType::F32, v.shape, leak(f.iter().flat_map(|x| x.to_le_bytes()).collect())),
        };
        map.insert(name.to_string(), entry);
    }
    Source(map)
}

fn decoder(src: &'static Source, act: Activations) -> DecoderLM<'static> {
    let cfg = parse_config(&std::fs::read_to_string(data("tiny-llama/f32/config.json")).unwrap())
        .unwrap();
    let opts = DecoderOptions {
        context_len: Some(32),
        activations: act,
        prefill_chunk: 2,
        ..DecoderOptions::default()
    };
    DecoderLM::new(&cfg, &src, &InlineExecutor, opts).unwrap()
}

#[test]
fn an_error_in_a_later_prefill_chunk_changes_nothing_and_non_finite_is_data_loss() {
    for (q8, act, what) in
        [(false, Activations::F32, "logits"), (true, Activations::Int8Plain, "activations")]
    {
        let src: &'static Source = Box::leak(Box::new(source(q8, true)));
        let clean: &'static Source = Box::leak(Box::new(source(q8, false)));
        let mut m = decoder(src, act);
        let mut want = decoder(clean, act);
        // A clean prefix is cached.
        m.prefill(&[1, 2, 3]).unwrap();
        want.prefill(&[1, 2, 3]).unwrap();
        // Chunks [4, 5] [6, BAD] [8]: the first runs clean and is cached before the error.
        let e = m.prefill(&[4, 5, 6, BAD, 8]).unwrap_err();
        assert_eq!(e.code(), Code::DataLoss, "{act:?}: {e}");
        assert!(e.message().contains("non-finite"), "{act:?}: {e}");
        assert!(e.message().contains(what), "{act:?}: {e}");
        // f32: the logits of the last token (position 7); int8: the first matmul input with
        // the NaN row, token BAD's (position 6).
        let pos = if act == Activations::F32 { 7 } else { 6 };
        assert!(e.message().contains(&format!("position {pos}")), "{act:?}: {e}");
        assert_eq!(m.position(), 3, "{act:?}: the failed prefill must not move the position");
        // The cache is as before: continuing gives the clean model's logits bit for bit.
        let got = m.decode(9).unwrap().to_vec();
        let expect = want.decode(9).unwrap().to_vec();
        assert_eq!(got, expect, "{act:?}");
        assert_eq!(m.position(), 4);
        // A one-token step with the NaN token fails the same way.
        let e = m.decode(BAD).unwrap_err();
        assert_eq!(e.code(), Code::DataLoss, "{act:?}: {e}");
        assert!(e.message().contains("position 4"), "{act:?}: {e}");
        assert_eq!(m.position(), 4);
    }
}

#[test]
fn all_logits_name_the_first_bad_position() {
    let src: &'static Source = Box::leak(Box::new(source(false, true)));
    let mut m = decoder(src, Activations::F32);
    let vocab = m.config().vocab_size;
    let mut all = vec![0f32; 4 * vocab];
    let e = m.forward(&[4, 5, BAD, 8], Some(&mut all), None).unwrap_err();
    assert_eq!(e.code(), Code::DataLoss, "{e}");
    assert!(e.message().contains("position 2"), "{e}");
    assert_eq!(m.position(), 0);
}

/// A norm weight stored in a block dtype (a damaged file: no converter quantizes a 1-D tensor)
/// is refused at load, naming the tensor, instead of being read as wrong but plausible values.
#[test]
fn a_quantized_norm_vector_is_data_loss_naming_the_tensor() {
    let mut src = source(false, false);
    let name = "model.layers.0.post_attention_layernorm.weight";
    let (_, shape, bytes) = src.0[name];
    let f: Vec<f32> =
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(f.len() % 32, 0, "the tiny model's hidden size is a multiple of 32");
    let mut q = vec![0u8; f.len() / 32 * 34];
    rml::quant::quantize_row_q8_0(&f, &mut q).unwrap();
    src.0.insert(name.to_string(), (DType::Q8_0, shape, leak(q)));
    let src: &'static Source = Box::leak(Box::new(src));
    let cfg = parse_config(&std::fs::read_to_string(data("tiny-llama/f32/config.json")).unwrap())
        .unwrap();
    let opts = DecoderOptions { context_len: Some(32), ..DecoderOptions::default() };
    let e = DecoderLM::new(&cfg, &src, &InlineExecutor, opts).unwrap_err();
    assert_eq!(e.code(), Code::DataLoss, "{e}");
    assert!(e.to_string().contains(name) && e.to_string().contains("Q8_0"), "{e}");
}
