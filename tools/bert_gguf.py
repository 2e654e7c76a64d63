"""Runs llama.cpp's own converter (convert_hf_to_gguf.py) on a BERT / nomic-bert folder.

Used by tools/bert_gguf.sh. The one change to the converter's behaviour: a vocabulary whose
pre-tokenizer hash the converter does not know (the random tiny fixtures' made-up vocabularies)
is written with tokenizer.ggml.pre = "default" instead of aborting; a real model's vocabulary
(all-MiniLM-L6-v2's) is looked up in the converter's table as usual.

    python tools/bert_gguf.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf [converter options...]
"""

import sys

llama_cpp, model, out, *rest = sys.argv[1:]
sys.path.insert(0, llama_cpp)
sys.path.insert(0, llama_cpp + "/gguf-py")

import convert_hf_to_gguf  # noqa: E402
from conversion.base import TextModel  # noqa: E402

original = TextModel.get_vocab_base_pre


def tolerant(self, tokenizer):
    try:
        return original(self, tokenizer)
    except NotImplementedError:
        print("bert_gguf.py: unknown pre-tokenizer hash (a made-up vocabulary): writing "
              "tokenizer.ggml.pre = \"default\"", file=sys.stderr)
        return "default"


TextModel.get_vocab_base_pre = tolerant
sys.argv = ["convert_hf_to_gguf.py", model, "--outfile", out, *rest]
convert_hf_to_gguf.main()
