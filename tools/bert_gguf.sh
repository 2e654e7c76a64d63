#!/usr/bin/env bash
# Makes BERT GGUF files with llama.cpp's own converter (convert_hf_to_gguf.py, with the gguf-py
# beside it, from the llama.cpp sources that ../shared/peers/build_llamacpp.sh unpacks), run in
# the venv of tools/embedding_refs.sh (torch CPU; made there if missing):
#   bash tools/bert_gguf.sh            tests/data/tiny-bert-gguf/tiny-bert-f32.gguf from
#                                      tests/data/tiny-bert and tiny-nomic-bert-f32.gguf from
#                                      tests/data/tiny-nomic-bert (f32, committed; tests/encoder.rs)
#   bash tools/bert_gguf.sh minilm     target/models/all-MiniLM-L6-v2-f32.gguf (f32, ~90 MB,
#                                      not committed; `RML_MINILM_GGUF=...` for the check in
#                                      tests/encoder.rs)
# tools/bert_gguf.py wraps the converter so that the tiny fixture's made-up vocabulary (whose
# pre-tokenizer hash the converter does not know) is written as tokenizer.ggml.pre "default".
# The converter reads a nomic-bert config twice: through transformers (whose NomicBertConfig
# knows transformers' spelling: hidden_size, rope_parameters, ...) and directly (asserting
# Nomic's own keys: n_embd, rotary_emb_fraction, n_positions = 8192 with max_trained_positions
# = 2048, ...); tiny-nomic-bert's config has only the first, so it is converted from a
# temporary copy whose config.json carries both spellings of the same values.
# LLAMA_CPP_SRC=... points at another llama.cpp source tree. Reruns give the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.cache/rml-embed/venv}
LLAMA_CPP_SRC=${LLAMA_CPP_SRC:-$(ls -d "$HOME"/.cache/rml-peers/src/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | tail -1)}
if [ ! -f "$LLAMA_CPP_SRC/convert_hf_to_gguf.py" ]; then
    echo "no llama.cpp sources (run ../shared/peers/build_llamacpp.sh, or set LLAMA_CPP_SRC)" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "no venv at $VENV: making it with tools/embedding_refs.sh's pins" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    "$VENV/bin/pip" install --quiet torch==2.15.0 transformers==5.24.0 sentence-transformers==6.2.0 \
        safetensors==0.8.0 numpy==2.4.6 tokenizers==0.23.3
fi
convert() {
    PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        "$VENV/bin/python" tools/bert_gguf.py "$LLAMA_CPP_SRC" "$1" "$2" --outtype f32
}
case "${1:-tiny}" in
    tiny)
        mkdir -p tests/data/tiny-bert-gguf
        convert tests/data/tiny-bert tests/data/tiny-bert-gguf/tiny-bert-f32.gguf
        tmp=$(mktemp -d)
        trap 'rm -rf "$tmp"' EXIT
        cp -r tests/data/tiny-nomic-bert/. "$tmp/"
        "$VENV/bin/python" - "$tmp/config.json" <<'PY'
import json, sys
path = sys.argv[1]
c = json.load(open(path))
c.update({
    "activation_function": "swiglu", "n_embd": c["hidden_size"], "n_head": c["num_attention_heads"],
    "n_inner": c["intermediate_size"], "n_layer": c["num_hidden_layers"], "n_positions": 8192,
    "max_trained_positions": 2048, "layer_norm_epsilon": c["layer_norm_eps"],
    "rotary_emb_base": c["rope_parameters"]["rope_theta"], "rotary_emb_fraction": 1.0,
    "rotary_emb_interleaved": False, "rotary_emb_scale_base": None, "rotary_scaling_factor": None,
    "qkv_proj_bias": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False, "prenorm": False,
    "causal": False,
})
json.dump(c, open(path, "w"), indent=2)
PY
        convert "$tmp" tests/data/tiny-bert-gguf/tiny-nomic-bert-f32.gguf
        ;;
    minilm)
        bash .ci/fetch-model.sh minilm
        convert target/models/all-MiniLM-L6-v2 target/models/all-MiniLM-L6-v2-f32.gguf
        ;;
    *) echo "usage: $0 [tiny|minilm]" >&2; exit 2 ;;
esac
