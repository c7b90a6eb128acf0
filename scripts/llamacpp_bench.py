#!/usr/bin/env python3
"""llama.cpp's side of `tracelm bench`: decodes a GGUF file greedily with llama-cpp-python and times prompt
evaluation and decoding separately. tracelm runs it as `PYTHON scripts/llamacpp_bench.py REQUEST.json`; the
request holds model, threads, prompt (token ids), gen_tokens and warm_steps. The last line of output is
`llamacpp-bench: {json}` with either the results or {"error": ...}.

Decoding follows tracelm's replayed run: the first token comes from the prompt's logits, the next warm_steps
steps are untimed, and the remaining steps are timed one token at a time (argmax on the host, lowest id on ties).
Only the last position's logits are computed (no logits_all), as in tracelm.
"""
import json
import sys
import time


def run(req):
    import llama_cpp  # imported here, so that a missing module becomes an "error" result
    import numpy as np

    prompt, gen, warm = req["prompt"], req["gen_tokens"], req["warm_steps"]
    llm = llama_cpp.Llama(model_path=req["model"], n_ctx=len(prompt) + gen + 1, n_threads=req["threads"],
                          n_threads_batch=req["threads"], verbose=False)
    n_vocab = llm.n_vocab()

    def next_token():
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
        return int(np.argmax(logits))

    t0 = time.perf_counter()
    llm.eval(prompt)
    tokens = [next_token()]
    prefill_s = time.perf_counter() - t0
    for _ in range(warm):
        llm.eval([tokens[-1]])
        tokens.append(next_token())
    timed = gen - 1 - warm
    t0 = time.perf_counter()
    for _ in range(timed):
        llm.eval([tokens[-1]])
        tokens.append(next_token())
    decode_s = time.perf_counter() - t0
    return {
        "version": llama_cpp.__version__,
        "prefill_tokens_per_s": len(prompt) / prefill_s,
        "decode_tokens_per_s": timed / decode_s,
        "tokens": tokens,
    }


def main():
    try:
        with open(sys.argv[1]) as f:
            result = run(json.load(f))
    except Exception as e:  # reported to tracelm, which prints it and goes on
        result = {"error": f"{type(e).__name__}: {e}"}
    print("llamacpp-bench: " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
