#!/usr/bin/env python3
"""Writes small seed corpora for the fuzz targets from the test fixtures (tests/data) and,
when present, the SmolLM2 GGUF: real headers, names, dtypes and metadata, with tensors
shrunk to a few elements so that every seed fits libFuzzer's -max_len.

Usage: python3 fuzz/make_seeds.py [OUT_DIR]   (default fuzz/corpus; run from the repo root)
"""
import glob
import json
import os
import struct
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "fuzz", "corpus")
data = os.path.join(root, "tests", "data")
SIZES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1}


def write(target, name, blob):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob)


def safetensors_file(entries, metadata=None):
    header, off, blobs = {}, 0, []
    for name, dtype, shape in entries:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        blobs.append(bytes((i * 7) & 0xFF for i in range(n)))
        off += n
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


# ---------------------------------------------------------------- safetensors
for path in sorted(glob.glob(os.path.join(data, "**", "*.safetensors"), recursive=True)):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", None)
    entries = [(k, v["dtype"], [min(d, 3) for d in v["shape"]]) for k, v in list(header.items())[:4]]
    tag = os.path.relpath(path, data).replace(os.sep, "_")
    write("safetensors", tag, safetensors_file(entries, meta))
write("safetensors", "scalar_and_empty", safetensors_file([("s", "F32", []), ("e", "BF16", [0, 4])]))
write("safetensors", "empty", safetensors_file([]))

# ---------------------------------------------------------------- hf_config
for path in sorted(glob.glob(os.path.join(data, "**", "config*.json"), recursive=True)):
    tag = os.path.relpath(path, data).replace(os.sep, "_")
    text = open(path, "rb").read()
    write("hf_config", tag, text)
base = json.load(open(os.path.join(data, "tiny-llama", "f32", "config.transformers4.json")))
for i, extra in enumerate([
    {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
    {"rope_scaling": {"type": "linear", "factor": 2.0}},
    {"eos_token_id": [1, 2, 3], "num_key_value_heads": None, "head_dim": None},
    {"torch_dtype": "bfloat16", "tie_word_embeddings": True},
]):
    write("hf_config", "variant%d.json" % i, json.dumps({**base, **extra}).encode())

# ---------------------------------------------------------------- gguf
def gstr(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_file(kvs, tensors, alignment=32):
    """kvs: [(key, type, encoded value)]; tensors: [(name, ne, ggml_type, bytes)]."""
    body = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        body += gstr(k) + struct.pack("<I", t) + v
    blob, infos = b"", b""
    for name, ne, ty, data_bytes in tensors:
        blob += b"\0" * ((-len(blob)) % alignment)
        infos += gstr(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        infos += struct.pack("<IQ", ty, len(blob))
        blob += data_bytes
    body += infos
    body += b"\0" * ((-len(body)) % alignment)
    return body + blob


FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_value(b, pos, t, keep):
    """Returns (encoded value with arrays cut to `keep` elements, new position)."""
    if t in FIXED:
        return b[pos : pos + FIXED[t]], pos + FIXED[t]
    if t == 8:
        (n,) = struct.unpack_from("<Q", b, pos)
        return b[pos : pos + 8 + n], pos + 8 + n
    et, n = struct.unpack_from("<IQ", b, pos)
    pos += 12
    items = []
    for i in range(n):
        v, pos = read_value(b, pos, et, keep)
        if i < keep:
            items.append(v)
    return struct.pack("<IQ", et, len(items)) + b"".join(items), pos


gguf_path = os.environ.get("RML_SMOLLM2_GGUF",
                           os.path.join(root, "target", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
kvs = []
if os.path.exists(gguf_path):
    with open(gguf_path, "rb") as f:
        b = f.read(4 << 20)
    _, _, n_t, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    pos = 24
    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", b, pos)
        key = b[pos + 8 : pos + 8 + kl]
        pos += 8 + kl
        (t,) = struct.unpack_from("<I", b, pos)
        pos += 4
        v, pos = read_value(b, pos, t, 8)
        if key == b"tokenizer.chat_template":
            v = gstr(b"{{ messages }}")
        kvs.append((key, t, v))
else:
    print("make_seeds: no SmolLM2 GGUF at %s; GGUF seeds are synthetic only" % gguf_path)
    kvs = [(b"general.architecture", 8, gstr("llama")), (b"llama.block_count", 4, struct.pack("<I", 1))]
tensors = [
    ("token_embd.weight", [32, 2], 8, bytes(68)),       # Q8_0
    ("blk.0.attn_q.weight", [32, 2], 3, bytes(40)),     # Q4_1
    ("blk.0.attn_k.weight", [32, 1], 2, bytes(18)),     # Q4_0
    ("blk.0.attn_norm.weight", [4], 0, bytes(16)),      # F32
    ("blk.0.ffn_norm.weight", [4], 1, bytes(8)),        # F16
    ("output_norm.weight", [4], 30, bytes(8)),          # BF16
    ("blk.0.ffn_down.weight", [256], 14, bytes(210)),   # Q6_K (unsupported)
]
write("gguf", "smollm2_like", gguf_file(kvs, tensors))
write("gguf", "metadata_only", gguf_file(kvs, []))
write("gguf", "tensors_only", gguf_file([], tensors))
write("gguf", "align64", gguf_file([(b"general.alignment", 4, struct.pack("<I", 64))], tensors, 64))
for t in sorted(os.listdir(out)):
    print("make_seeds: %s: %d seeds" % (t, len(os.listdir(os.path.join(out, t)))))
