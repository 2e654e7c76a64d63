#!/usr/bin/env python3
"""Writes tiny-llama-BF16.gguf: the BF16 tiny Llama (../tiny-llama/bf16/model.safetensors) as
llama.cpp's `convert_hf_to_gguf.py --outtype bf16` lays it out, with the `gguf` package only.

- Metadata: copied key for key from tiny-llama-F32.gguf (llama.cpp's converter output for the
  same model: architecture keys, SentencePiece tokenizer), except `general.file_type` = 32
  (llama.cpp's LLAMA_FTYPE_MOSTLY_BF16).
- Tensors: the F32 file's names, order and shapes. Every 2-D tensor is BF16 (the safetensors
  bits unchanged); 1-D tensors (the norms) are F32, widened exactly, as the converter keeps them.
- q/k rows: permuted per head as the converter does for arch llama, so that llama.cpp's RoPE on
  adjacent pairs equals Hugging Face's rotate-half: GGUF row h*hd + 2i + j holds HF row
  h*hd + j*hd/2 + i (i < hd/2, j in {0, 1}); attn_q over the 4 heads, attn_k over the 2 KV heads.
- Check: every tensor equals the F32 file's tensor rounded to bf16 (round to nearest even), bit
  for bit; the folders hold the same weights in three dtypes, so this proves names, shapes and
  permutation.

The reference is ../tiny-llama/bf16/reference.safetensors (transformers in f32 on these weights
widened to f32).

Usage (from tests/data/tiny-llama-gguf/): pip install gguf==0.19.0 numpy; python make_bf16.py
"""
import json
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "tiny-llama", "bf16", "model.safetensors")
F32 = os.path.join(HERE, "tiny-llama-F32.gguf")
OUT = os.path.join(HERE, "tiny-llama-BF16.gguf")
FILE_TYPE_BF16 = 32

TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}
LAYER = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
         "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
         "attn_output.weight": "self_attn.o_proj.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
         "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
         "ffn_norm.weight": "post_attention_layernorm.weight"}


def read_safetensors(path):
    """name -> (dtype string, shape, raw bytes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[a:b])
    return out


def hf_name(gguf_name):
    if gguf_name in TOP:
        return TOP[gguf_name]
    _, layer, rest = gguf_name.split(".", 2)
    return f"model.layers.{layer}.{LAYER[rest]}"


def permute_rows(w, heads):
    """HF rotate-half row order -> llama.cpp's adjacent pairs, per head."""
    rows = w.shape[0]
    hd = rows // heads
    return w.reshape(heads, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def bf16_bits_of_f32(x):
    """Round-to-nearest-even f32 -> bf16 bits (no NaNs here)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def main():
    st = read_safetensors(SRC)
    ref = GGUFReader(F32)
    heads = int(ref.fields["llama.attention.head_count"].contents())
    kv_heads = int(ref.fields["llama.attention.head_count_kv"].contents())

    w = GGUFWriter(OUT, arch=str(ref.fields["general.architecture"].contents()))
    for field in ref.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        value = FILE_TYPE_BF16 if field.name == "general.file_type" else field.contents()
        w.add_key_value(field.name, value, vtype, sub_type=sub)

    for t in ref.tensors:
        dtype, shape, raw = st[hf_name(t.name)]
        assert dtype == "BF16", (t.name, dtype)
        bits = np.frombuffer(raw, dtype=np.uint16).reshape(shape)
        if t.name.endswith("attn_q.weight"):
            bits = permute_rows(bits, heads)
        elif t.name.endswith("attn_k.weight"):
            bits = permute_rows(bits, kv_heads)
        f32_ref = np.asarray(t.data, dtype=np.float32).reshape(shape)
        assert np.array_equal(bf16_bits_of_f32(f32_ref), bits), f"{t.name}: not the F32 file's weights"
        if len(shape) == 1:
            widened = (bits.astype(np.uint32) << 16).view(np.float32)
            w.add_tensor(t.name, widened)
        else:
            w.add_tensor(t.name, np.ascontiguousarray(bits), raw_dtype=GGMLQuantizationType.BF16)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
