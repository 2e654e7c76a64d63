//! Text into `rml::load::parse_index`, the reader of a sharded model's
//! `model.safetensors.index.json` (the loader hands it the file's text). Checks: no panic;
//! an accepted index lists exactly the entries of its `weight_map` object, in order, with
//! unique tensor names, each shard a plain file name (non-empty, no `/` or `\`, not `.` or
//! `..`); a refused one is refused with `DataLoss`, and exactly when the text is not JSON,
//! has no `weight_map` object, or has an entry that breaks those rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rml::Code;

fn plain(file: &str) -> bool {
    !file.is_empty() && !file.contains(['/', '\\']) && file != "." && file != ".."
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // The oracle: serde_json's own reading of the same text.
    let expect: Option<Vec<(String, Option<String>)>> =
        serde_json::from_str::<serde_json::Value>(text).ok().and_then(|v| {
            v.get("weight_map")
                .and_then(|m| m.as_object())
                .map(|m| m.iter().map(|(k, f)| (k.clone(), f.as_str().map(String::from))).collect())
        });
    match rml::load::parse_index(text) {
        Ok(pairs) => {
            let expect = expect.expect("parse_index accepted text without a weight_map object");
            assert_eq!(pairs.len(), expect.len());
            let mut names = std::collections::HashSet::new();
            for ((t, f), (et, ef)) in pairs.iter().zip(&expect) {
                assert_eq!(t, et);
                assert_eq!(Some(f), ef.as_ref());
                assert!(plain(f), "accepted shard {f:?} of tensor {t:?}");
                assert!(names.insert(t.as_str()), "tensor {t:?} listed twice");
            }
        }
        Err(e) => {
            assert_eq!(e.code(), Code::DataLoss, "{e}");
            if let Some(expect) = expect {
                assert!(
                    expect.iter().any(|(_, f)| !f.as_deref().is_some_and(plain)),
                    "parse_index refused a valid weight_map: {e}"
                );
            }
        }
    }
});
