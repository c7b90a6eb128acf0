#!/usr/bin/env python3
"""The shipped server's greedy answers against an independent reference (ctest: Serve.ReferenceAnswers).

Usage: reference_answers_test.py TRACELM_BINARY

The 9 prompts of testdata/goldens/smollm2_greedy.json (llama.cpp's greedy continuations of SmolLM2-135M-Instruct
Q4_1, 32 tokens each, made by scripts/make_llamacpp_goldens.py) go to /v1/completions all at once, as token ids,
greedy, 32 tokens, EOS ignored, so that they are decoded as one batch through the scheduler and the HTTP mapping:
- with `--numerics ggml`, every answer's text is llama.cpp's;
- with `--numerics fast`, what serve ships where the CPU has AVX2 (repacked weights, another float order;
  Cli.ServeDefaultsToTheFastNumerics checks the default), each answer follows llama.cpp's tokens up to its first
  near-tie, a step where llama.cpp's top-2 logit margin is below 0.1 (there the other float order may pick the other
  token), and most answers are whole.
Exits 77 (skipped) without the model, unless TRACELM_REQUIRE_MODELS is set.
"""
import json
import os
import re
import sys
import threading

from server_process import SKIP, Server, model_or_skip

NEAR_TIE = 0.1
SPECIAL = re.compile(r"<\|im_(start|end)\|>")  # SmolLM2's special tokens
GOLDENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata", "goldens",
                       "smollm2_greedy.json")


def answers(server, records):
    """Each record's answer, all requests in flight together."""
    out = [None] * len(records)

    def ask(i):
        status, doc = server.post_json("/v1/completions", {
            "prompt": records[i]["prompt_ids"], "max_tokens": 32, "temperature": 0, "ignore_eos": True,
            "logprobs": 0})
        out[i] = (status, doc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(records))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return out


def check(records, got, fast):
    failures, whole = [], 0
    for rec, (status, doc) in zip(records, got):
        if status != 200:
            failures.append(f"{rec['prompt']!r}: status {status}: {doc}")
            continue
        choice = doc["choices"][0]
        pieces = choice["logprobs"]["tokens"]
        if doc["usage"]["completion_tokens"] != 32 or len(pieces) != 32 or choice["finish_reason"] != "length":
            failures.append(f"{rec['prompt']!r}: {doc['usage']} {len(pieces)} tokens, {choice['finish_reason']}")
            continue
        # The logprobs' tokens spell every token, special ones included (llama.cpp's golden text does too); the text
        # leaves the special ones out, as servers return it.
        spelled = "".join(pieces)
        if SPECIAL.sub("", spelled) != choice["text"]:
            failures.append(f"{rec['prompt']!r}: the text {choice['text']!r} is not its tokens' {spelled!r}")
        if spelled == rec["text"]:
            whole += 1
            continue
        if not fast:
            failures.append(f"{rec['prompt']!r}: {spelled!r}, llama.cpp: {rec['text']!r}")
            continue
        # The first step where the answer leaves llama.cpp's text must be at a near-tie of llama.cpp's.
        step = 0
        while step < 32 and rec["text"].startswith("".join(pieces[:step + 1])):
            step += 1
        if step == 32 or rec["top2_margin"][step] >= NEAR_TIE:
            failures.append(f"{rec['prompt']!r}: parted from llama.cpp at step {step}, where llama.cpp's top-2 margin "
                            f"is {rec['top2_margin'][step]}: {choice['text']!r}, llama.cpp: {rec['text']!r}")
    if fast and whole < len(records) // 2:
        failures.append(f"only {whole} of {len(records)} answers whole")
    return failures, whole


def main():
    binary = sys.argv[1]
    if model_or_skip() is None:
        return SKIP
    with open(GOLDENS) as f:
        records = json.load(f)["records"]
    assert len(records) >= 8
    failures = []
    for numerics in ("ggml", "fast"):
        server = Server(binary, ["--max-seqs", "16", "--context", "256", "--numerics", numerics])
        try:
            got = answers(server, records)
        finally:
            code = server.stop()
        found, whole = check(records, got, numerics == "fast")
        print(f"numerics {numerics}: {whole} of {len(records)} answers equal llama.cpp's, {len(found)} failures",
              file=sys.stderr)
        failures += [f"numerics {numerics}: {x}" for x in found]
        if code != 0:
            failures.append(f"numerics {numerics}: the server exited with {code} on SIGTERM")
    for x in failures:
        print("FAIL:", x, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
