#!/usr/bin/env bash
# rml against llama.cpp, teacher-forced logits position by position, on SmolLM2 requantized by
# llama.cpp to each weight type (tools/fidelity.rs says what each column compares).
# Usage, from the project root:
#   tools/fidelity.sh [TYPES]        # TYPES: comma-separated llama-quantize names (default: all below)
# Needs llama.cpp's static build from ../shared/peers/build_llamacpp.sh ($LLAMA_BUILD, default
# ~/.cache/rml-peers/llama.cpp-build) and the SmolLM2 Q4_1 GGUF ($RML_SMOLLM2_GGUF, default
# target/models/SmolLM2-135M-Instruct.Q4_1.gguf). Writes under $FIDELITY_DIR (default
# target/fidelity, never committed): the token ids, requant/SmolLM2.<TYPE>.gguf and
# .<TYPE>.deq.gguf (llama-quantize --allow-requantize, then the same file to F32: llama.cpp's
# own dequantization), llama.cpp's logits for the type being compared (deleted after it),
# table.md (the Markdown table) and story.txt (the story prompt's greedy choices: the
# README's prompt continued by llama-completion's greedy text on each file, teacher-forced).
# FIDELITY_PROMPTS=story compares that story only (fast); the default adds every prompt of
# tests/data/agreement/prompts.json but long_code.
# Threads: $THREADS (default 2) for llama.cpp; rml uses its pool's default.
# FIDELITY_BIN=PATH uses an already built `fidelity` example instead of building it.
# A type rml does not run (IQ4_XS today) gets a row saying so, and the next type runs.
set -euo pipefail
types=${1:-Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,Q2_K,Q3_K_S,Q3_K_M,Q4_K_S,Q4_K_M,Q5_K_S,Q5_K_M,Q6_K,IQ4_NL,IQ4_XS,F16,F32}
build=${LLAMA_BUILD:-$HOME/.cache/rml-peers/llama.cpp-build}
src=${RML_SMOLLM2_GGUF:-target/models/SmolLM2-135M-Instruct.Q4_1.gguf}
work=${FIDELITY_DIR:-target/fidelity}
threads=${THREADS:-2}
[ -x "$build/bin/llama-quantize" ] || { echo "no llama.cpp build in $build (../shared/peers/build_llamacpp.sh)" >&2; exit 2; }
[ -f "$src" ] || { echo "no SmolLM2 GGUF at $src (.ci/fetch-model.sh smollm2)" >&2; exit 2; }
mkdir -p "$work/requant" "$work/logits"

# The peer program, linked against llama.cpp's static libraries and headers of the same tree.
llsrc=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
peer=$work/llamacpp_logits
if [ ! -x "$peer" ] || [ tools/llamacpp_logits.c -nt "$peer" ]; then
    cc -O2 -c tools/llamacpp_logits.c -I "$llsrc/include" -I "$llsrc/ggml/include" -o "$work/llamacpp_logits.o"
    c++ -o "$peer" "$work/llamacpp_logits.o" "$build/src/libllama.a" "$build/ggml/src/libggml.a" \
        "$build/ggml/src/libggml-cpu.a" "$build/ggml/src/libggml-base.a" -fopenmp -lpthread -lm
fi

if [ -n "${FIDELITY_BIN:-}" ]; then
    fid=$FIDELITY_BIN
else
    cargo build --release --features cli --example fidelity
    fid=target/release/examples/fidelity
fi
if [ "${FIDELITY_PROMPTS:-all}" = story ]; then
    rm -f "$work"/logits/*.tokens
else
    [ -f "$work/logits/fixture.tokens" ] || "$fid" tokens "$work/logits"
fi
prompt="Once upon a time, there was a little"
pairs() { # IN.tokens OUT.f32 pairs for suffix $1
    for t in "$work"/logits/*.tokens; do printf '%s %s ' "$t" "${t%.tokens}.$1.f32"; done
}

: >"$work/table.md"
: >"$work/story.txt"
: >"$work/refused.md"
header=1
for ty in ${types//,/ }; do
    q=$work/requant/SmolLM2.$ty.gguf
    deq=$work/requant/SmolLM2.$ty.deq.gguf
    for pair in "$src:$q:$ty" "$q:$deq:F32"; do
        IFS=: read -r from to kind <<<"$pair"
        if [ ! -f "$to" ]; then
            "$build/bin/llama-quantize" --allow-requantize "$from" "$to.tmp" "$kind" "$threads" \
                >"$to.log" 2>&1 || { echo "llama-quantize $kind failed: $to.log" >&2; exit 1; }
            mv "$to.tmp" "$to"
        fi
    done
    # The story: the README's prompt and llama.cpp's greedy continuation of it on this file
    # (llama-completion as a user runs it, no repacking), as llama.cpp tokenizes them.
    text=$("$build/bin/llama-completion" -m "$q" -p "$prompt" -n 16 --temp 0 -no-cnv -nr \
        -t "$threads" --no-warmup 2>/dev/null </dev/null)
    "$build/bin/llama-tokenize" -m "$q" -p "$text" --ids --log-disable 2>/dev/null | tail -1 |
        python3 -c 'import struct, sys
ids = [int(t) for t in sys.stdin.read().strip().strip("[]").split(",") if t.strip()]
sys.stdout.buffer.write(struct.pack("<%dI" % len(ids), *ids))' >"$work/logits/story.tokens"
    echo "$ty: llama-completion: $text" >>"$work/story.txt"
    # shellcheck disable=SC2046
    "$peer" --kv f32 --fa off -t "$threads" "$deq" $(pairs llama-f32) >/dev/null
    # shellcheck disable=SC2046
    "$peer" -t "$threads" "$q" $(pairs llama-q) >/dev/null
    echo "$ty:" >>"$work/story.txt"
    if RML_FIDELITY_HEADER=$header "$fid" compare "$ty" "$q" "$deq" "$work/logits" \
        2>"$work/compare.err" | tee -a "$work/table.md"; then
        header=0
    else
        # rml refused the file (a dtype it does not run): a row after the table, and go on.
        why=$(grep -o 'Error(.*' "$work/compare.err" | tail -1 | tr '|' '/' || true)
        echo "$ty: rml refused it: $why" >&2
        echo "| $ty | rml does not run this file: \`$why\` | | | | |" >>"$work/refused.md"
    fi
    cat "$work/compare.err" >>"$work/story.txt"
    rm -f "$work"/logits/*.llama-f32.f32 "$work"/logits/*.llama-q.f32
done
cat "$work/refused.md" >>"$work/table.md"
echo "table: $work/table.md; story prompt: $work/story.txt"
