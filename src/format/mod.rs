//! Model file formats parsed from untrusted bytes: safetensors, GGUF v3 and Hugging Face
//! `config.json`.
