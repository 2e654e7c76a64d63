//! GGUF bytes (real tiny vocabularies, mutated) into `Tokenizer::from_gguf`: the byte-level
//! BPE (`tokenizer.ggml.model = "gpt2"`, every `tokenizer.ggml.pre` rml knows) and the
//! SentencePiece path (`"llama"`: scores, token types, byte fallback, unknown token,
//! add-BOS/EOS and space-prefix flags). When a tokenizer is built, a few fixed strings, the
//! file's `general.name` and the input's last bytes are encoded (with and without special
//! tokens) and decoded, and arbitrary ids decoded. Checks: no panic; every id is inside the
//! vocabulary; BOS/EOS are added exactly as the flags say; and `decode(encode(s)) == s` where
//! the vocabulary can spell every byte and `s` holds no special token: SentencePiece with all
//! 256 `<0xNN>` byte tokens and `▁`, or a byte-level BPE with all 256 byte characters.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rml::format::gguf::Gguf;
use rml::tokenizer::Tokenizer;

const STRINGS: &[&str] = &[
    "Hello world",
    " leading, trailing ",
    "two  spaces\nand\ttabs 123 4567",
    "héllo 日本語 🎉",
    "<s>x</s><|im_start|>",
];

/// GPT-2's byte → printable character table (the byte-level BPE alphabet).
fn byte_chars() -> Vec<char> {
    let mut out = vec!['\0'; 256];
    let mut extra = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap()
        };
    }
    out
}

/// Whether the file's vocabulary can spell every byte, so that round trips must hold, and
/// the spellings that neither `s` nor the text the model sees (see [`model_text`]) may
/// contain: tokens matched before the model, or that decoding drops or rewrites.
fn round_trip_domain(g: &Gguf<'_>, spm: bool) -> Option<Vec<String>> {
    let tokens = g.tokens().ok()?;
    let types = match g.get("tokenizer.ggml.token_type") {
        Some(_) => g.token_types().ok()?,
        None => vec![1; tokens.len()],
    };
    let ty = |i: usize| types.get(i).copied().unwrap_or(1);
    let id: std::collections::HashMap<&str, usize> =
        tokens.iter().enumerate().map(|(i, t)| (*t, i)).collect();
    let mut avoid = Vec::new();
    if spm {
        for b in 0..256 {
            let &i = id.get(format!("<0x{b:02X}>").as_str())?;
            if ty(i) != 6 {
                return None;
            }
        }
        if id.get("\u{2581}").map(|&i| ty(i)) != Some(1) {
            return None;
        }
        // Tokens that are not plain pieces (or byte tokens) decode to something else than
        // their spelling, or are cut out of the text first.
        for (i, t) in tokens.iter().enumerate() {
            if ty(i) != 1 && !(ty(i) == 6 && t.starts_with("<0x")) && !t.is_empty() {
                avoid.push(t.to_string());
            }
        }
        avoid.push("<0x".into());
    } else {
        for c in byte_chars() {
            id.get(c.encode_utf8(&mut [0; 4]) as &str)?;
        }
        for (i, t) in tokens.iter().enumerate() {
            if (ty(i) == 3 || ty(i) == 4) && !t.is_empty() {
                avoid.push(t.to_string());
            }
        }
    }
    Some(avoid)
}

/// The text the model merges: SentencePiece's `▁`-spaced text with its space prefix, or the
/// byte-level BPE's byte characters.
fn model_text(s: &str, spm: bool) -> String {
    if spm {
        format!("\u{2581}{}", s.replace(' ', "\u{2581}"))
    } else {
        let table = byte_chars();
        s.bytes().map(|b| table[b as usize]).collect()
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else { return };
    let Ok(tok) = Tokenizer::from_gguf(&g) else { return };
    let n = tok.vocab_size();
    assert!(n > 0);
    let spm = g.tokenizer_model().ok().flatten() == Some("llama");
    let domain = round_trip_domain(&g, spm);
    let flag = |k: &str| g.get_bool(k).ok().flatten();
    let (add_bos, add_eos) = if spm {
        (
            flag("tokenizer.ggml.add_bos_token").unwrap_or(true),
            flag("tokenizer.ggml.add_eos_token").unwrap_or(false),
        )
    } else {
        (
            flag("tokenizer.ggml.add_bos_token").unwrap_or(false),
            flag("tokenizer.ggml.add_eos_token").unwrap_or(false),
        )
    };
    let name = g.get_str("general.name").ok().flatten().unwrap_or("");
    let tail = String::from_utf8_lossy(&data[data.len().saturating_sub(24)..]).into_owned();
    let mut strings: Vec<&str> = STRINGS.to_vec();
    strings.push(name);
    strings.push(&tail);
    for s in strings {
        let Ok(plain) = tok.encode(s) else { continue };
        assert!(
            plain.iter().all(|&i| (i as usize) < n),
            "id outside {n} tokens for {s:?}: {plain:?}"
        );
        let with = tok.encode_with_special(s, true).expect("encode with special tokens failed");
        assert!(with.iter().all(|&i| (i as usize) < n));
        // BOS/EOS around the plain encoding exactly as the flags say.
        let mut expect = Vec::new();
        expect.extend(tok.bos_id().filter(|_| add_bos));
        expect.extend_from_slice(&plain);
        expect.extend(tok.eos_id().filter(|_| add_eos));
        assert_eq!(with, expect, "encode_with_special({s:?}, true)");
        let text = tok.decode(&plain).expect("decoding ids the encoder made failed");
        if let Some(avoid) = &domain {
            let seen = model_text(s, spm);
            // A `▁` written in the text decodes as a space.
            let literal_marker = spm && s.contains('\u{2581}');
            if !literal_marker
                && !avoid.iter().any(|a| s.contains(a.as_str()) || seen.contains(a.as_str()))
            {
                assert_eq!(text, s, "round trip of {s:?} through {plain:?}");
            }
        }
    }
    // Arbitrary ids, some outside the vocabulary: an error, never a panic.
    let ids: Vec<u32> = data
        .chunks(4)
        .take(32)
        .map(|c| c.iter().fold(0u32, |a, &b| a << 8 | u32::from(b)) % (n as u32 + 3))
        .collect();
    let _ = tok.decode(&ids);
    for &i in &ids {
        let _ = (tok.id_to_token(i), tok.is_special(i), tok.is_added(i));
    }
});
