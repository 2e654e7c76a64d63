#!/usr/bin/env python3
"""llama.cpp's teacher-forced int8 error for every fixture GGUF that tests/decoder_gguf_types.rs
checks: runs llama_teacher_forced (built from llama_teacher_forced.cpp beside this script) on
each file with its reference's prompt and generated tokens, and prints, per file, the prefill
figure (checked within 10% of MANIFEST.json's llamacpp_max_abs_diff_prefill_logits: the same
settings, but ggml's kernels add in a different order on another ISA)
and each decode step's max abs logit difference. The test's LLAMACPP_TF table is this output.

Usage (from tests/data/): python tools/llamacpp_teacher_forced.py /path/to/llama_teacher_forced
Needs numpy only.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.dirname(HERE)
DIRS = ["tiny-llama-gguf", "tiny-qwen3/gguf", "tiny-qwen2/gguf", "tiny-gemma3/gguf", "tiny-llama3/gguf"]


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[info["dtype"]]
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(info["shape"])
    return out


def main():
    tool = sys.argv[1]
    for d in DIRS:
        manifest = json.load(open(os.path.join(DATA, d, "MANIFEST.json")))
        for file, entry in sorted(manifest.items()):
            gguf = os.path.join(DATA, d, file)
            if not os.path.exists(gguf):
                continue
            r = load(os.path.join(DATA, d, entry["reference"]))
            with tempfile.NamedTemporaryFile(suffix=".f32") as t:
                t.write(np.concatenate([r["prefill_logits"], r["decode_logits"]]).astype("<f4").tobytes())
                t.flush()
                ids = lambda a: ",".join(str(int(x)) for x in a)  # noqa: E731
                out = subprocess.run([tool, gguf, ids(r["prompt"]), ids(r["generated"]), t.name],
                                     check=True, capture_output=True, text=True).stdout.split()
            nums = [float(x) for x in out]
            want = entry["llamacpp_max_abs_diff_prefill_logits"]
            # Same settings, but ggml's kernels differ per ISA (summation order): within 10%.
            assert abs(nums[0] - want) <= 1e-5 + 0.1 * want, (file, nums[0], want)
            steps = ", ".join(f"{x:.4f}" for x in nums[1:])
            print(f'("{file}", {nums[0]:.4f}, [{steps}]), // MANIFEST prefill {want:.4f}')


if __name__ == "__main__":
    main()
