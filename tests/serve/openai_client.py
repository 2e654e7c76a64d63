"""The real `openai` Python client against `rml serve` (run by tests/serve_openai.rs).

Environment: RML_SERVE_URL (http://HOST:PORT), RML_SERVE_MODEL (the served id),
RML_EXPECTED_CHAT / RML_EXPECTED_COMPLETION (`rml generate`'s greedy texts for the prompts
below, 12 and 10 tokens).
"""
import os

import openai

URL = os.environ["RML_SERVE_URL"]
MODEL = os.environ["RML_SERVE_MODEL"]
EXPECTED_CHAT = os.environ["RML_EXPECTED_CHAT"]
EXPECTED_COMPLETION = os.environ["RML_EXPECTED_COMPLETION"]
QUESTION = "What is the capital of France?"
PROMPT = "Once upon a time"

client = openai.OpenAI(base_url=URL + "/v1", api_key="k", max_retries=0, timeout=300)

# /v1/models
ids = [m.id for m in client.models.list().data]
assert ids == [MODEL], ids

# Chat, non-streaming: greedy text equals `rml generate --chat`, usage adds up.
r = client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=12, temperature=0
)
assert r.object == "chat.completion", r
assert r.choices[0].message.role == "assistant"
assert r.choices[0].message.content == EXPECTED_CHAT, (r.choices[0].message.content, EXPECTED_CHAT)
assert r.choices[0].finish_reason == "length"
assert r.usage.completion_tokens == 12
assert r.usage.total_tokens == r.usage.prompt_tokens + 12
assert r.usage.prompt_tokens_details.cached_tokens is not None

# Chat, streaming with include_usage: same text, usage in the last chunk.
text, usage, finish = "", None, None
for chunk in client.chat.completions.create(
    model=MODEL,
    messages=[{"role": "user", "content": QUESTION}],
    max_tokens=12,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
):
    assert chunk.object == "chat.completion.chunk"
    if chunk.choices:
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage is not None:
        usage = chunk.usage
assert text == EXPECTED_CHAT, (text, EXPECTED_CHAT)
assert finish == "length"
assert usage is not None and usage.completion_tokens == 12
assert usage.prompt_tokens_details.cached_tokens > 0  # the same prompt again

# Completions, streamed and not.
c = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0)
assert c.object == "text_completion"
assert c.choices[0].text == EXPECTED_COMPLETION, (c.choices[0].text, EXPECTED_COMPLETION)
assert c.usage.completion_tokens == 10
streamed = "".join(
    ch.choices[0].text
    for ch in client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0, stream=True
    )
    if ch.choices
)
assert streamed == EXPECTED_COMPLETION, (streamed, EXPECTED_COMPLETION)

# Seeded sampling repeats; logprobs come back.
def sampled():
    return client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=12,
        temperature=0.9,
        top_p=0.95,
        seed=1234,
        logprobs=True,
        top_logprobs=2,
    )

a, b = sampled(), sampled()
assert a.choices[0].message.content == b.choices[0].message.content
lp = a.choices[0].logprobs.content
assert len(lp) == 12 and all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in lp)

# Errors the client maps to its exception types.
try:
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], n=2)
    raise AssertionError("n=2 accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400 and e.body["param"] == "n", e.body
try:
    client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    raise AssertionError("unknown model accepted")
except openai.NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body
try:
    openai.OpenAI(base_url=URL + "/v1", api_key="wrong", max_retries=0).models.list()
    raise AssertionError("wrong key accepted")
except openai.AuthenticationError as e:
    assert e.status_code == 401

print("openai client: all checks passed")
