#!/usr/bin/env python3
"""Requantizes SmolLM2-135M with llama.cpp's llama-quantize into each standard type and checks
that rml's greedy continuation agrees with llama-completion's on the same file.

Usage, from the project root after `cargo build --release --features cli` and
`../shared/peers/build_llamacpp.sh`:

    python3 tools/requant_check.py [--types Q4_K_M,Q5_K_M,...] [--min-tokens 8]

Inputs: the SmolLM2 Q4_1 GGUF that `.ci/fetch-model.sh` puts in target/models (or
$RML_SMOLLM2_GGUF), llama.cpp's tools in $LLAMA_BIN (default ~/.cache/rml-peers/llama.cpp-build/bin).
Outputs: target/models/requant/SmolLM2-135M-Instruct.<TYPE>.gguf (never committed) and a table.

For each type: `llama-quantize --allow-requantize IN OUT TYPE`, then
`llama-completion -m OUT -p PROMPT -n 16 --temp 0 -no-cnv -nr` (`-nr`: no weight repacking,
which dies with SIGILL on some AMX machines) and `rml generate --model OUT -p PROMPT -n 16
--activations int8-plain` (greedy: temperature 0). Both continuations are tokenized with
`llama-tokenize` on the same file; the agreement is the length of the common prefix of the two
token lists after the prompt's tokens. Exit status 1 if any type agrees on fewer than
--min-tokens tokens (the issue's bar: 8) or a tool fails.

llama.cpp always quantizes activations to 8 bits by the same blockwise rule, so rml's
int8-plain mode is the like-for-like check of the kernels; rml's default (int8 with outlier
correction, closer to f32) and `--activations f32` are printed beside it for information: one
greedy continuation passes near-ties where any change of rounding picks the other token, so
agreement with llama.cpp's text is not a measure of accuracy (tools/int8_agreement.rs is).
"""

import argparse
import os
import subprocess
import sys

PROMPT = "Once upon a time, there was a little"
TYPES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q5_0", "IQ4_NL"]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r


def tokenize(bin_dir, model, text):
    out = run([f"{bin_dir}/llama-tokenize", "-m", model, "-p", text, "--ids", "--log-disable"]).stdout
    line = [l for l in out.splitlines() if l.startswith("[")][-1]
    return [int(t) for t in line.strip("[]").split(",") if t.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--min-tokens", type=int, default=8)
    ap.add_argument("-n", type=int, default=16)
    args = ap.parse_args()

    bin_dir = os.environ.get("LLAMA_BIN", os.path.expanduser("~/.cache/rml-peers/llama.cpp-build/bin"))
    src = os.environ.get("RML_SMOLLM2_GGUF", "target/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    rml = os.environ.get("RML_BIN", "target/release/rml")
    for need in (f"{bin_dir}/llama-quantize", f"{bin_dir}/llama-completion", src, rml):
        if not os.path.exists(need):
            raise SystemExit(f"missing {need}: build rml (cargo build --release --features cli), "
                             "llama.cpp (../shared/peers/build_llamacpp.sh) and fetch the model "
                             "(.ci/fetch-model.sh smollm2)")
    os.makedirs("target/models/requant", exist_ok=True)
    failed = False
    rows = []
    for ty in args.types.split(","):
        out = f"target/models/requant/SmolLM2-135M-Instruct.{ty}.gguf"
        if not os.path.exists(out):
            run([f"{bin_dir}/llama-quantize", "--allow-requantize", src, out + ".tmp", ty])
            os.replace(out + ".tmp", out)
        ref = run([f"{bin_dir}/llama-completion", "-m", out, "-p", PROMPT, "-n", str(args.n),
                   "--temp", "0", "-no-cnv", "-nr", "-t", "2", "--no-warmup"],
                  stdin=subprocess.DEVNULL).stdout
        # llama-completion echoes the prompt (after its BOS, if any) before the continuation.
        ref = ref[ref.index(PROMPT) + len(PROMPT):] if PROMPT in ref else ref
        texts = {}
        for act in ("int8-plain", "int8", "f32"):
            texts[act] = run([rml, "generate", "--model", out, "-p", PROMPT, "-n", str(args.n),
                              "--activations", act, "--temperature", "0"],
                             stdin=subprocess.DEVNULL).stdout
            texts[act] = texts[act][texts[act].index(PROMPT) + len(PROMPT):] \
                if PROMPT in texts[act] else texts[act]
        n_prompt = len(tokenize(bin_dir, out, PROMPT))
        want = tokenize(bin_dir, out, PROMPT + ref)[n_prompt:][: args.n]
        agree = {}
        for act, text in texts.items():
            got = tokenize(bin_dir, out, PROMPT + text)[n_prompt:][: args.n]
            k = 0
            while k < min(len(got), len(want)) and got[k] == want[k]:
                k += 1
            agree[act] = k
        ok = agree["int8-plain"] >= min(args.min_tokens, len(want))
        failed |= not ok
        rows.append((ty, agree["int8-plain"], agree["int8"], agree["f32"], len(want), ok,
                     ref.strip(), texts["int8-plain"].strip()))
    print(f"{'type':<8}{'plain':>6}{'int8':>6}{'f32':>6}{'of':>5}  verdict (on int8-plain)")
    for ty, ap, a8, a32, n, ok, ref, got in rows:
        print(f"{ty:<8}{ap:>6}{a8:>6}{a32:>6}{n:>5}  {'ok' if ok else 'FAIL'}")
        print(f"   llama.cpp:      {ref!r}\n   rml int8-plain: {got!r}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
