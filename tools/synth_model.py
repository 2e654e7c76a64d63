#!/usr/bin/env python3
"""A synthetic Llama-shaped GGUF with random weights, for speed measurements on a model larger
than the last-level cache (the weights' bytes, not their values, set decode speed).

Usage (needs the `gguf` and `numpy` Python packages; tools/synth_model.sh sets them up):
    synth_model.py OUT.gguf --vocab-from TOKENIZER.gguf [--hidden 2048] [--intermediate 8192]
        [--layers 16] [--heads 32] [--kv-heads 8] [--context 8192] [--seed 1234] [--dtype f16]

Writes OUT.gguf, architecture `llama`, every matrix in F16 (`--dtype f32`: F32) and the
RMSNorm weights in F32. The tokenizer (every `tokenizer.*` key) and so the vocabulary size
come from TOKENIZER.gguf, which must be a Llama GGUF with a tokenizer (SmolLM2-135M's gives
49152 tokens, so rml and llama.cpp both tokenize and detokenize the prompts as usual). The
output matrix is tied to the token embedding (no `output.weight`), as in SmolLM2 and
Llama 3.2 1B; the defaults are Llama 3.2 1B's shapes (hidden 2048, FFN 8192, 16 layers,
32 query heads and 8 KV heads of 64), which with a 49152-token vocabulary make 1.07e9
parameters (2.1 GB in F16).

Values: each matrix is normal with mean 0 and std 0.02 (the usual initialization scale), each
norm weight 1.0, so the residual stream and the logits stay finite and of ordinary size.
They are drawn from numpy's PCG64 seeded with (SEED, tensor index), so the file's bytes are
the same on every run and machine with the same arguments. The model predicts nothing useful:
only its shapes and types are realistic. Tensors are written one at a time (peak memory about
0.6 GB for the embedding), in llama.cpp's names and order.
"""

import argparse
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the GGUF file to write (written beside as OUT.tmp, then renamed)")
    ap.add_argument("--vocab-from", required=True, help="a Llama GGUF whose tokenizer is copied")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dtype", choices=["f16", "f32"], default="f16")
    a = ap.parse_args()
    if a.hidden % a.heads or a.heads % a.kv_heads:
        ap.error("hidden must split into heads, and heads into kv-heads")
    if a.hidden % 32 or a.intermediate % 32:
        ap.error("hidden and intermediate must be multiples of 32 (ggml's quantized blocks)")
    return a


def tokenizer_fields(path: str):
    """The `tokenizer.*` key-value pairs of a GGUF, with their GGUF types."""
    r = GGUFReader(path)
    arch = r.fields.get("general.architecture")
    if arch is None or arch.contents() != "llama":
        sys.exit(f"{path}: not a Llama GGUF (general.architecture)")
    out = []
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        if f.types[0] == GGUFValueType.ARRAY:
            out.append((key, f.contents(), GGUFValueType.ARRAY, f.types[1]))
        else:
            out.append((key, f.contents(), f.types[0], None))
    tokens = [v for k, v, _, _ in out if k == "tokenizer.ggml.tokens"]
    if not tokens:
        sys.exit(f"{path}: no tokenizer.ggml.tokens")
    return out, len(tokens[0])


def main() -> None:
    a = parse_args()
    fields, vocab = tokenizer_fields(a.vocab_from)
    head_dim = a.hidden // a.heads
    kv_dim = head_dim * a.kv_heads
    dt = np.float16 if a.dtype == "f16" else np.float32

    # (name, numpy shape [rows, cols] or [n], kind): llama.cpp's tensor names; GGUF stores
    # the dimensions reversed (ne[0] = cols).
    tensors = [("token_embd.weight", (vocab, a.hidden), "w")]
    for i in range(a.layers):
        b = f"blk.{i}."
        tensors += [
            (b + "attn_norm.weight", (a.hidden,), "norm"),
            (b + "attn_q.weight", (a.hidden, a.hidden), "w"),
            (b + "attn_k.weight", (kv_dim, a.hidden), "w"),
            (b + "attn_v.weight", (kv_dim, a.hidden), "w"),
            (b + "attn_output.weight", (a.hidden, a.hidden), "w"),
            (b + "ffn_norm.weight", (a.hidden,), "norm"),
            (b + "ffn_gate.weight", (a.intermediate, a.hidden), "w"),
            (b + "ffn_up.weight", (a.intermediate, a.hidden), "w"),
            (b + "ffn_down.weight", (a.hidden, a.intermediate), "w"),
        ]
    tensors.append(("output_norm.weight", (a.hidden,), "norm"))
    params = sum(int(np.prod(s)) for _, s, _ in tensors)

    tmp = a.out + ".tmp"
    w = GGUFWriter(tmp, "llama")
    w.add_name(f"synthetic llama {params / 1e9:.2f}B (random weights, seed {a.seed})")
    w.add_context_length(a.context)
    w.add_embedding_length(a.hidden)
    w.add_feed_forward_length(a.intermediate)
    w.add_block_count(a.layers)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(LlamaFileType.MOSTLY_F16 if a.dtype == "f16" else LlamaFileType.ALL_F32)
    for key, val, vtype, sub in fields:
        w.add_key_value(key, val, vtype, sub_type=sub)
    for name, shape, kind in tensors:
        d = dt if kind == "w" else np.float32
        w.add_tensor_info(name, shape, np.dtype(d), int(np.prod(shape)) * np.dtype(d).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for idx, (name, shape, kind) in enumerate(tensors):
        if kind == "norm":
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
            continue
        rng = np.random.default_rng([a.seed, idx])
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= 0.02
        w.write_tensor_data(x.astype(dt))
        del x
    w.close()
    os.replace(tmp, a.out)
    print(f"{a.out}: {params} parameters ({params / 1e9:.2f}B), {a.layers} layers, "
          f"hidden {a.hidden}, FFN {a.intermediate}, heads {a.heads}/{a.kv_heads}, vocab {vocab}, "
          f"{os.path.getsize(a.out) / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
