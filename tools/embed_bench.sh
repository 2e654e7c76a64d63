#!/usr/bin/env bash
# The sentence-embedding speed benchmark of issue 33, all-MiniLM-L6-v2 on this machine:
#   - sentences/s over 1,000 sentences of 8-128 tokens (special tokens included), batch 32,
#     1 and 2 threads: rml f32 and int8 (`rml embed --timing`, the model loaded once, best of
#     3 passes), llama.cpp's llama-embedding on the f32 GGUF (batches of 32 sequences, -np 32;
#     it prints no timings, so: wall clock over the corpus minus wall clock over one sentence,
#     best of 3 each, which leaves out loading), sentence-transformers on PyTorch CPU
#     (encode(), batch_size 32, torch.set_num_threads, best of 3);
#   - the latency of one 16-token sentence on 1 thread (rml: best of 200 runs;
#     sentence-transformers: best of 50).
# Every figure of one invocation is taken on the same machine within a few minutes; on a machine
# shared with other work compare the ratios of one run, not absolute figures across runs.
#
#   bash tools/embed_bench.sh        (RML=path/to/rml, default target/release/rml; VENV as
#                                      tools/embedding_refs.sh; LLAMA_BIN: llama.cpp's bin/)
# Needs: target/models/all-MiniLM-L6-v2 (.ci/fetch-model.sh minilm), its GGUF
# (tools/bert_gguf.sh minilm), the venv of tools/embedding_refs.sh, llama.cpp's binaries
# (../shared/peers/build_llamacpp.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=target/models/all-MiniLM-L6-v2
GGUF=target/models/all-MiniLM-L6-v2-f32.gguf
RML=${RML:-target/release/rml}
VENV=${VENV:-$HOME/.cache/rml-embed/venv}
LLAMA_BIN=${LLAMA_BIN:-$HOME/.cache/rml-peers/llama.cpp-build/bin}
for f in "$MODEL/model.safetensors" "$GGUF" "$RML" "$VENV/bin/python" "$LLAMA_BIN/llama-embedding"; do
    [ -e "$f" ] || { echo "missing: $f (see the header of $0)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# The corpus: English-looking sentences of random words (seeded) from the words of the MiniLM
# reference texts, kept when MiniLM's tokenizer gives 8-128 tokens; and one of exactly 16.
"$VENV/bin/python" - "$MODEL" "$work" <<'EOF'
import json, random, re, sys
from tokenizers import Tokenizer
model, work = sys.argv[1], sys.argv[2]
tok = Tokenizer.from_file(f"{model}/tokenizer.json")
tok.no_truncation(); tok.no_padding()
items = json.load(open("tests/data/minilm-ref/sentences.json"))["items"]
words = sorted({w.lower() for it in items for w in re.findall(r"[A-Za-z]{2,}", it["text"])})
rng = random.Random(33)
out, sixteen = [], None
while len(out) < 1000:
    k = rng.randint(4, 110)
    s = " ".join(rng.choice(words) for _ in range(k)).capitalize() + "."
    n = len(tok.encode(s).ids)
    if 8 <= n <= 128:
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
    "$RML" embed -m "$MODEL" -f "$work/corpus.txt" -t "$t" --batch 32 --timing --repeat 3 "$@" \
        2>&1 >/dev/null | sed -n 's/.* \([0-9.]*\) texts\/s.*/\1/p'
}
llama_run() { # threads; prints sentences/s: llama-embedding over the corpus against over one
    # sentence (load, start-up and the one sentence), wall clock, best of 3 each
    local t=$1 n best_all best_one
    n=$(wc -l < "$work/corpus.txt")
    wall() {
        local s e
        s=$(date +%s.%N)
        "$LLAMA_BIN/llama-embedding" -m "$GGUF" -f "$1" -t "$t" -tb "$t" -c 8192 -b 8192 \
            -ub 8192 -np 32 --pooling mean >/dev/null 2>&1
        e=$(date +%s.%N)
        awk -v s="$s" -v e="$e" 'BEGIN { print e - s }'
    }
    best_all=9e9; best_one=9e9
    for _ in 1 2 3; do
        best_all=$(awk -v a="$best_all" -v b="$(wall "$work/corpus.txt")" 'BEGIN { print (b < a) ? b : a }')
        best_one=$(awk -v a="$best_one" -v b="$(wall "$work/sixteen.txt")" 'BEGIN { print (b < a) ? b : a }')
    done
    awk -v n="$n" -v a="$best_all" -v o="$best_one" 'BEGIN { printf "%.1f\n", (n - 1) / (a - o) }'
}
st_run() { # threads; prints sentences/s and the 16-token latency in ms
    "$VENV/bin/python" - "$MODEL" "$work" "$1" 2>/dev/null <<'EOF'
import sys, time, torch
from sentence_transformers import SentenceTransformer
model, work, t = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(t)
m = SentenceTransformer(model, device="cpu")
corpus = open(f"{work}/corpus.txt").read().splitlines()
one = open(f"{work}/sixteen.txt").read().strip()
m.encode(corpus[:64], batch_size=32)
best = min((lambda t0: (m.encode(corpus, batch_size=32), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(3))
lat = min((lambda t0: (m.encode([one]), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(50))
print(f"{len(corpus) / best:.1f} {lat * 1e3:.2f}")
EOF
}

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for t in 1 2; do
    r=$(rml_run "$t"); r8=$(rml_run "$t" --int8)
    l=$(llama_run "$t")
    read -r s _ <<<"$(st_run "$t")"
    echo "threads $t: rml f32 $r sentences/s, rml int8 $r8, llama-embedding $l, sentence-transformers $s"
    awk -v r="$r" -v r8="$r8" -v l="$l" -v s="$s" 'BEGIN { printf "  ratios: rml f32 / llama.cpp %.2f, rml int8 / llama.cpp %.2f, rml f32 / sentence-transformers %.2f, rml int8 / sentence-transformers %.2f\n", r / l, r8 / l, r / s, r8 / s }'
done
lat=$("$RML" embed -m "$MODEL" -f "$work/sixteen.txt" -t 1 --timing --repeat 200 2>&1 >/dev/null |
    sed -n 's/.*): \([0-9.]*\) ms.*/\1/p')
lat8=$("$RML" embed -m "$MODEL" -f "$work/sixteen.txt" -t 1 --int8 --timing --repeat 200 2>&1 >/dev/null |
    sed -n 's/.*): \([0-9.]*\) ms.*/\1/p')
read -r _ st_lat <<<"$(st_run 1)"
echo "16-token sentence, 1 thread: rml f32 $lat ms, rml int8 $lat8 ms, sentence-transformers $st_lat ms"
