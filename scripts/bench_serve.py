#!/usr/bin/env python3
"""Serving benchmark: closed-loop streamed completion requests against OpenAI-compatible servers, at several concurrencies.

Each server is started here on loopback (tracelm serve and, optionally, llama.cpp's llama-server on the same GGUF file
with the same slots and threads), and the levels run alternately on the servers so that drift of a shared machine
hits both. Every request has a fixed prompt length (distinct random words per request, the same texts for every
server) and a fixed output length (ignore_eos). Reported per level, as vLLM's `bench serve` does: completed and failed
requests, requests/s, output tok/s, TTFT, TPOT, ITL and end-to-end latency (mean, p50, p99). Prints a table and JSON.

Workload shapes (--shapes; prompt words are about 1.3 tokens each): chat (about 280 prompt tokens, 64 output),
decode (140 / 128: decode-heavy) and rag (1000 / 32: prompt-heavy); without --shapes, one shape of --prompt-words and
--output-tokens.

  scripts/bench_serve.py --model FILE --tracelm build/tracelm [--llama-server PATH] [--concurrency 1,2,4,8,16,32]
                         [--shapes chat,decode,rag] [--mixed-steps on,off] [--backend cuda]
"""
import argparse
import http.client
import json
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

# name: (prompt words, output tokens)
SHAPES = {"chat": (215, 64), "decode": (108, 128), "rag": (770, 32)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(name, cmd, port, timeout_s=300):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{name} exited with {proc.returncode}: {' '.join(cmd)}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    sys.exit(f"{name} did not become healthy in {timeout_s} s")


def counters(port):
    """tracelm's decode-step counters from /metrics (empty for a server without them)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    out = {}
    for line in conn.getresponse().read().decode().splitlines():
        for name in ("decode_steps_total", "decode_replays_total", "decode_mixed_steps_total", "host_row_writes_total",
                     "steady_decode_steps_total"):
            if line.startswith(f"tracelm:{name}{{"):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def prompts(n, words, seed):
    rng = random.Random(seed)
    vocab = "time person year way day thing man world life hand part child eye woman place work week case point " \
            "government company number group problem fact river mountain garden window letter music story".split()
    return [" ".join(rng.choice(vocab) for _ in range(words)) for _ in range(n)]


def one_request(port, prompt, max_tokens):
    # Plain completions: both servers tokenize the same text with the same tokenizer (no chat template or reasoning
    # parser of either side in the way).
    body = {"prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    stamps, usage = [], None
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        r.read()
        return None
    for raw in r:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk.get("choices", []):
            if c.get("text"):
                stamps.append(time.perf_counter())
    end = time.perf_counter()
    conn.close()
    if not stamps:
        return None
    out = usage["completion_tokens"] if usage else len(stamps)
    return {"ttft": stamps[0] - t0, "e2e": end - t0, "out": out,
            "itl": [b - a for a, b in zip(stamps, stamps[1:])],
            "tpot": (end - stamps[0]) / max(out - 1, 1)}


def level(port, texts, concurrency, max_tokens):
    """Closed loop: `concurrency` clients, each sending its next request when the last one ends."""
    queue, lock = list(texts), threading.Lock()
    results, failed = [], []

    def client():
        while True:
            with lock:
                if not queue:
                    return
                prompt = queue.pop(0)
            try:
                r = one_request(port, prompt, max_tokens)
            except OSError:
                r = None
            with lock:
                (results.append(r) if r else failed.append(prompt))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, len(failed), time.perf_counter() - t0


def stats(values):
    if not values:
        return {"mean": None, "p50": None, "p99": None}
    v = sorted(values)
    return {"mean": statistics.fmean(v) * 1e3, "p50": v[len(v) // 2] * 1e3, "p99": v[min(len(v) - 1, int(0.99 * len(v)))] * 1e3}


def summarize(server, shape, c, results, failed, wall):
    out_tokens = sum(r["out"] for r in results)
    return {"server": server, "shape": shape, "concurrency": c, "completed": len(results), "failed": failed,
            "req_per_s": len(results) / wall, "output_tok_per_s": out_tokens / wall,
            "ttft_ms": stats([r["ttft"] for r in results]), "tpot_ms": stats([r["tpot"] for r in results]),
            "itl_ms": stats([x for r in results for x in r["itl"]]), "e2e_ms": stats([r["e2e"] for r in results])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tracelm", required=True, help="the tracelm binary")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary, measured alternately")
    ap.add_argument("--concurrency", default="1,2,4,8,16,32")
    ap.add_argument("--requests", type=int, default=0, help="requests per level (default: 2 x concurrency, at least 8)")
    ap.add_argument("--prompt-words", type=int, default=200, help="words per prompt (about 1.3 tokens each)")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--shapes", default="", help=f"a comma list of {', '.join(SHAPES)} (instead of --prompt-words and "
                                                 "--output-tokens)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slots", type=int, default=0, help="sequences decoded together (default: the largest level)")
    ap.add_argument("--context", type=int, default=1024,
                    help="tokens per sequence (raised to what the longest shape needs)")
    ap.add_argument("--max-batched-tokens", type=int, default=512, help="tracelm serve's tokens per scheduler step")
    ap.add_argument("--numerics", default="fast",
                    help="tracelm's --numerics, a comma list (one tracelm server each, e.g. fast,ggml; fast is serve's "
                         "default on CPUs with AVX2)")
    ap.add_argument("--max-step-stretch", default="",
                    help="tracelm's --max-step-stretch, a comma list (one tracelm server per numerics and stretch; "
                         "default: serve's)")
    ap.add_argument("--prefill-steps", default="",
                    help="tracelm's --prefill-steps, a comma list (one tracelm server per numerics, stretch and "
                         "prefill steps; default: serve's)")
    ap.add_argument("--mixed-steps", default="on",
                    help="on, off or on,off: tracelm with mixed steps (serve's default), with --no-mixed-steps, or both "
                         "(one tracelm server each)")
    ap.add_argument("--backend", default="cpu", help="tracelm serve's --backend (cpu or cuda)")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    slots = a.slots or max(levels)
    shapes = ({name: SHAPES[name] for name in a.shapes.split(",")} if a.shapes
              else {"custom": (a.prompt_words, a.output_tokens)})
    # Room for the longest prompt (a word can take two tokens) and its output, in whole 256-token steps.
    a.context = max(a.context, max(-(-(2 * w + o) // 256) * 256 for w, o in shapes.values()))
    servers = {}
    variants = [(n, st, ps, m) for n in a.numerics.split(",") for st in a.max_step_stretch.split(",")
                for ps in a.prefill_steps.split(",") for m in a.mixed_steps.split(",")]
    for numerics, stretch, prefill_steps, mixed in variants:
        name = "tracelm" if numerics == "fast" else f"tracelm --numerics {numerics}"
        extra = ["--max-step-stretch", stretch] if stretch else []
        name += f" --max-step-stretch {stretch}" if stretch else ""
        extra += ["--prefill-steps", prefill_steps] if prefill_steps else []
        name += f" --prefill-steps {prefill_steps}" if prefill_steps else ""
        if mixed == "off":
            extra.append("--no-mixed-steps")
            name += " --no-mixed-steps"
        port = free_port()
        servers[name] = (port, start_server(name, [a.tracelm, "serve", "--model", a.model, "--port", str(port),
                                                   "--threads", str(a.threads), "--max-seqs", str(slots),
                                                   "--context", str(a.context), "--numerics", numerics,
                                                   "--max-batched-tokens", str(a.max_batched_tokens),
                                                   "--backend", a.backend] + extra,
                                            port))
    if a.llama_server:
        port = free_port()
        servers["llama-server"] = (port, start_server("llama-server", [
            a.llama_server, "-m", a.model, "-t", str(a.threads), "-np", str(slots), "-c", str(a.context * slots),
            "--host", "127.0.0.1", "--port", str(port)], port))
    rows = []
    try:
        for k, (shape, (words, out)) in enumerate(shapes.items()):
            for i, c in enumerate(levels):
                n = a.requests or max(8, 2 * c)
                # A repeated level or another shape gets new prompts: old ones would hit each server's prefix cache.
                texts = prompts(n, words, seed=c + 1000 * levels[:i].count(c) + 100000 * k)
                for name, (port, _) in servers.items():
                    before = counters(port)
                    results, failed, wall = level(port, texts, c, out)
                    rows.append(summarize(name, shape, c, results, failed, wall))
                    after = counters(port)
                    steps = after.get("decode_steps_total", 0) - before.get("decode_steps_total", 0)
                    if steps > 0:
                        delta = {key: after[key] - before.get(key, 0) for key in after}
                        rows[-1]["decode_steps"] = steps
                        rows[-1]["replayed_fraction"] = delta["decode_replays_total"] / steps
                        rows[-1]["mixed_fraction"] = delta.get("decode_mixed_steps_total", 0) / steps
                        rows[-1]["steady_fraction"] = delta["steady_decode_steps_total"] / steps
                        rows[-1]["host_row_writes_per_step"] = delta["host_row_writes_total"] / steps
                    print(f"# {name} {shape} c={c}: {rows[-1]['output_tok_per_s']:.1f} output tok/s", file=sys.stderr)
    finally:
        for _, proc in servers.values():
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def f(x):
        return "-" if x is None else f"{x:.1f}"
    print("| server | shape | concurrency | done/failed | req/s | output tok/s | TTFT p50 / p99 ms | TPOT p50 ms | "
          "ITL p50 / p99 ms | E2E p50 ms | steps replayed / mixed / with no host write | host row writes per step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        steps = (f"{100 * r['replayed_fraction']:.0f}% / {100 * r['mixed_fraction']:.0f}% / "
                 f"{100 * r['steady_fraction']:.0f}%" if "decode_steps" in r else "-")
        writes = f"{r['host_row_writes_per_step']:.2f}" if "decode_steps" in r else "-"
        print(f"| {r['server']} | {r['shape']} | {r['concurrency']} | {r['completed']}/{r['failed']} | {r['req_per_s']:.2f} | "
              f"{r['output_tok_per_s']:.1f} | {f(r['ttft_ms']['p50'])} / {f(r['ttft_ms']['p99'])} | "
              f"{f(r['tpot_ms']['p50'])} | {f(r['itl_ms']['p50'])} / {f(r['itl_ms']['p99'])} | {f(r['e2e_ms']['p50'])} | "
              f"{steps} | {writes} |")
    if "llama-server" in servers:
        print()
        print("| server | shape | concurrency | output tok/s ratio to llama-server | TTFT p50 ratio |")
        print("|---|---|---|---|---|")
        for r in rows:
            l = next(x for x in rows if x["server"] == "llama-server" and x["shape"] == r["shape"]
                     and x["concurrency"] == r["concurrency"])
            if r is not l and l["output_tok_per_s"] and r["ttft_ms"]["p50"] and l["ttft_ms"]["p50"]:
                print(f"| {r['server']} | {r['shape']} | {r['concurrency']} | "
                      f"{r['output_tok_per_s'] / l['output_tok_per_s']:.2f} | {r['ttft_ms']['p50'] / l['ttft_ms']['p50']:.2f} |")
    doc = {"model": a.model, "threads": a.threads, "slots": slots, "max_batched_tokens": a.max_batched_tokens,
           "context": a.context, "shapes": {k: {"prompt_words": w, "output_tokens": o} for k, (w, o) in shapes.items()},
           "results": rows}
    print(json.dumps(doc))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
