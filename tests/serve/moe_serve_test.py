#!/usr/bin/env python3
"""`tracelm serve` on a mixture-of-experts model (random Qwen3-MoE GGUFs that the test writes with `tracelm
make-checkpoint`: moe-tiny with Q8_0 experts in both numerics, and moe-small with Q4_K experts in the ggml numerics,
whose prompt forwards the server never cuts; and a random DeepSeek-V3.2 folder, deepseek-tiny, whose lightning
indexer keeps 8 positions per query of these longer prompts): 16 concurrent streamed completions, greedy and seeded, of different
prompt lengths, decoded together in the server's captured buckets, each equal to the same request sent alone
afterwards (text, finish reason, token count). Bounded: every request has a timeout, the server is stopped at the
end.

  moe_serve_test.py TRACELM_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile
import threading

from server_process import Server, metric

REQUESTS = 16
MAX_TOKENS = 24


def body(i, stream):
    words = " ".join(["expert", "router", "token", "layer", "sum"][(i + j) % 5] for j in range(3 + 7 * i))
    b = {"model": "moe", "prompt": f"Request {i}: {words}", "max_tokens": MAX_TOKENS, "stream": stream,
         "ignore_eos": True}
    if i % 2:
        b.update({"temperature": 0.9, "seed": 100 + i})
    else:
        b["temperature"] = 0
    return b


def streamed(server, i, out):
    status, _, raw = server.request("POST", "/v1/completions", json.dumps(body(i, True)), timeout=300)
    text, finish = "", None
    if status == 200:
        for line in raw.decode().splitlines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                text += choice["text"]
                finish = choice.get("finish_reason") or finish
    out[i] = (status, text, finish)


def main():
    binary = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        # The least number of distinct answers among the 16 (answers that differ show no request got another's):
        # moe-small's random weights give sharply peaked logits, so its answers repeat more.
        for geometry, fmt, dtype, numerics, least in (("moe-tiny", "gguf", "q8_0", "ggml", REQUESTS // 2),
                                                      ("moe-tiny", "gguf", "q8_0", "fast", REQUESTS // 2),
                                                      ("moe-small", "gguf", "q4_k", "ggml", 4),
                                                      ("deepseek-tiny", "safetensors", "f32", "ggml", REQUESTS // 2)):
            # Served as "moe".
            model = os.path.join(tmp, f"{geometry}-{dtype}", "moe.gguf" if fmt == "gguf" else "moe")
            if not os.path.exists(model):
                os.makedirs(os.path.dirname(model), exist_ok=True)
                subprocess.run([binary, "make-checkpoint", "--geometry", geometry, "--seed", "7", "--format", fmt,
                                "--dtype", dtype, "--out", model], check=True, stdout=subprocess.DEVNULL)
            what = f"{geometry} {dtype} {numerics}"
            server = Server(binary, ["--max-seqs", str(REQUESTS), "--numerics", numerics], model=model)
            try:
                together = [None] * REQUESTS
                threads = [threading.Thread(target=streamed, args=(server, i, together)) for i in range(REQUESTS)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=300)
                # Decoded together, from captured graphs: on average at least 4 sequences per decode step.
                m = server.metrics_when_idle()
                steps, tokens = metric(m, "tracelm:decode_steps_total"), metric(m, "tracelm:generation_tokens_total")
                if not (steps > 0 and tokens >= 4 * steps and metric(m, "tracelm:decode_replays_total") > 0):
                    failures.append(f"{what}: {tokens:g} tokens in {steps:g} decode steps, "
                                    f"{metric(m, 'tracelm:decode_replays_total'):g} replayed")
                for i in range(REQUESTS):
                    status, doc = server.post_json("/v1/completions", body(i, False), timeout=300)
                    if together[i] is None or together[i][0] != 200 or status != 200:
                        failures.append(f"{what} request {i}: status {together[i] and together[i][0]} together, "
                                        f"{status} alone")
                        continue
                    alone = doc["choices"][0]
                    if doc["usage"]["completion_tokens"] != MAX_TOKENS:
                        failures.append(f"{what} request {i}: {doc['usage']['completion_tokens']} tokens alone")
                    if together[i][1:] != (alone["text"], alone["finish_reason"]):
                        failures.append(f"{what} request {i}: together {together[i][1:]!r}, alone "
                                        f"{(alone['text'], alone['finish_reason'])!r}")
                distinct = {together[i][1] for i in range(REQUESTS) if together[i]}
                if len(distinct) < least:
                    failures.append(f"{what}: only {len(distinct)} distinct answers of {REQUESTS}")
            finally:
                server.stop()
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"{'FAILED' if failures else 'passed'}: {REQUESTS} concurrent MoE completions, each as alone, four models")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
