#!/usr/bin/env python3
"""Every sampling option reaches the sampler, through `tracelm generate` and through the server (ctest:
Serve.SamplingOptionsReachTheSampler).

Usage: sampling_options_test.py TRACELM_BINARY

On SmolLM2-135M-Instruct (ggml numerics), `generate` shows each option's defined effect (docs/sampling.md):
- temperature 1.5 with a seed differs from greedy; with top_k 1, top_p 1e-6 or min_p 1 it is greedy again;
- presence and frequency penalties: the reported logprobs (penalised logits at temperature 1) of every token seen
  among the 20 best move, against an unpenalised run with the same tokens so far, by the common normalisation shift
  minus count * frequency + (count > 0) * presence, counting the tokens generated before that step (a token generated
  twice tells the two penalties apart);
- repetition penalty: tokens of the prompt or output move below that common shift, the others by exactly it.
Then `serve` answers each set of options, sent as /v1/completions parameters, with generate's tokens and logprobs:
the two option mappings are separate code, and generate's is the one checked above. Exits 77 (skipped) without the
model, unless TRACELM_REQUIRE_MODELS is set.
"""
import json
import subprocess
import sys

from server_process import MODEL, SKIP, Server, model_or_skip

PROMPT = "1 1 1 1 1 1 1 1"  # SmolLM2 repeats it: the same tokens come back, so penalties bite
TOL = 1e-4
BINARY = None

# generate's flag and the completions parameter of each option.
OPTIONS = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p",
           "presence_penalty": "--presence-penalty", "frequency_penalty": "--frequency-penalty",
           "repetition_penalty": "--repeat-penalty", "seed": "--seed"}


def generate(opts, n, prompt=PROMPT):
    """(tokens, per step {id: logprob} of the 20 best, the chosen tokens' logprobs, text) from `tracelm generate`."""
    args = [BINARY, "generate", "--model", MODEL, "--numerics", "ggml", "--prompt", prompt, "--max-tokens", str(n),
            "--json", "--logprobs", "20"]
    for k, v in opts.items():
        args += [OPTIONS[k], str(v)]
    out = json.loads(subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout)
    tops = [{t["id"]: t["logprob"] for t in step["top_logprobs"]} for step in out["logprobs"]]
    return out["tokens"], tops, [step["logprob"] for step in out["logprobs"]], out["text"]


def prompt_ids():
    out = subprocess.run([BINARY, "tokenize", "--model", MODEL, "--text", PROMPT], capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


def shifts(base, pen, step):
    """Per token among the 20 best of both runs at `step`: its logprob's move from base to pen."""
    return {t: pen[step][t] - base[step][t] for t in base[step] if t in pen[step]}


def check_generate(failures):
    greedy, _, _, _ = generate({}, 24)
    hot = {"temperature": 1.5, "seed": 7}
    if generate(hot, 24)[0] == greedy:
        failures.append("generate: temperature 1.5 gave the greedy tokens")
    for extra in ({"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1}):
        got = generate({**hot, **extra}, 24)[0]
        if got != greedy:
            failures.append(f"generate: temperature 1.5 with {extra} is not greedy: {got} vs {greedy}")

    base_tokens, base, _, _ = generate({}, 5)
    f, p = 0.5, 0.25
    tokens, pen, _, _ = generate({"frequency_penalty": f, "presence_penalty": p}, 5)
    twice = False
    for step in range(5):
        if tokens[:step] != base_tokens[:step]:
            break  # another history: the logits differ for other reasons
        counts = {t: tokens[:step].count(t) for t in set(tokens[:step])}
        twice |= max(counts.values(), default=0) >= 2
        moved = shifts(base, pen, step)
        unseen = [d for t, d in moved.items() if t not in counts]
        common = unseen[0]
        for t, d in moved.items():
            c = counts.get(t, 0)
            want = common - (c * f + (p if c > 0 else 0.0))
            if abs(d - want) > TOL:
                failures.append(f"generate: step {step}, token {t} generated {c} times moved {d:.5f}, not {want:.5f}")
    if not twice:
        failures.append(f"generate: no token was generated twice before a step checked ({tokens} vs {base_tokens})")

    r = 1.3
    seen_prompt = set(prompt_ids())
    tokens, pen, _, _ = generate({"repetition_penalty": r}, 3)
    for step in range(3):
        if tokens[:step] != base_tokens[:step]:
            break
        seen = seen_prompt | set(tokens[:step])
        moved = shifts(base, pen, step)
        unseen = [d for t, d in moved.items() if t not in seen]
        if not unseen or any(abs(d - unseen[0]) > TOL for d in unseen):
            failures.append(f"generate: repetition penalty, step {step}: unseen tokens moved unevenly: {moved}")
            continue
        for t in seen & moved.keys():
            if not moved[t] < unseen[0] - 1e-3:
                failures.append(f"generate: repetition penalty, step {step}: seen token {t} moved {moved[t]:.5f}, "
                                f"not below {unseen[0]:.5f}")


def check_server(failures):
    server = Server(BINARY, ["--max-seqs", "4", "--context", "256", "--numerics", "ggml"])
    try:
        for opts in ({}, {"temperature": 1.5, "seed": 7}, {"temperature": 1.5, "seed": 7, "top_k": 1},
                     {"temperature": 1.5, "seed": 7, "top_p": 1e-6}, {"temperature": 1.5, "seed": 7, "min_p": 1},
                     {"temperature": 0.9, "seed": 11, "top_k": 20, "top_p": 0.8, "min_p": 0.02},
                     {"frequency_penalty": 0.5, "presence_penalty": 0.25}, {"frequency_penalty": 0.25,
                                                                          "presence_penalty": 0.5},
                     {"repetition_penalty": 1.3}, {"temperature": 1.2, "seed": 5, "repetition_penalty": 1.3}):
            _, _, logprobs, text = generate(opts, 12)
            status, doc = server.post_json("/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "logprobs": 0,
                                                               **opts})
            if status != 200:
                failures.append(f"serve {opts}: status {status}: {doc}")
                continue
            choice = doc["choices"][0]
            got = choice["logprobs"]["token_logprobs"]
            if choice["finish_reason"] == "stop":
                logprobs = logprobs[:len(got)]  # generate lists the end-of-generation token too; serve does not
            if choice["text"] != text or len(got) != len(logprobs) or any(
                    abs(a - b) > TOL for a, b in zip(got, logprobs)):
                failures.append(f"serve {opts}: {choice['text']!r} {got}, generate: {text!r} {logprobs}")
    finally:
        code = server.stop()
    if code != 0:
        failures.append(f"the server exited with {code} on SIGTERM")


def main():
    global BINARY
    BINARY = sys.argv[1]
    if model_or_skip() is None:
        return SKIP
    failures = []
    check_generate(failures)
    check_server(failures)
    for x in failures:
        print("FAIL:", x, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
