#!/usr/bin/env python3
"""llama.cpp's logits for the token ids that tools/int8_agreement.rs wrote.

Usage: python3 tools/llamacpp_logits.py MODEL.gguf OUT_DIR [THREADS]

For every OUT_DIR/NAME.tokens (u32 little-endian ids) it evaluates the ids with
llama-cpp-python (`Llama(..., logits_all=True)`: llama.cpp's own CPU path, activations
quantized as llama.cpp does) and writes every position's logits to OUT_DIR/NAME.llama.f32
(positions x vocab, f32 little-endian). Run int8_agreement again afterwards to compare.
Needs llama-cpp-python built from the sdist (see tools/README.md) and numpy.
"""
import glob
import os
import sys

import llama_cpp.llama_cpp
import numpy as np
from llama_cpp import Llama

# Without extra buffer types (AMX tiles, repacked weights): on the VM this was written on the
# CPU reports AMX but executing it raises SIGILL. Q4_1 then takes llama.cpp's standard int8
# path (ggml_vec_dot_q4_1_q8_1, activations quantized to Q8_1). RML_LLAMA_EXTRA_BUFTS=1 keeps
# llama.cpp's default.
if os.environ.get("RML_LLAMA_EXTRA_BUFTS") != "1":
    _default = llama_cpp.llama_cpp.llama_model_default_params

    def _params():
        p = _default()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama_cpp.llama_model_default_params = _params

model, out = sys.argv[1], sys.argv[2]
threads = int(sys.argv[3]) if len(sys.argv) > 3 else os.cpu_count()
files = sorted(glob.glob(os.path.join(out, "*.tokens")))
longest = max(os.path.getsize(f) // 4 for f in files)
llm = Llama(model_path=model, n_ctx=max(longest, 512), n_batch=512, logits_all=True,
            n_threads=threads, verbose=False)
for f in files:
    ids = np.fromfile(f, dtype="<u4").tolist()
    llm.reset()
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids)], dtype="<f4")
    logits.tofile(f[: -len(".tokens")] + ".llama.f32")
    print(os.path.basename(f), len(ids), "tokens")
