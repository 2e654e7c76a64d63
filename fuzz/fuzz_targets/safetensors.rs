//! Raw bytes into the safetensors parser. Whatever the input: no panic, no out-of-bounds
//! read, no huge allocation; every accepted file hands out views that match their shapes;
//! and every file rml accepts, the `safetensors` crate accepts with the same tensors
//! (rml is stricter — duplicate names, rank above 8 — never looser).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rml::format::safetensors::SafeTensors;
use rml::format::{FileDType, TensorSource};

fuzz_target!(|data: &[u8]| {
    let Ok(st) = SafeTensors::parse(data) else { return };
    let theirs = safetensors::SafeTensors::deserialize(data)
        .expect("rml accepted a file the safetensors crate rejects");
    assert_eq!(theirs.len(), st.len());
    let mut end = st.data_start();
    for info in st.infos() {
        // Sorted, contiguous, inside the file.
        assert_eq!(info.offset, end, "{}", info.name);
        end = info.offset + info.bytes;
        let t = theirs.tensor(&info.name).expect("tensor missing in the reference");
        assert_eq!(t.shape(), info.shape.dims());
        assert_eq!(t.data(), st.raw_bytes(&info.name).unwrap());
        assert_eq!(format!("{:?}", t.dtype()), info.dtype.name());
        match info.dtype {
            FileDType::Supported(d) => {
                let v = st.tensor(&info.name).unwrap();
                assert_eq!(v.data.len(), v.shape.storage_bytes(d).unwrap());
                let _ = v.to_tensor().unwrap();
                if v.shape.numel() <= 1 << 16 {
                    let mut out = vec![0f32; v.shape.numel()];
                    let _ = v.dequantize_into(&mut out);
                }
            }
            FileDType::Unsupported(_) => assert!(st.tensor(&info.name).is_err()),
        }
    }
    assert_eq!(end, data.len());
    let _ = st.tensor_names();
});
