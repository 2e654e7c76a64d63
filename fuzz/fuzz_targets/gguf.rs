//! Raw bytes into the GGUF parser and every accessor on what it accepts: no panic, no
//! out-of-bounds read, no huge allocation; accepted tensors lie inside the file, do not
//! overlap, and match their shapes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rml::format::gguf::Gguf;
use rml::format::{FileDType, TensorSource};

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else { return };
    assert_eq!(g.data_start() % g.alignment(), 0);
    for (key, value) in g.metadata() {
        let _ = format!("{key} {value}");
        if let Some(a) = value.as_array() {
            assert_eq!(a.iter().count(), a.len(), "{key}: array iteration ended early");
        }
    }
    let _ = g.tokens();
    let _ = g.merges();
    let _ = g.token_types();
    let _ = g.scores();
    let _ = g.bos_token_id();
    let _ = g.eos_token_id();
    let _ = rml::model::config::from_gguf(&g);
    // Non-empty tensors never share a byte.
    let mut ranges: Vec<(usize, usize)> =
        g.infos().iter().filter(|t| t.bytes > 0).map(|t| (t.offset, t.offset + t.bytes)).collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(w[0].1 <= w[1].0, "accepted overlapping tensors {w:?}");
    }
    for info in g.infos() {
        assert!(info.offset >= g.data_start() && info.offset + info.bytes <= data.len());
        assert_eq!(g.raw_bytes(&info.name).unwrap().len(), info.bytes);
        match info.dtype {
            FileDType::Supported(d) => {
                let v = g.tensor(&info.name).unwrap();
                assert_eq!(v.data.len(), v.shape.storage_bytes(d).unwrap());
                if v.shape.numel() <= 1 << 16 {
                    let mut out = vec![0f32; v.shape.numel()];
                    v.dequantize_into(&mut out).unwrap();
                }
            }
            FileDType::Unsupported(_) => assert!(g.tensor(&info.name).is_err()),
        }
        for spec in rml::model::arch::FAMILIES {
            use rml::model::arch::ModelFormat::{Gguf, Safetensors};
            let _ = spec.map_name(Gguf, Safetensors, &info.name);
        }
    }
    let _ = g.tensor_names();
});
