//! Raw safetensors bytes into the packed-tensor path (`rml::model::packed`): ggml blocks
//! stored as `U8` tensors `[rows, row_bytes]` and marked `"rml.dtype.<name>": "<TYPE>"` in
//! `__metadata__`, read back by `PackedSource::from_marks` / `unpack_view`. Checks: no panic;
//! `from_marks` succeeds exactly when every mark names a block dtype and a tensor of the file
//! stored 2-D as whole rows of blocks; then each marked tensor is served as its block dtype
//! with `k = row_bytes / block_bytes * block_elems` columns over the very bytes of the file
//! (and dequantizes without error), and every unmarked tensor as the file serves it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rml::format::safetensors::SafeTensors;
use rml::format::TensorSource;
use rml::model::packed::{packed_dtype, unpack_view, PackedSource, PACKED_DTYPE_KEY};
use rml::Shape;

fuzz_target!(|data: &[u8]| {
    let Ok(st) = SafeTensors::parse(data) else { return };
    let marks: Vec<(&str, &str)> = st
        .metadata()
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(PACKED_DTYPE_KEY)?, v.as_str())))
        .collect();
    // What each mark should give, worked out here from the directory alone.
    let valid = |tensor: &str, dtype: &str| -> bool {
        let (Some(d), Some(info)) = (packed_dtype(dtype), st.info(tensor)) else { return false };
        let [rows, row_bytes] = *info.shape.dims() else { return false };
        row_bytes % d.block_bytes() == 0 && rows.checked_mul(row_bytes) == Some(info.bytes)
    };
    let all_valid = marks.iter().all(|&(t, d)| valid(t, d));
    let stored = |name: &str| -> rml::Result<(Shape, &[u8])> {
        let info = st.info(name).ok_or_else(|| rml::Error::not_found(name))?;
        Ok((info.shape, st.raw_bytes(name)?))
    };
    let packed = PackedSource::from_marks(
        Box::new(SafeTensors::parse(data).unwrap()),
        st.metadata(),
        &stored,
    );
    let packed = match packed {
        Ok(p) => {
            assert!(all_valid, "from_marks accepted an invalid mark among {marks:?}");
            p
        }
        Err(e) => {
            assert!(!all_valid, "from_marks refused valid marks {marks:?}: {e}");
            return;
        }
    };
    assert_eq!(packed.tensor_names(), st.tensor_names());
    for info in st.infos() {
        let mark = marks.iter().rev().find(|(t, _)| *t == info.name);
        match mark {
            Some(&(_, dtype)) => {
                let d = packed_dtype(dtype).unwrap();
                let v = packed.tensor(&info.name).unwrap();
                let [rows, row_bytes] = *info.shape.dims() else { unreachable!() };
                assert_eq!(v.dtype, d);
                assert_eq!(v.shape.dims(), &[rows, row_bytes / d.block_bytes() * d.block_size()]);
                assert_eq!(v.data.as_ptr(), st.raw_bytes(&info.name).unwrap().as_ptr());
                assert_eq!(v.data.len(), info.bytes);
                assert_eq!(v.shape.storage_bytes(d).unwrap(), v.data.len());
                let again = unpack_view(&info.name, d, info.shape.dims(), v.data).unwrap();
                assert_eq!((again.dtype, again.shape), (v.dtype, v.shape));
                if v.shape.numel() <= 1 << 16 {
                    let mut out = vec![0f32; v.shape.numel()];
                    v.dequantize_into(&mut out).unwrap();
                }
            }
            None => match (packed.tensor(&info.name), st.tensor(&info.name)) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(
                        (a.dtype, a.shape, a.data.as_ptr()),
                        (b.dtype, b.shape, b.data.as_ptr())
                    )
                }
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{}: packed {:?} vs file {:?}", info.name, a.is_ok(), b.is_ok()),
            },
        }
    }
});
