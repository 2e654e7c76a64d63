#!/usr/bin/env bash
# Makes the encoder reference data under tests/data/ (see tests/data/README.md, sections
# "minilm-ref/" and "tiny-bert/ tiny-bge/ tiny-nomic-bert/"):
#   1. a venv with PyTorch (the default wheel, run on the CPU), transformers and
#      sentence-transformers, at the versions below;
#   2. the real all-MiniLM-L6-v2 folder (.ci/fetch-model.sh minilm);
#   3. tools/embedding_refs.py: MiniLM reference embeddings + token ids, and the tiny random
#      BERT / bge-style / nomic-bert fixtures with transformers' own outputs.
# About 2 minutes on 2 cores once the venv exists (the torch wheels are ~4.5 GB).
#
#   bash tools/embedding_refs.sh            (VENV=... to put the venv elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.cache/rml-embed/venv}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    "$VENV/bin/pip" install --quiet torch==2.15.0 transformers==5.24.0 sentence-transformers==6.2.0 \
        safetensors==0.8.0 numpy==2.4.6 tokenizers==0.23.3
fi
bash .ci/fetch-model.sh minilm
PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    "$VENV/bin/python" tools/embedding_refs.py --model target/models/all-MiniLM-L6-v2 --out tests/data
