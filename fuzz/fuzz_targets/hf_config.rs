//! Text into the `config.json` parser: no panic; an accepted config satisfies its own
//! invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(c) = rml::model::config::parse_config(text) {
        c.validate().expect("parse_config returned a config that fails validate()");
        assert_eq!(c.num_attention_heads % c.num_key_value_heads, 0);
        assert!(c.kv_groups() >= 1);
    }
});
