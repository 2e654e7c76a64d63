#!/usr/bin/env bash
# rml against llama.cpp on the same GGUF, interleaved in one run so that the ratios hold on a
# shared, noisy machine (extended from ../shared/peers/side_by_side.sh with prompt lengths,
# decode depth and flash attention). Usage, from the project root after
# `cargo build --release --features cli`:
#   tools/side_by_side.sh [MODEL.gguf] [ROUNDS] [SHAPES]
# SHAPES is a list of PROMPT:DEPTH pairs (default "64:0 2048:2048"): each measures prefill of
# PROMPT tokens (ppPROMPT) and 32 decode steps starting with DEPTH tokens in the KV cache
# (tg@DEPTH; 0 = right after a 64-token prompt for llama-bench, after the prompt for rml).
# llama.cpp runs with flash attention off and on; its better figure is the one compared.
# Threads: $THREADS (default "1,2"). rml runs once per activation mode in $ACTS (default
# "f32 int8") and KV-cache type in $KVS (default "f32 f16"; llama.cpp's cache is f16), and
# with $ATTN (default "tiled"; "per-head" is the attention rml had before the tiled kernel).
# Prints the load average before each round, the medians and the ratios rml/llama.cpp.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=${1:-${RML_MODEL:-$HOME/.cache/rml/models/SmolLM2-135M-Instruct.Q4_1.gguf}}
rounds=${2:-3}
shapes=${3:-"64:0 2048:2048"}
threads=${THREADS:-1,2}
rml=${RML_BIN:-target/release/rml}
acts=${ACTS:-f32 int8}
kvs=${KVS:-f32 f16}
attns=${ATTN:-tiled}
[ -x "$rml" ] || { echo "build rml first: cargo build --release --features cli" >&2; exit 2; }
[ -f "$model" ] || { echo "no model at $model" >&2; exit 2; }
bin=${LLAMA_BIN:-$HOME/.cache/rml-peers/llama.cpp-build/bin}
[ -x "$bin/llama-bench" ] || { echo "no llama-bench in $bin (../shared/peers/build_llamacpp.sh)" >&2; exit 2; }
# llama.cpp's weight repacking (its default) dies with SIGILL/SIGSEGV on some AMX Xeons in
# this build: probe once and fall back to --repack 0, saying so (repacking helps llama.cpp's
# Q4_0/Q8_0 GEMM, so the ratios are then against its in-place path).
repack=${LLAMA_REPACK:-}
if [ -z "$repack" ]; then
    if "$bin/llama-bench" -m "$model" -p 8 -n 0 -t 1 -r 1 -o csv >/dev/null 2>&1; then repack=1
    else repack=0; echo "llama.cpp: repacking crashes on this CPU; comparing with --repack 0"; fi
fi
out=$(mktemp)
echo "model $model; rml $(git rev-parse --short HEAD 2>/dev/null || echo '?'); threads $threads"
for r in $(seq "$rounds"); do
    echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg)"
    for shape in $shapes; do
        p=${shape%%:*}; d=${shape##*:}
        # llama-bench: the pp test at depth 0, the tg test at depth $d (-d applies to both).
        { "$bin/llama-bench" -m "$model" -p "$p" -n 0 -t "$threads" -fa 0,1 --repack "$repack" -r 3 -o csv 2>/dev/null
          "$bin/llama-bench" -m "$model" -p 0 -n 32 -d "$d" -t "$threads" -fa 0,1 --repack "$repack" -r 3 -o csv \
            2>/dev/null | tail -n +2; } | python3 -c '
import csv, sys
p, d = sys.argv[1], sys.argv[2]
for row in csv.DictReader(sys.stdin):
    fa = "fa1" if row.get("flash_attn", "0").lower() in ("1", "true", "on", "enabled") else "fa0"
    if int(row["n_prompt"]) > 0:
        print("llama.cpp-" + fa, "pp" + p, row["n_threads"], row["avg_ts"])
    else:
        print("llama.cpp-" + fa, "tg@" + d, row["n_threads"], row["avg_ts"])' "$p" "$d" >>"$out"
        for act in $acts; do for kv in $kvs; do for at in $attns; do
            rdepth=$d; [ "$d" = 0 ] && rdepth=0
            name="rml-$act-kv$kv"; [ "$at" = tiled ] || name="$name-$at"
            # The per-head reference path runs on an f32 cache only.
            [ "$at" = per-head ] && [ "$kv" != f32 ] && continue
            "$rml" bench --model "$model" --activations "$act" --prompt "$p" --depth "$rdepth" \
                --decode 32 --threads "$threads" --repeats 3 --kv-cache "$kv" --attention "$at" 2>&1 \
                | awk -v a="$name" -v p="$p" -v d="$d" \
                '$1 ~ /^[0-9]+$/ && NF >= 3 {print a, "pp" p, $1, $2; print a, "tg@" d, $1, $3}
                 $1 ~ /^[0-9]+$/ && NF >= 8 {print a, "wGB/s@" d, $1, $4; print a, "of-read@" d, $1, $8}' >>"$out"
        done; done; done
    done
done
python3 - "$out" <<'PY'
import statistics, sys
from collections import defaultdict
v = defaultdict(list)
for line in open(sys.argv[1]):
    who, kind, t, x = line.split()
    v[(who, kind, t)].append(float(x.rstrip("%")))
kinds, rmls = [], []
for k in v:
    if k[1] not in kinds:
        kinds.append(k[1])
    if k[0].startswith("rml") and k[0] not in rmls:
        rmls.append(k[0])
med = lambda w, k, t: statistics.median(v[(w, k, t)]) if v.get((w, k, t)) else float("nan")
short = [r[4:] for r in rmls]
print(f"{'figure':<14}{'llama.cpp':>11}" + "".join(f"{s:>{max(10, len(s) + 2)}}" for s in short)
      + "".join(f"{s + '/ll':>{max(10, len(s) + 5)}}" for s in short))
for kind in kinds:
    for t in sorted({k[2] for k in v}):
        vals = [med(r, kind, t) for r in rmls]
        if kind.startswith(("wGB", "of-read")):
            print(f"{kind + ' t' + t:<14}{'':>11}" + "".join(f"{x:>{max(10, len(s) + 2)}.1f}" for x, s in zip(vals, short)))
            continue
        # llama.cpp's better flash-attention setting.
        l = max(med("llama.cpp-fa0", kind, t), med("llama.cpp-fa1", kind, t))
        print(f"{kind + ' t' + t:<14}{l:>11.1f}" + "".join(f"{x:>{max(10, len(s) + 2)}.1f}" for x, s in zip(vals, short))
              + "".join(f"{x / l:>{max(10, len(s) + 5) - 1}.2f}x" for x, s in zip(vals, short)))
PY
rm -f "$out"
