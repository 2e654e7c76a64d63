#!/usr/bin/env bash
# The sentence-embedding speed benchmark of issue 33, all-MiniLM-L6-v2 on this machine:
#   - sentences/s over 1,000 sentences of 8-128 tokens (special tokens included), batch 32,
#     1 and 2 threads: rml f32 and int8 (`rml embed --timing`, the model loaded once, best of
#     REPEAT passes), llama.cpp's llama-embedding on the f32 GGUF (it fills a batch by
#     tokens: -b 2048 -np 32 gives batches of 25-30 of these sentences; it prints no timings, so: wall clock over the corpus minus wall clock over one sentence,
#     best of REPEAT each, which leaves out loading), sentence-transformers on PyTorch CPU
#     (encode(), batch_size 32, torch.set_num_threads, best of REPEAT);
#   - the latency of one 16-token sentence on 1 thread (rml: best of 200 runs;
#     sentence-transformers: best of 50).
# Every figure of one invocation is taken on the same machine within a few minutes; on a machine
# shared with other work compare the ratios of one run, not absolute figures across runs.
#
#   cargo build --release --features cli && bash tools/embed_bench.sh
#                                     (RML=path/to/rml, default target/release/rml; VENV as
#                                      tools/embedding_refs.sh; LLAMA_BIN: llama.cpp's bin/;
#                                      N=sentences (1000), REPEAT=passes per figure (3);
#                                      SKIP="st llama" leaves out sentence-transformers and/or
#                                      llama-embedding, said in the output: a smoke run only)
# Needs: target/models/all-MiniLM-L6-v2 (.ci/fetch-model.sh minilm), its GGUF
# (tools/bert_gguf.sh minilm), the venv of tools/embedding_refs.sh (a venv with only the
# `tokenizers` package serves SKIP=st), llama.cpp's binaries (../shared/peers/build_llamacpp.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=target/models/all-MiniLM-L6-v2
GGUF=target/models/all-MiniLM-L6-v2-f32.gguf
RML=${RML:-target/release/rml}
VENV=${VENV:-$HOME/.cache/rml-embed/venv}
LLAMA_BIN=${LLAMA_BIN:-$HOME/.cache/rml-peers/llama.cpp-build/bin}
N=${N:-1000}
REPEAT=${REPEAT:-3}
SKIP=${SKIP:-}
run_st=1 run_llama=1
for w in $SKIP; do
    case "$w" in
        st) run_st=0 ;;
        llama) run_llama=0 ;;
        *) echo "SKIP: unknown peer $w (st, llama)" >&2; exit 2 ;;
    esac
done
need=("$MODEL/model.safetensors" "$RML" "$VENV/bin/python")
[ "$run_llama" = 1 ] && need+=("$GGUF" "$LLAMA_BIN/llama-embedding")
for f in "${need[@]}"; do
    [ -e "$f" ] || { echo "missing: $f (see the header of $0)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# The corpus: English-looking sentences of random words (seeded) from the words of the MiniLM
# reference texts, kept when MiniLM's tokenizer gives 8-128 tokens; and one of exactly 16.
"$VENV/bin/python" - "$MODEL" "$work" "$N" <<'EOF'
import json, random, re, sys
from tokenizers import Tokenizer
model, work, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
tok = Tokenizer.from_file(f"{model}/tokenizer.json")
tok.no_truncation(); tok.no_padding()
items = json.load(open("tests/data/minilm-ref/sentences.json"))["items"]
words = sorted({w.lower() for it in items for w in re.findall(r"[A-Za-z]{2,}", it["text"])})
rng = random.Random(33)
out, sixteen = [], None
while len(out) < total or sixteen is None:
    k = rng.randint(4, 110)
    s = " ".join(rng.choice(words) for _ in range(k)).capitalize() + "."
    n = len(tok.encode(s).ids)
    if 8 <= n <= 128 and len(out) < total:
        out.append(s)
    if n == 16 and sixteen is None:
        sixteen = s
open(f"{work}/corpus.txt", "w").write("\n".join(out) + "\n")
open(f"{work}/sixteen.txt", "w").write(sixteen + "\n")
lens = [len(tok.encode(s).ids) for s in out]
print(f"corpus: {len(out)} sentences, {sum(lens)} tokens, {min(lens)}-{max(lens)} per sentence")
EOF

rml_run() { # threads, extra flags...; prints texts/s
    local t=$1; shift
    "$RML" embed -m "$MODEL" -f "$work/corpus.txt" -t "$t" --batch 32 --timing --repeat "$REPEAT" "$@" \
        2>&1 >/dev/null | sed -n 's/.* \([0-9.]*\) texts\/s.*/\1/p'
}
llama_run() { # threads; prints sentences/s: llama-embedding over the corpus against over one
    # sentence (load, start-up and the one sentence), wall clock, best of 3 each
    local t=$1 n best_all best_one all one
    n=$(wc -l < "$work/corpus.txt")
    wall() { # the seconds llama-embedding takes over file $1 (all its embeddings checked)
        local s e got want
        want=$(wc -l < "$1")
        s=$(date +%s.%N)
        got=$("$LLAMA_BIN/llama-embedding" -m "$GGUF" -f "$1" -t "$t" -tb "$t" -c 2048 \
            -b 2048 -ub 2048 -np 32 --pooling mean 2>/dev/null | grep -c '^embedding ' || true)
        e=$(date +%s.%N)
        if [ "$got" != "$want" ]; then
            echo "llama-embedding gave $got of $want embeddings" >&2
            exit 1
        fi
        awk -v s="$s" -v e="$e" 'BEGIN { print e - s }'
    }
    best_all=9e9; best_one=9e9
    for _ in $(seq "$REPEAT"); do
        all=$(wall "$work/corpus.txt")
        one=$(wall "$work/sixteen.txt")
        best_all=$(awk -v a="$best_all" -v b="$all" 'BEGIN { print (b < a) ? b : a }')
        best_one=$(awk -v a="$best_one" -v b="$one" 'BEGIN { print (b < a) ? b : a }')
    done
    awk -v n="$n" -v a="$best_all" -v o="$best_one" 'BEGIN { printf "%.1f\n", (n - 1) / (a - o) }'
}
st_run() { # threads; prints sentences/s and the 16-token latency in ms
    "$VENV/bin/python" - "$MODEL" "$work" "$1" "$REPEAT" 2>"$work/st.err" <<'EOF'
import sys, time, torch
from sentence_transformers import SentenceTransformer
model, work, t, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(t)
m = SentenceTransformer(model, device="cpu")
corpus = open(f"{work}/corpus.txt").read().splitlines()
one = open(f"{work}/sixteen.txt").read().strip()
m.encode(corpus[:64], batch_size=32)
best = min((lambda t0: (m.encode(corpus, batch_size=32), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(repeat))
lat = min((lambda t0: (m.encode([one]), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(50))
print(f"{len(corpus) / best:.1f} {lat * 1e3:.2f}")
EOF
}

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$run_llama" = 1 ] || echo "llama-embedding: skipped (SKIP)"
[ "$run_st" = 1 ] || echo "sentence-transformers: skipped (SKIP)"
st_lat=skipped
for t in 1 2; do
    r=$(rml_run "$t"); r8=$(rml_run "$t" --int8)
    [ -n "$r" ] && [ -n "$r8" ] || { echo "rml embed gave no timing" >&2; exit 1; }
    line="threads $t: rml f32 $r sentences/s, rml int8 $r8"
    if [ "$run_llama" = 1 ]; then
        l=$(llama_run "$t")
        line+=", llama-embedding $l"
    fi
    if [ "$run_st" = 1 ]; then
        st_out=$(st_run "$t") || { cat "$work/st.err" >&2; exit 1; }
        read -r s slat <<<"$st_out"
        [ "$t" = 1 ] && st_lat=$slat
        line+=", sentence-transformers $s"
    fi
    echo "$line"
    ratios=""
    [ "$run_llama" = 1 ] && ratios+=$(awk -v r="$r" -v r8="$r8" -v l="$l" 'BEGIN { printf "rml f32 / llama.cpp %.2f, rml int8 / llama.cpp %.2f", r / l, r8 / l }')
    [ "$run_llama" = 1 ] && [ "$run_st" = 1 ] && ratios+=", "
    [ "$run_st" = 1 ] && ratios+=$(awk -v r="$r" -v r8="$r8" -v s="$s" 'BEGIN { printf "rml f32 / sentence-transformers %.2f, rml int8 / sentence-transformers %.2f", r / s, r8 / s }')
    [ -n "$ratios" ] && echo "  ratios: $ratios"
done
lat=$("$RML" embed -m "$MODEL" -f "$work/sixteen.txt" -t 1 --timing --repeat 200 2>&1 >/dev/null |
    sed -n 's/.*): \([0-9.]*\) ms.*/\1/p')
lat8=$("$RML" embed -m "$MODEL" -f "$work/sixteen.txt" -t 1 --int8 --timing --repeat 200 2>&1 >/dev/null |
    sed -n 's/.*): \([0-9.]*\) ms.*/\1/p')
echo "16-token sentence, 1 thread: rml f32 $lat ms, rml int8 $lat8 ms, sentence-transformers $st_lat ms"
