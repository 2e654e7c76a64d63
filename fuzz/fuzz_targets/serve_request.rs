//! Bytes into `rml serve`'s request parser (src/bin/rml/serve/request.rs, included as a
//! module: it depends on nothing but std and serde_json), as a chat and as a completions body:
//! no panic; an accepted request holds only values within OpenAI's ranges; a refused one is a
//! 4xx whose body is the OpenAI error object.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/bin/rml/serve/request.rs"]
mod request;

use request::{parse, Endpoint, Prompt};

const MODEL: &str = "m";

fuzz_target!(|data: &[u8]| {
    for endpoint in [Endpoint::Chat, Endpoint::Completion] {
        match parse(endpoint, data, MODEL) {
            Ok(r) => {
                assert_eq!(r.endpoint, endpoint);
                assert_eq!(r.model, MODEL);
                match (&r.prompt, endpoint) {
                    (Prompt::Chat(m), Endpoint::Chat) => {
                        assert!(!m.is_empty());
                        for msg in m {
                            assert!(["system", "user", "assistant"].contains(&msg.role.as_str()));
                        }
                    }
                    (Prompt::Text(t), Endpoint::Completion) => assert!(!t.is_empty()),
                    (Prompt::Tokens(t), Endpoint::Completion) => assert!(!t.is_empty()),
                    (p, e) => panic!("{e:?} request with prompt {p:?}"),
                }
                assert_ne!(r.max_tokens, Some(0));
                let s = r.sampling;
                assert!((0.0..=2.0).contains(&s.temperature));
                assert!(s.top_p > 0.0 && s.top_p <= 1.0);
                assert!((-2.0..=2.0).contains(&s.presence_penalty));
                assert!((-2.0..=2.0).contains(&s.frequency_penalty));
                assert!(s.repeat_penalty > 0.0 && s.repeat_penalty.is_finite());
                assert!(r.stop.len() <= request::MAX_STOP && r.stop.iter().all(|s| !s.is_empty()));
                assert!(r.stream || !r.include_usage);
                assert!(r.logprobs || r.top_logprobs == 0);
                assert!(r.top_logprobs <= request::MAX_TOP_LOGPROBS_CHAT);
            }
            Err(e) => {
                assert!((400..500).contains(&e.status), "{e:?}");
                let body: serde_json::Value =
                    serde_json::from_str(&e.body()).expect("the error body is JSON");
                let err = &body["error"];
                assert!(err["message"].as_str().is_some_and(|m| !m.is_empty()));
                assert!(err["type"].is_string());
                assert!(err.get("param").is_some() && err.get("code").is_some());
            }
        }
    }
});
