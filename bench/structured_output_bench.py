#!/usr/bin/env python3
"""Constrained decoding against the same unconstrained requests, at N concurrent streams (docs/performance.md).

Usage: structured_output_bench.py TRACELM_BINARY [--model GGUF] [--streams 16] [--tokens 128] [--rounds 3] [--json]

Starts `tracelm serve` and runs rounds of N streamed chat requests at once, alternately unconstrained and constrained
by a JSON schema (an array of 80 integers: the answer is longer than --tokens, so both kinds generate exactly --tokens
tokens; ignore_eos keeps the unconstrained ones going too). The schema is compiled by a warm-up request first, as a
server's cache holds it. Per round: output tokens per second over the round's wall time, and the median time to
first token. Prints a table (or JSON with --json) and the medians over the pairs of adjacent rounds of the ratios
constrained / unconstrained.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
import server_process  # noqa: E402

SCHEMA = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 80, "maxItems": 80}


def stream_one(port, doc, out, i):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps(doc), {"Content-Type": "application/json"})
    r = conn.getresponse()
    ttft, tokens = None, 0
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            line = event.decode()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            body = json.loads(line[6:])
            if body.get("usage"):
                tokens = body["usage"]["completion_tokens"]
            if ttft is None and body.get("choices") and body["choices"][0]["delta"].get("content"):
                ttft = time.monotonic() - t0
    conn.close()
    out[i] = (ttft, tokens)


def round_of(port, streams, tokens, constrained):
    docs = []
    for i in range(streams):
        doc = {"messages": [{"role": "user", "content": f"List some numbers, request {i}."}], "max_tokens": tokens,
               "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        if constrained:
            doc["response_format"] = {"type": "json_schema", "json_schema": {"name": "numbers", "schema": SCHEMA}}
        docs.append(doc)
    out = [None] * streams
    threads = [threading.Thread(target=stream_one, args=(port, d, out, i)) for i, d in enumerate(docs)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    total = sum(o[1] for o in out)
    return {"tok_per_s": total / wall, "ttft_median_s": statistics.median(o[0] for o in out), "tokens": total,
            "wall_s": wall}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--model", default=server_process.MODEL)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    server_process.MODEL = a.model
    srv = server_process.Server(a.binary, ["--max-seqs", str(a.streams), "--context", "1024"])
    try:
        round_of(srv.port, 2, 8, True)  # compiles the schema once (the cache holds it) and warms up
        rows = {"unconstrained": [], "constrained": []}
        # Pairs of adjacent rounds in alternating order (unconstrained first, then constrained first), so that a
        # shared machine's load, which drifts over minutes, weighs on both kinds of a pair alike.
        for r in range(a.rounds):
            for kind in ("unconstrained", "constrained") if r % 2 == 0 else ("constrained", "unconstrained"):
                rows[kind].append(round_of(srv.port, a.streams, a.tokens, kind == "constrained"))
    finally:
        srv.kill()
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("tok_per_s", "ttft_median_s")} for k, v in rows.items()}
    pairs = list(zip(rows["unconstrained"], rows["constrained"]))
    result = {"streams": a.streams, "tokens": a.tokens, "rounds": rows, "median": med,
              "tok_per_s_ratio": statistics.median(c["tok_per_s"] / u["tok_per_s"] for u, c in pairs),
              "ttft_ratio": statistics.median(c["ttft_median_s"] / u["ttft_median_s"] for u, c in pairs)}
    if a.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{'kind':<14} {'round':>5} {'tok/s':>9} {'TTFT median s':>14}")
    for kind, rs in rows.items():
        for i, r in enumerate(rs):
            print(f"{kind:<14} {i:>5} {r['tok_per_s']:>9.1f} {r['ttft_median_s']:>14.3f}")
    print(f"constrained / unconstrained, median over pairs: tok/s {result['tok_per_s_ratio']:.3f}, "
          f"TTFT {result['ttft_ratio']:.3f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
