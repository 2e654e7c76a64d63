"""Renders the chat templates the way transformers' apply_chat_template does (its jinja2
environment: ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop controls,
raise_exception and a tojson that keeps non-ASCII), printing the strings tests/chat_template.rs
expects. Run from the repository root: `pip install jinja2 && python3 tests/data/chat/render_expected.py`
(made with jinja2 3.1.6).
"""
import json

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception


def render(path, messages, add_generation_prompt, bos_token, eos_token):
    with open(path, encoding="utf-8") as f:
        template = env.from_string(f.read())
    return template.render(messages=messages, tools=None, documents=None,
                           add_generation_prompt=add_generation_prompt,
                           bos_token=bos_token, eos_token=eos_token)


TWO_TURNS = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And of Italy?"},
]
SYSTEM = [{"role": "system", "content": "You answer in one word."}] + TWO_TURNS

# SmolLM2's template (tokenizer.chat_template of its GGUF), its tokenizer_config.json tokens.
SMOL = "tests/data/smollm2-135m/chat_template.jinja"
print("smollm2 two turns:", json.dumps(render(SMOL, TWO_TURNS, True, "<|im_start|>", "<|im_end|>")))
print("smollm2 with system:", json.dumps(render(SMOL, SYSTEM, True, "<|im_start|>", "<|im_end|>")))
# rml's fallback for Gemma GGUFs without a template.
GEMMA = "src/tokenizer/gemma.jinja"
print("gemma two turns:", json.dumps(render(GEMMA, TWO_TURNS, True, "<bos>", "<eos>")))
print("gemma with system:", json.dumps(render(GEMMA, SYSTEM, True, "<bos>", "<eos>")))
PY = "tests/data/chat/pycompat.jinja"
print("pycompat:", json.dumps(render(PY, [{"role": "user", "content": "  Hi there?  "},
                                          {"role": "assistant", "content": "Hello."}],
                                     True, "<s>", "</s>")))
try:
    render(PY, [{"role": "user", "content": "/reset"}], True, "<s>", "</s>")
except jinja2.exceptions.TemplateError as e:
    print("pycompat raises:", e)
