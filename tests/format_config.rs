//! Hugging Face `config.json`: the real files in all dialects and the edge cases, by value.

use rml::model::config::parse_config;
use rml::model::config::{LayerKind, ModelConfig, RopeScaling};
use rml::Code;

fn read(rel: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel),
    )
    .unwrap()
}

fn tiny(dtype: &str) -> ModelConfig {
    ModelConfig {
        arch: &rml::model::arch::llama::SPEC,
        layer_types: vec![LayerKind::Global; 2],
        sliding_window: None,
        local_rope_theta: None,
        query_pre_attn_scalar: None,
        final_logit_softcapping: None,
        vocab_size: 256,
        hidden_size: 64,
        intermediate_size: 176,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 16,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        rope_scaling: RopeScaling::None,
        max_position_embeddings: 512,
        tie_word_embeddings: false,
        bos_token_id: Some(1),
        eos_token_ids: vec![2],
        dtype: Some(dtype.into()),
    }
}

#[test]
fn tiny_llama_transformers5_and_4_dialects() {
    for (dir, dtype) in [("f32", "float32"), ("bf16", "bfloat16"), ("f16", "float16")] {
        let v5 = parse_config(&read(&format!("tiny-llama/{dir}/config.json"))).unwrap();
        assert_eq!(v5, tiny(dtype), "{dir} transformers 5");
        let v4 =
            parse_config(&read(&format!("tiny-llama/{dir}/config.transformers4.json"))).unwrap();
        assert_eq!(v4, tiny(dtype), "{dir} transformers 4");
    }
}

#[test]
fn smollm2_config() {
    let c = parse_config(&read("smollm2-135m/config.json")).unwrap();
    assert_eq!(
        c,
        ModelConfig {
            arch: &rml::model::arch::llama::SPEC,
            layer_types: vec![LayerKind::Global; 30],
            sliding_window: None,
            local_rope_theta: None,
            query_pre_attn_scalar: None,
            final_logit_softcapping: None,
            vocab_size: 49152,
            hidden_size: 576,
            intermediate_size: 1536,
            num_hidden_layers: 30,
            num_attention_heads: 9,
            num_key_value_heads: 3,
            head_dim: 64,
            rms_norm_eps: 9.999999747378752e-06,
            rope_theta: 100_000.0,
            rope_scaling: RopeScaling::None,
            max_position_embeddings: 8192,
            tie_word_embeddings: true,
            bos_token_id: Some(1),
            eos_token_ids: vec![2],
            dtype: Some("float32".into()),
        }
    );
    assert_eq!(c.kv_groups(), 3);
}

/// A transformers-4 style config with `extra` spliced in (later keys must not repeat).
fn v4(extra: &str) -> String {
    let sep = if extra.is_empty() { "" } else { "," };
    format!(
        r#"{{"vocab_size": 100, "hidden_size": 48, "intermediate_size": 96,
            "num_hidden_layers": 1, "num_attention_heads": 6{sep}{extra}}}"#
    )
}

#[test]
fn older_torch_dtype_dialect() {
    let c = parse_config(&v4(r#""torch_dtype": "bfloat16", "rope_theta": 500000.0"#)).unwrap();
    assert_eq!(c.dtype.as_deref(), Some("bfloat16"));
    assert_eq!(c.rope_theta, 500_000.0);
    // `dtype` wins over `torch_dtype` when both are present.
    let c = parse_config(&v4(r#""torch_dtype": "float16", "dtype": "float32""#)).unwrap();
    assert_eq!(c.dtype.as_deref(), Some("float32"));
}

#[test]
fn head_dim_explicit_or_derived() {
    assert_eq!(parse_config(&v4("")).unwrap().head_dim, 8);
    assert_eq!(parse_config(&v4(r#""head_dim": 16"#)).unwrap().head_dim, 16);
    assert_eq!(parse_config(&v4(r#""head_dim": null"#)).unwrap().head_dim, 8);
    let e = parse_config(
        &v4(r#""num_attention_heads": 5"#).replace(r#""num_attention_heads": 6,"#, ""),
    )
    .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("hidden_size 48") && e.message().contains("num_attention_heads 5")
    );
    let e = parse_config(&v4(r#""head_dim": 7"#)).unwrap_err();
    assert!(e.message().contains("head_dim 7"), "{e}");
}

#[test]
fn gqa_kv_heads() {
    assert_eq!(parse_config(&v4("")).unwrap().num_key_value_heads, 6);
    let c = parse_config(&v4(r#""num_key_value_heads": 2"#)).unwrap();
    assert_eq!((c.num_key_value_heads, c.kv_groups()), (2, 3));
    let e = parse_config(&v4(r#""num_key_value_heads": 4"#)).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("num_key_value_heads 4")
            && e.message().contains("num_attention_heads 6"),
        "{e}"
    );
    // 0 names both head counts, as a count that does not divide does.
    let e = parse_config(&v4(r#""num_key_value_heads": 0"#)).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("num_key_value_heads 0")
            && e.message().contains("num_attention_heads 6"),
        "{e}"
    );
}

#[test]
fn tie_word_embeddings_default_false() {
    assert!(!parse_config(&v4("")).unwrap().tie_word_embeddings);
    assert!(parse_config(&v4(r#""tie_word_embeddings": true"#)).unwrap().tie_word_embeddings);
    let e = parse_config(&v4(r#""tie_word_embeddings": 1"#)).unwrap_err();
    assert!(e.message().contains("tie_word_embeddings") && e.message().contains("true or false"));
}

#[test]
fn rope_scaling_null_linear_llama3_v4() {
    let c = parse_config(&v4(r#""rope_scaling": null"#)).unwrap();
    assert_eq!(c.rope_scaling, RopeScaling::None);
    let c = parse_config(&v4(r#""rope_scaling": {"type": "linear", "factor": 4.0}"#)).unwrap();
    assert_eq!(c.rope_scaling, RopeScaling::Linear { factor: 4.0 });
    let c = parse_config(&v4(
        r#""rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}"#,
    ))
    .unwrap();
    assert_eq!(
        c.rope_scaling,
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192
        }
    );
    assert_eq!(c.rope_theta, 500_000.0);
}

#[test]
fn rope_parameters_v5() {
    let c = parse_config(&v4(
        r#""rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 32.0,
           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}"#,
    ))
    .unwrap();
    assert_eq!(c.rope_theta, 500_000.0);
    assert!(matches!(c.rope_scaling, RopeScaling::Llama3 { factor, .. } if factor == 32.0));
    let c = parse_config(&v4(
        r#""rope_parameters": {"rope_theta": 1000.0, "rope_type": "linear", "factor": 2}"#,
    ))
    .unwrap();
    assert_eq!((c.rope_theta, c.rope_scaling), (1000.0, RopeScaling::Linear { factor: 2.0 }));
    // No rope_type in rope_parameters means the default rotation.
    let c = parse_config(&v4(r#""rope_parameters": {"rope_theta": 1000.0}"#)).unwrap();
    assert_eq!(c.rope_scaling, RopeScaling::None);
}

#[test]
fn rope_scaling_unknown_type_named() {
    let e =
        parse_config(&v4(r#""rope_scaling": {"rope_type": "yarn", "factor": 4.0}"#)).unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("\"yarn\""), "{e}");
    let e = parse_config(&v4(r#""rope_parameters": {"rope_type": "dynamic", "factor": 2.0}"#))
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("\"dynamic\""), "{e}");
}

#[test]
fn rope_scaling_missing_fields_named() {
    let e = parse_config(&v4(r#""rope_scaling": {"rope_type": "linear"}"#)).unwrap_err();
    assert_eq!(e.code(), Code::DataLoss);
    assert!(e.message().contains("rope_scaling") && e.message().contains("\"factor\""), "{e}");
    let e = parse_config(&v4(
        r#""rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0}"#,
    ))
    .unwrap_err();
    assert!(e.message().contains("\"original_max_position_embeddings\""), "{e}");
    let e = parse_config(&v4(r#""rope_scaling": {"factor": 8.0}"#)).unwrap_err();
    assert!(e.message().contains("missing \"rope_type\""), "{e}");
    let e =
        parse_config(&v4(r#""rope_scaling": {"rope_type": "linear", "factor": "x"}"#)).unwrap_err();
    assert!(e.message().contains("rope_scaling.factor") && e.message().contains("a string"), "{e}");
}

#[test]
fn eos_token_id_int_list_or_null() {
    assert_eq!(parse_config(&v4(r#""eos_token_id": 7"#)).unwrap().eos_token_ids, [7]);
    assert_eq!(
        parse_config(&v4(r#""eos_token_id": [128001, 128008, 128009]"#)).unwrap().eos_token_ids,
        [128001, 128008, 128009]
    );
    assert!(parse_config(&v4(r#""eos_token_id": null"#)).unwrap().eos_token_ids.is_empty());
    let e = parse_config(&v4(r#""eos_token_id": [1, "x"]"#)).unwrap_err();
    assert!(e.message().contains("\"eos_token_id\"[1]"), "{e}");
    let e = parse_config(&v4(r#""eos_token_id": -1"#)).unwrap_err();
    assert!(e.message().contains("eos_token_id") && e.message().contains("negative"), "{e}");
    assert_eq!(parse_config(&v4(r#""bos_token_id": 128000"#)).unwrap().bos_token_id, Some(128000));
}

#[test]
fn unknown_keys_ignored() {
    let c = parse_config(&v4(r#""some_future_key": {"deep": [1, 2, {"x": null}]}, "architectures": ["LlamaForCausalLM"]"#))
        .unwrap();
    assert_eq!(c.hidden_size, 48);
}

#[test]
fn missing_and_mistyped_required_fields() {
    let e = parse_config(r#"{"hidden_size": 8}"#).unwrap_err();
    assert_eq!(e.code(), Code::DataLoss);
    assert!(e.message().contains("missing \"num_attention_heads\""), "{e}");
    let e = parse_config(&v4("").replace(r#""vocab_size": 100,"#, "")).unwrap_err();
    assert!(e.message().starts_with("config.json: missing \"vocab_size\""), "{e}");
    let e =
        parse_config(&v4("").replace("\"hidden_size\": 48", "\"hidden_size\": 48.5")).unwrap_err();
    assert!(e.message().contains("\"hidden_size\"") && e.message().contains("fractional"), "{e}");
    let e = parse_config("[1]").unwrap_err();
    assert_eq!(e.code(), Code::DataLoss);
    let e = parse_config("{").unwrap_err();
    assert_eq!(e.code(), Code::DataLoss);
}

#[test]
fn duplicate_keys_refused() {
    let e = parse_config(&v4(r#""num_hidden_layers": 3"#)).unwrap_err();
    assert_eq!(e.code(), Code::DataLoss);
    assert!(e.message().contains("\"num_hidden_layers\" is given twice"), "{e}");
}

#[test]
fn unsupported_architectures_unimplemented() {
    let e = parse_config(&v4(r#""model_type": "phi3""#)).unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("\"phi3\""));
    assert!(e.message().contains("supported: llama, mistral, qwen2, qwen3, gemma3_text"), "{e}");
    let e = parse_config(&v4(r#""hidden_act": "gelu""#)).unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    let e = parse_config(&v4(r#""attention_bias": true"#)).unwrap_err();
    assert!(e.message().contains("attention_bias"));
    assert!(parse_config(&v4(r#""model_type": "llama", "mlp_bias": false"#)).is_ok());
}

#[test]
fn oversized_config_refused() {
    let big = format!("{{\"x\": \"{}\"}}", "a".repeat(rml::model::config::MAX_CONFIG_BYTES));
    assert_eq!(parse_config(&big).unwrap_err().code(), Code::ResourceExhausted);
}

#[test]
fn sizes_whose_weights_could_not_exist_are_refused() {
    // Every field fits usize, but the f32 weight matrices they describe would not fit in the
    // address space: refused, so that code sizing buffers from a config cannot overflow.
    for (text, needle) in [
        (
            v4("").replace("\"vocab_size\": 100", "\"vocab_size\": 18446744073709551615"),
            "vocab_size",
        ),
        (
            v4("")
                .replace("\"intermediate_size\": 96", "\"intermediate_size\": 9223372036854775807"),
            "intermediate_size 9223372036854775807",
        ),
        (v4(r#""head_dim": 4611686018427387904"#), "head_dim 4611686018427387904"),
        (
            v4(r#""head_dim": 8"#)
                .replace("\"hidden_size\": 48", "\"hidden_size\": 4611686018427387904"),
            "hidden_size 4611686018427387904",
        ),
    ] {
        let e = parse_config(&text).expect_err(needle);
        assert_eq!(e.code(), Code::InvalidArgument, "{needle}: {e}");
        assert!(e.message().contains(needle) && e.message().contains("address space"), "{e}");
    }
    // Large but possible sizes are fine.
    let c = parse_config(&v4(r#""max_position_embeddings": 1048576"#)).unwrap();
    assert_eq!(c.max_position_embeddings, 1 << 20);
}

#[test]
fn syntax_errors_inside_a_value_name_the_key() {
    // serde_json refuses these while reading the value; the message names the key too.
    for (extra, needle) in [
        (r#""rope_theta": 1e400"#, "number out of range"),
        (
            r#""x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"#,
            "recursion limit",
        ),
    ] {
        let key = &extra[..extra.find(':').unwrap()];
        let e = parse_config(&v4(extra)).unwrap_err();
        assert_eq!(e.code(), Code::DataLoss);
        assert!(e.message().contains(key) && e.message().contains(needle), "{e}");
    }
    // A syntax error between values is still reported as such.
    let e = parse_config(r#"{"vocab_size": 1,, "x": 2}"#).unwrap_err();
    assert!(e.message().contains("not a valid JSON object"), "{e}");
}

/// Found by the `model_config` and `hf_config` fuzz targets: a 228-byte config.json with
/// `"num_hidden_layers": 666666666666656` made the parser build one layer kind per layer
/// (gigabytes) before anything refused it.
#[test]
fn absurd_layer_count_refused_before_allocating() {
    let text =
        "{ \"hea\": \"silu\",\n  \"hidden_size\": 256,\n  \"initializer_raion_heads\": 8,\n  \
                \"num_hidden_layers\": 666666666666656,\n  \"mmmmmmmmmmodel_type\": \"qwen3\",\n  \
                \"num_attention_heads\": 8,\n\n  \"n&um_sliding_window\": false,\n  \
                \"vocab_size\": 512\n}\n";
    let e = parse_config(text).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("num_hidden_layers 666666666666656"), "{e}");
    // Two layers get past that check (to the missing intermediate_size).
    let e = parse_config(&text.replace("666666666666656", "2")).unwrap_err();
    assert!(e.message().contains("intermediate_size"), "{e}");
}
