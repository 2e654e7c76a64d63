#!/usr/bin/env python3
"""rml's dequantization of a GGUF's quantized tensors against gguf-py's (the reference
dequantizers that ship with llama.cpp's Python package).

Usage, from the project root after `cargo build --release --features cli --example fidelity`,
in a virtual environment with `pip install gguf numpy`:

    python3 tools/dequant_check.py MODEL.gguf [NAME_SUBSTRING]

Runs `target/release/examples/fidelity dequant MODEL.gguf TMPDIR [NAME_SUBSTRING]` (rml's
`quant::dequantize` of every quantized tensor whose name contains the substring, all by
default), dequantizes the same tensors with `gguf.quants.dequantize`, and prints per tensor
type: the tensors, the values compared, how many differ at all, and the largest |difference|
relative to the tensor's largest |value|. Exit status 1 if any value differs by more than
1e-6 of that scale (the two compute the same products of f16 scales and small integers in
f32; a wrong scale, offset or bit layout differs by whole quantization steps).
"""
import collections
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__.split("\n\n")[1])
    model = sys.argv[1]
    filt = sys.argv[2] if len(sys.argv) == 3 else ""
    fid = os.environ.get("RML_FIDELITY_BIN", "target/release/examples/fidelity")
    reader = GGUFReader(model)
    rows = collections.defaultdict(lambda: [0, 0, 0, 0.0, ""])
    bad = False
    with tempfile.TemporaryDirectory() as tmp:
        listing = subprocess.run([fid, "dequant", model, tmp, filt], check=True,
                                 capture_output=True, text=True).stdout
        done = dict(line.split() for line in listing.splitlines())
        for t in reader.tensors:
            if t.name not in done:
                continue
            ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
            got = np.fromfile(os.path.join(tmp, t.name + ".f32"), dtype="<f4")
            if got.size != ref.size:
                raise SystemExit(f"{t.name}: rml gave {got.size} values, gguf-py {ref.size}")
            diff = np.abs(got - ref)
            scale = max(float(np.abs(ref).max()), 1e-30)
            rel = float(diff.max()) / scale
            r = rows[t.tensor_type.name]
            r[0] += 1
            r[1] += ref.size
            r[2] += int(np.count_nonzero(diff))
            if rel > r[3] or not r[4]:
                r[3], r[4] = rel, t.name
            bad |= rel > 1e-6
    print(f"{'type':<8} {'tensors':>7} {'values':>11} {'differ':>9}  largest |diff| / max|value|")
    for ty, (n, vals, differ, rel, name) in sorted(rows.items()):
        print(f"{ty:<8} {n:>7} {vals:>11} {differ:>9}  {rel:.3e} ({name})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
