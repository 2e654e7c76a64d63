#!/usr/bin/env bash
# A synthetic ~1B-parameter Llama-shaped model with random weights (tools/synth_model.py), in
# the types llama.cpp's llama-quantize makes from its F16 file: a model larger than the
# last-level cache for the memory-bound decode measurements (tools/membound.sh).
# Usage, from the project root:
#   tools/synth_model.sh [TYPES]      # TYPES: llama-quantize names, comma-separated
#                                     # (default Q8_0,Q4_K_M)
# Writes under $SYNTH_DIR (default target/models/synth, never committed):
#   synth-1b.F16.gguf        2.1 GB   1.07e9 parameters: Llama 3.2 1B's shapes (hidden 2048,
#                                     FFN 8192, 16 layers, 32 query / 8 KV heads of 64, tied
#                                     embeddings) with SmolLM2's 49152-token tokenizer
#   synth-1b.Q8_0.gguf       1.1 GB
#   synth-1b.Q4_K_M.gguf     0.7 GB
#   synth-1b.args                     the arguments the F16 file was made with
# Other shapes: SYNTH_ARGS="--layers 22 --intermediate 5632" (synth_model.py's options; a
# change of SYNTH_ARGS remakes every file). Deterministic: the same arguments give the same
# bytes (numpy's PCG64 with a fixed seed, --seed to change it); llama-quantize's output is
# deterministic for a given llama.cpp build too.
# Idempotent: a file that exists and is newer than its source is kept, so a rerun costs
# nothing; delete $SYNTH_DIR to start over.
# Needs: python3 (a venv with gguf and numpy is made at $GGUF_VENV, default target/gguf-venv,
# the one tools/README.md uses for dequant_check.py), the SmolLM2 GGUF for its tokenizer
# ($RML_SMOLLM2_GGUF, default target/models/SmolLM2-135M-Instruct.Q4_1.gguf;
# .ci/fetch-model.sh smollm2) and llama.cpp's llama-quantize ($LLAMA_BIN, default
# ~/.cache/rml-peers/llama.cpp-build/bin; ../shared/peers/build_llamacpp.sh).
# Time on 2 busy cores: about 1-2 minutes for the F16 file, 1-3 minutes per quantized type.
# Disk: about 4 GB for the three files.
set -euo pipefail
cd "$(dirname "$0")/.."
types=${1:-Q8_0,Q4_K_M}
dir=${SYNTH_DIR:-target/models/synth}
venv=${GGUF_VENV:-target/gguf-venv}
vocab=${RML_SMOLLM2_GGUF:-target/models/SmolLM2-135M-Instruct.Q4_1.gguf}
bin=${LLAMA_BIN:-$HOME/.cache/rml-peers/llama.cpp-build/bin}
args=${SYNTH_ARGS:-}
threads=${THREADS:-$(nproc)}
[ -f "$vocab" ] || { echo "no SmolLM2 GGUF at $vocab (.ci/fetch-model.sh smollm2)" >&2; exit 2; }
[ -x "$bin/llama-quantize" ] || { echo "no llama-quantize in $bin (../shared/peers/build_llamacpp.sh)" >&2; exit 2; }
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import gguf, numpy' 2>/dev/null; then
    echo "making $venv (gguf, numpy)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet gguf==0.19.0 numpy==2.4.6
fi
mkdir -p "$dir"
f16=$dir/synth-1b.F16.gguf
stamp=$dir/synth-1b.args
# A different SYNTH_ARGS (or a newer generator) makes the F16 file, and so every type, anew.
if [ ! -f "$f16" ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$args" ] \
    || [ tools/synth_model.py -nt "$f16" ]; then
    echo "writing $f16" >&2
    # shellcheck disable=SC2086 # SYNTH_ARGS is a list of options
    "$venv/bin/python" tools/synth_model.py "$f16" --vocab-from "$vocab" $args
    printf '%s' "$args" >"$stamp"
fi
for ty in ${types//,/ }; do
    out=$dir/synth-1b.$ty.gguf
    [ "$ty" = F16 ] && continue
    if [ -f "$out" ] && [ "$out" -nt "$f16" ]; then
        echo "$out: up to date" >&2
        continue
    fi
    echo "quantizing $out" >&2
    "$bin/llama-quantize" "$f16" "$out.tmp" "$ty" "$threads" >"$out.log" 2>&1 \
        || { tail -20 "$out.log" >&2; rm -f "$out.tmp"; exit 1; }
    mv "$out.tmp" "$out"
done
ls -l "$dir"/synth-1b.*.gguf
