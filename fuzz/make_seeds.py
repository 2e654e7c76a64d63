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
# ---------------------------------------------------------------- real GGUF files, every type
# ggml type id -> (elements, bytes) per block.
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
          20: (32, 18), 30: (1, 2)}


def read_gguf(path):
    """(kvs as [(key, type, encoded value)], {ggml type: [(name, ne, data bytes)]}) of a file."""
    b = open(path, "rb").read()
    _, _, n_t, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    pos, kvs, align = 24, [], 32
    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", b, pos)
        key = b[pos + 8 : pos + 8 + kl]
        pos += 8 + kl
        (t,) = struct.unpack_from("<I", b, pos)
        pos += 4
        start = pos
        _, pos = read_value(b, pos, t, 1 << 30)
        if key == b"general.alignment":
            (align,) = struct.unpack_from("<I", b, start)
        kvs.append((key, t, b[start:pos]))
    infos = []
    for _ in range(n_t):
        (kl,) = struct.unpack_from("<Q", b, pos)
        name = b[pos + 8 : pos + 8 + kl].decode()
        pos += 8 + kl
        (nd,) = struct.unpack_from("<I", b, pos)
        ne = list(struct.unpack_from("<%dQ" % nd, b, pos + 4))
        pos += 4 + 8 * nd
        ty, off = struct.unpack_from("<IQ", b, pos)
        pos += 12
        infos.append((name, ne, ty, off))
    data_start = pos + (-pos) % align
    by_type = {}
    for name, ne, ty, off in infos:
        by_type.setdefault(ty, []).append((name, ne, b[data_start + off : data_start + off + 4096]))
    return kvs, by_type


def cut_arrays(kvs, keep):
    out = []
    for k, t, v in kvs:
        if t == 9:
            v, _ = read_value(v, 0, 9, keep)
        out.append((k, t, v))
    return out


def one_row(ty, name, ne, raw, blocks=1):
    """A 1-row slice of a real tensor: `blocks` blocks of its first bytes."""
    elems, nbytes = BLOCKS[ty]
    per = max(1, 256 // elems) if elems == 1 else 1   # float rows: 256 values
    return (name, [elems * per * blocks, 1], ty, raw[: nbytes * per * blocks])


ggufs = sorted(glob.glob(os.path.join(data, "**", "*.gguf"), recursive=True))
real_blocks = {}  # ggml type -> bytes of a few real blocks
vocabs = {}
for path in ggufs:
    tag = os.path.basename(path)[: -len(".gguf")]
    fkvs, by_type = read_gguf(path)
    for ty, ts in by_type.items():
        if ty in BLOCKS:
            real_blocks.setdefault(ty, ts[0][2])
    small = cut_arrays(fkvs, 8)
    rows = [one_row(ty, ts[0][0], ts[0][1], ts[0][2]) for ty, ts in sorted(by_type.items()) if ty in BLOCKS]
    # Every type of the file, one real row each (mixed-type files stay mixed).
    write("gguf", tag + "_rows", gguf_file(small, rows))
    name, ne, ty, blob = rows[-1]
    # Wrong sizes: a row claiming one block more than the file holds, and a row that is not
    # a whole number of blocks.
    write("gguf", tag + "_short", gguf_file(small, rows[:-1] + [(name, [ne[0] * 2, 1], ty, blob)])[:-1])
    if BLOCKS[ty][0] > 1:
        write("gguf", tag + "_partial_block", gguf_file(small, [(name, [ne[0] - 1, 1], ty, blob)]))
    # Model config: metadata under the architecture's prefix, with the embedding / output.
    cfg_tensors = [(n, ne_, t, b_) for n, ne_, t, b_ in rows if n in ("token_embd.weight", "output.weight")]
    write("model_config", tag, gguf_file(small, cfg_tensors))
    # Tokenizer: the whole real vocabulary (tiny models have 256-512 tokens).
    tok = [(k, t, v) for k, t, v in fkvs if k.startswith(b"tokenizer.") and k != b"tokenizer.chat_template"]
    key = b"".join(v for _, _, v in tok)
    if key not in vocabs:
        vocabs[key] = tag
        head = [(k, t, v) for k, t, v in fkvs if k in (b"general.architecture", b"general.name")]
        write("gguf_tokenizer", tag, gguf_file(head + tok, []))
# Synthetic: every type in one file, plus F16, at 2 rows each.
allrows = []
for ty in sorted(BLOCKS):
    blob = real_blocks.get(ty) or bytes((i * 37) & 0xFF for i in range(4096))
    name, ne, ty, b1 = one_row(ty, "blk.0.t%d.weight" % ty, None, blob, 2)
    allrows.append((name, [ne[0] // 2, 2], ty, b1))
write("gguf", "every_type", gguf_file(small, allrows))

# ---------------------------------------------------------------- gguf_tokenizer (synthetic)
def u32(x):
    return struct.pack("<I", x)


def arr(et, items):
    enc = {8: gstr, 6: lambda x: struct.pack("<f", x), 5: lambda x: struct.pack("<i", x)}[et]
    return struct.pack("<IQ", et, len(items)) + b"".join(enc(x) for x in items)


def vocab_file(kvs):
    return gguf_file([(b"general.architecture", 8, gstr("llama")), (b"general.name", 8, gstr("fuzz é 日本"))] + kvs, [])


# SentencePiece with byte fallback: <unk> <s> </s>, 256 byte tokens, then pieces by score.
pieces = ["\u2581", "\u2581t", "he", "\u2581the", "\u2581a", "in", "\u2581w", "or", "ld", "\u2581wor",
          "\u2581world", "ll", "\u2581He", "\u2581Hello", "é", "日", "本"]
spm_tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + pieces
spm_types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
spm_scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
base = [(b"tokenizer.ggml.model", 8, gstr("llama")),
        (b"tokenizer.ggml.tokens", 9, arr(8, spm_tokens)),
        (b"tokenizer.ggml.scores", 9, arr(6, spm_scores)),
        (b"tokenizer.ggml.token_type", 9, arr(5, spm_types)),
        (b"tokenizer.ggml.bos_token_id", 4, u32(1)),
        (b"tokenizer.ggml.eos_token_id", 4, u32(2)),
        (b"tokenizer.ggml.unknown_token_id", 4, u32(0))]
write("gguf_tokenizer", "spm_bytes", vocab_file(base))
write("gguf_tokenizer", "spm_flags", vocab_file(base + [
    (b"tokenizer.ggml.add_bos_token", 7, b"\x00"), (b"tokenizer.ggml.add_eos_token", 7, b"\x01"),
    (b"tokenizer.ggml.add_space_prefix", 7, b"\x00")]))
write("gguf_tokenizer", "spm_user_defined", vocab_file(base[:3] + [
    (b"tokenizer.ggml.token_type", 9, arr(5, spm_types[:-3] + [4, 5, 1]))] + base[4:]))
write("gguf_tokenizer", "spm_no_bytes", vocab_file([
    (b"tokenizer.ggml.model", 8, gstr("llama")),
    (b"tokenizer.ggml.tokens", 9, arr(8, ["<unk>", "<s>", "</s>"] + pieces))]))
# Byte-level BPE: the 256 byte characters, merges, a control token; each pre-tokenizer.
def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


bl = bytes_to_unicode()
merges = ["\u0120 t", "h e", "\u0120t he", "l l", "o r", "\u0120w or", "\u0120wor l", "\u0120worl d", "1 2"]
merged = ["\u0120t", "he", "\u0120the", "ll", "or", "\u0120wor", "\u0120worl", "\u0120world", "12"]
bpe_tokens = bl + merged + ["<|endoftext|>", "<|im_start|>"]
bpe_types = [1] * (len(bpe_tokens) - 2) + [3, 4]
for pre in ["default", "smollm", "qwen2", "llama-bpe"]:
    write("gguf_tokenizer", "bpe_" + pre, vocab_file([
        (b"tokenizer.ggml.model", 8, gstr("gpt2")), (b"tokenizer.ggml.pre", 8, gstr(pre)),
        (b"tokenizer.ggml.tokens", 9, arr(8, bpe_tokens)),
        (b"tokenizer.ggml.token_type", 9, arr(5, bpe_types)),
        (b"tokenizer.ggml.merges", 9, arr(8, merges)),
        (b"tokenizer.ggml.bos_token_id", 4, u32(len(bpe_tokens) - 2)),
        (b"tokenizer.ggml.eos_token_id", 4, u32(len(bpe_tokens) - 2)),
        (b"tokenizer.ggml.add_bos_token", 7, b"\x01")]))

# ---------------------------------------------------------------- model_config (config.json)
for path in sorted(glob.glob(os.path.join(data, "**", "config*.json"), recursive=True)):
    write("model_config", os.path.relpath(path, data).replace(os.sep, "_"), open(path, "rb").read())

# ---------------------------------------------------------------- safetensors_packed
NAMES = {2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
         12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 20: "IQ4_NL"}


def packed_file(entries, metadata):
    """entries: [(name, dtype, shape, bytes)] with real bytes."""
    header, off, blobs = {}, 0, []
    for name, dtype, shape, blob in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


for ty, name in NAMES.items():
    bb = BLOCKS[ty][1]
    blob = (real_blocks.get(ty) or bytes(4096))[: 2 * bb]
    blob = blob + bytes(2 * bb - len(blob))
    meta = {"format": "pt", "rml.dtype.w": name}
    write("safetensors_packed", name, packed_file([("w", "U8", [2, bb], blob), ("n", "F32", [2], bytes(8))], meta))
    write("safetensors_packed", name + "_ragged", packed_file([("w", "U8", [2, bb - 1], blob[: 2 * bb - 2])], meta))
    write("safetensors_packed", name + "_flat", packed_file([("w", "U8", [2 * bb], blob)], meta))
allp = [("t%d" % ty, "U8", [1, BLOCKS[ty][1]], (real_blocks.get(ty) or bytes(4096))[: BLOCKS[ty][1]].ljust(BLOCKS[ty][1], b"\0"))
        for ty in NAMES]
write("safetensors_packed", "every_type", packed_file(allp, {"rml.dtype.t%d" % ty: n for ty, n in NAMES.items()}))
write("safetensors_packed", "unknown_dtype", packed_file(allp[:1], {"rml.dtype.t2": "Q9_9"}))
write("safetensors_packed", "missing_tensor", packed_file(allp[:1], {"rml.dtype.gone": "Q8_0"}))
write("safetensors_packed", "on_f32", packed_file([("f", "F32", [2, 34], bytes(272))], {"rml.dtype.f": "Q8_0"}))
write("safetensors_packed", "empty_rows", packed_file([("z", "U8", [0, 34], b"")], {"rml.dtype.z": "Q8_0"}))

# ---------------------------------------------------------------- safetensors_index
def index(wm, **extra):
    return json.dumps({"metadata": {"total_size": 1234}, "weight_map": wm, **extra}, indent=2).encode()


shard = "model-%05d-of-00002.safetensors"
write("safetensors_index", "two_shards", index({
    "model.embed_tokens.weight": shard % 1, "model.layers.0.self_attn.q_proj.weight": shard % 1,
    "model.norm.weight": shard % 2, "lm_head.weight": shard % 2}))
write("safetensors_index", "path_shard", index({"a": "../model.safetensors", "b": "sub/x.safetensors"}))
write("safetensors_index", "dot_shards", index({"a": ".", "b": "..", "c": "", "d": "a\\b"}))
write("safetensors_index", "not_string", index({"a": 3, "b": None}))
write("safetensors_index", "no_weight_map", json.dumps({"metadata": {}}).encode())
write("safetensors_index", "duplicate_key", b'{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}')
write("safetensors_index", "unicode", index({"w\u00e9\u65e5": "m\u00e9.safetensors", "": "z"}))

for t in sorted(os.listdir(out)):
    print("make_seeds: %s: %d seeds" % (t, len(os.listdir(os.path.join(out, t)))))
