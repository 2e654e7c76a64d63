//! Puts memory.x where cortex-m-rt's link.x finds it, and rebuilds when the fixtures change.
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    fs::write(out.join("memory.x"), include_bytes!("memory.x")).unwrap();
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
    for f in [
        "../../tests/data/tiny-llama/f32/model.safetensors",
        "../../tests/data/tiny-llama/f32/config.json",
        "../../tests/data/tiny-llama/f32/reference.safetensors",
        "../../tests/data/tiny-llama-gguf/tiny-llama-Q8_0.gguf",
        "../../tests/data/tiny-llama-gguf/reference_Q8_0.safetensors",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
}
