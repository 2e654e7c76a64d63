#!/usr/bin/env bash
# Issue 31's measurement on a model larger than the last-level cache, in one command: int8
# decode against llama.cpp at 1 and 2 threads, on the native kernel tier and on AVX2 only, and
# the weights rml reads per second as a share of a same-size read loop (rml bench's `of that`).
# Usage, from the project root, on an otherwise idle machine:
#   tools/membound.sh [ROUNDS] [TYPES]     # defaults: 3 rounds, "Q4_K_M Q8_0"
# Steps: tools/synth_model.sh makes target/models/synth/synth-1b.TYPE.gguf if missing (about
# 4 GB, a few minutes the first time); `cargo build --release --features cli` (unless
# $RML_BIN is given); then for each tier of $TIERS (default "native avx2") and each type,
# ACTS=int8 KVS=f16 THREADS=1,2 tools/side_by_side.sh MODEL ROUNDS "64:0": 32 decode steps
# after a 64-token prompt (rml's int8 activations and f16 KV cache, as llama.cpp runs by
# default), llama.cpp with flash attention off and on (its better figure counts) and its
# default repacking. Tiers:
#   native  rml's best kernels for the CPU, llama.cpp from $LLAMA_BIN
#           (default ~/.cache/rml-peers/llama.cpp-build/bin)
#   avx2    RML_KERNELS=avx2, llama.cpp built for AVX2 only from $LLAMA_BIN_AVX2
#           (default ~/.cache/rml-peers/llama.cpp-build-avx2/bin; the tier is skipped, saying
#           so, when it is missing)
# Writes every side_by_side.sh output to $MEMBOUND_DIR (default target/membound)/TIER.TYPE.txt
# and ends with a summary, one line per tier and type: decode rml/llama.cpp at 1 and 2 threads
# and the 2-thread weights-read share, against issue 31's targets (>= 1.30x, >= 75%).
# Time: about 1.5 minutes per round, type and tier on an idle 2-core machine (about 20 minutes
# with the defaults); on a loaded one much more, since llama.cpp's 2-thread runs then crawl.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
types=${2:-Q4_K_M Q8_0}
tiers=${TIERS:-native avx2}
dir=${MEMBOUND_DIR:-target/membound}
native_bin=${LLAMA_BIN:-$HOME/.cache/rml-peers/llama.cpp-build/bin}
avx2_bin=${LLAMA_BIN_AVX2:-$HOME/.cache/rml-peers/llama.cpp-build-avx2/bin}
LLAMA_BIN=$native_bin tools/synth_model.sh "${types// /,}" >&2
if [ -z "${RML_BIN:-}" ]; then
    cargo build --release --features cli
    export RML_BIN=target/release/rml
fi
mkdir -p "$dir"
echo "membound: rml $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
done_runs=()
for tier in $tiers; do
    case $tier in
        native) bin=$native_bin; kern= ;;
        avx2) bin=$avx2_bin; kern=avx2 ;;
        *) echo "unknown tier $tier (native, avx2)" >&2; exit 2 ;;
    esac
    if [ ! -x "$bin/llama-bench" ]; then
        echo "tier $tier: no llama-bench in $bin, skipped" >&2
        continue
    fi
    for ty in $types; do
        model=target/models/synth/synth-1b.$ty.gguf
        out=$dir/$tier.$ty.txt
        echo "== tier $tier, $model" | tee "$out"
        # RML_KERNELS empty is the same as unset: the best tier.
        RML_KERNELS=$kern LLAMA_BIN=$bin ACTS=int8 KVS=f16 THREADS=1,2 \
            tools/side_by_side.sh "$model" "$rounds" "64:0" 2>&1 | tee -a "$out"
        done_runs+=("$out")
    done
done
echo
echo "summary (targets: decode >= 1.30x llama.cpp at 1 and 2 threads, weights read >= 75% of the read loop at 2 threads)"
printf '%-8s %-8s %12s %12s %14s\n' tier type "decode t1" "decode t2" "read t2"
for out in "${done_runs[@]}"; do
    base=$(basename "$out" .txt)
    # side_by_side.sh's table: "tg@0 tN  LLAMA  RML  RATIOx" and "of-read@0 t2  SHARE".
    awk -v tier="${base%%.*}" -v ty="${base#*.}" '
        $1 == "tg@0" && $2 == "t1" {t1 = $5}
        $1 == "tg@0" && $2 == "t2" {t2 = $5}
        $1 == "of-read@0" && $2 == "t2" {r = $3 "%"}
        END {printf "%-8s %-8s %12s %12s %14s\n", tier, ty, t1, t2, r}' "$out"
done
