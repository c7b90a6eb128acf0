#!/usr/bin/env python3
"""Operational flags of `tracelm serve` over loopback (ctest: Serve.Operations).

Usage: operations_test.py TRACELM_BINARY

- --max-queue: a burst of 24 requests against 2 sequence slots and a queue of 4 gets 503 with Retry-After for what
  does not fit, every accepted request completes in full, the server's RSS does not grow with the burst, and it
  answers normally afterwards.
- --served-model-name: requests may give any of the names, answers carry the first, /v1/models lists them all and
  the file's own name is no longer served.
- --request-timeout: a completion still generating past it ends with an error (streamed: an error chunk and [DONE];
  whole: 504) and its sequence is freed.
- /metrics, read with prometheus_client's parser: the gateway metrics' types and values under load.
- --access-log: one JSON line per API request whose id, status, token counts and finish reason are those of the
  answer the client got, with queue time <= time to first token <= duration; the prompt only with --log-prompts.
Bounded: every request has a timeout and the server is killed at the end. Exits 77 (skipped) without the model,
unless TRACELM_REQUIRE_MODELS is set.
"""
import json
import os
import sys
import tempfile
import threading
import time
import unittest

from server_process import MODEL_ID, Server, metric, run_tests

BINARY = None


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def completion(server, model, max_tokens, out, i):
    body = {"model": model, "prompt": f"Request {i}: the river ran", "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    out[i] = server.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"},
                            timeout=120)


class Operations(unittest.TestCase):
    def test_a_full_queue_answers_503_with_retry_after(self):
        server = Server(BINARY, ["--max-seqs", "2", "--max-queue", "4"])
        try:
            warm = [None]
            completion(server, MODEL_ID, 24, warm, 0)
            self.assertEqual(warm[0][0], 200)
            rss_before = rss_kib(server.proc.pid)
            out = [None] * 24
            threads = [threading.Thread(target=completion, args=(server, MODEL_ID, 24, out, i)) for i in range(24)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(180)
                self.assertFalse(t.is_alive())
            statuses = [status for status, _, _ in out]
            self.assertEqual(set(statuses) - {200, 503}, set(), statuses)
            busy = [(headers, json.loads(body)) for status, headers, body in out if status == 503]
            done = [json.loads(body) for status, _, body in out if status == 200]
            # The queue takes 4 whatever runs (the burst may arrive before any is admitted); later arrivals may find
            # room as requests are admitted and end.
            self.assertGreaterEqual(len(done), 4)
            self.assertGreater(len(busy), 0, "no request was refused: the queue bound did not act")
            for headers, doc in busy:
                self.assertEqual(headers.get("Retry-After"), "1")
                self.assertIn("requests wait already (at most 4)", doc["error"]["message"])
            for doc in done:
                self.assertEqual(doc["usage"]["completion_tokens"], 24)
            self.assertLess(rss_kib(server.proc.pid) - rss_before, 64 * 1024, "RSS grew with the burst")
            again = [None]
            completion(server, MODEL_ID, 4, again, 0)
            self.assertEqual(again[0][0], 200)
        finally:
            server.kill()

    def test_served_model_names(self):
        server = Server(BINARY, ["--served-model-name", "alpha", "beta"])
        try:
            status, _, body = server.request("GET", "/v1/models")
            self.assertEqual(status, 200)
            self.assertEqual([m["id"] for m in json.loads(body)["data"]], ["alpha", "beta"])
            for name in ["alpha", "beta"]:
                out = [None]
                completion(server, name, 3, out, 0)
                self.assertEqual(out[0][0], 200, out[0][2])
                self.assertEqual(json.loads(out[0][2])["model"], "alpha")
                self.assertEqual(server.request("GET", f"/v1/models/{name}")[0], 200)
            out = [None]
            completion(server, MODEL_ID, 3, out, 0)
            self.assertEqual(out[0][0], 404)
            self.assertEqual(json.loads(out[0][2])["error"]["code"], "model_not_found")
            self.assertIn('model_name="alpha"', server.metrics())
        finally:
            server.kill()


def log_lines(path, count, timeout_s=10):
    """The first `count` lines of the access log (each written once its answer is sent), parsed."""
    deadline = time.monotonic() + timeout_s
    while True:
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


class RequestTimeout(unittest.TestCase):
    def test_a_request_past_the_timeout_ends_with_an_error_and_frees_its_sequence(self):
        server = Server(BINARY, ["--request-timeout", "1.5"])
        try:
            long = {"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True}
            t0 = time.monotonic()
            status, _, raw = server.request("POST", "/v1/completions", json.dumps({**long, "stream": True}),
                                            {"Content-Type": "application/json"})
            took = time.monotonic() - t0
            self.assertEqual(status, 200)
            events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
            self.assertEqual(events[-1], "[DONE]")
            self.assertIn("--request-timeout of 1.5 s", json.loads(events[-2])["error"]["message"])
            self.assertGreater(len(events), 3, "no token came before the timeout")
            self.assertLess(took, 1.5 + 2)
            status, doc = server.post_json("/v1/completions", long)
            self.assertEqual(status, 504)
            self.assertIn("--request-timeout", doc["error"]["message"])
            status, doc = server.post_json("/v1/completions", {**long, "max_tokens": 4})
            self.assertEqual((status, doc["usage"]["completion_tokens"]), (200, 4))
            m = server.metrics_when_idle(10)
            self.assertEqual(metric(m, "tracelm:num_requests_running"), 0)
            self.assertEqual(metric(m, "tracelm:kv_blocks_used"), 0)
        finally:
            server.kill()


def families(server):
    """/metrics parsed by prometheus_client's parser: {name: family} (counters named without _total)."""
    from prometheus_client.parser import text_string_to_metric_families
    return {f.name: f for f in text_string_to_metric_families(server.metrics())}


def value(fams, name, sample=None):
    return next(s.value for s in fams[name].samples if s.name == (sample or name))


class GatewayMetrics(unittest.TestCase):
    """The metrics the Gateway API Inference Extension's model-server protocol reads (queue, running, KV-cache use as
    a fraction, block layout) and vLLM's queue-time, end-to-end and prefix-cache metrics, read with a real Prometheus
    parser off a server under load."""

    def setUp(self):
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            if os.environ.get("TRACELM_REQUIRE_MODELS"):
                raise
            self.skipTest("the Python package prometheus_client is not installed (scripts/run_tests.sh installs it)")

    def test_types_and_values_under_load(self):
        server = Server(BINARY, ["--max-seqs", "4"])
        try:
            fams = families(server)
            for name, kind in [("tracelm:num_requests_waiting", "gauge"), ("tracelm:num_requests_running", "gauge"),
                               ("tracelm:kv_cache_usage_perc", "gauge"), ("tracelm:cache_config_info", "gauge"),
                               ("tracelm:prefix_cache_queries", "counter"), ("tracelm:prefix_cache_hits", "counter"),
                               ("tracelm:request_queue_time_seconds", "histogram"),
                               ("tracelm:e2e_request_latency_seconds", "histogram")]:
                self.assertEqual(fams[name].type, kind, name)
            self.assertEqual(value(fams, "tracelm:kv_cache_usage_perc"), 0)
            info = fams["tracelm:cache_config_info"].samples[0].labels
            self.assertEqual(info["block_size"], "16")
            self.assertEqual(int(info["num_gpu_blocks"]), value(fams, "tracelm:kv_blocks_total"))

            # During a long generation: one running, KV in use.
            out = [None]
            t = threading.Thread(target=completion, args=(server, MODEL_ID, 400, out, 0))
            t.start()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                fams = families(server)
                if value(fams, "tracelm:num_requests_running") == 1:
                    break
                time.sleep(0.02)
            usage = value(fams, "tracelm:kv_cache_usage_perc")
            self.assertGreater(usage, 0)
            self.assertLessEqual(usage, 1)
            self.assertAlmostEqual(usage, value(fams, "tracelm:kv_blocks_used") / value(fams, "tracelm:kv_blocks_total"))
            t.join(120)
            self.assertEqual(out[0][0], 200)

            # Two requests sharing a 100-token prefix: the second finds its blocks.
            shared = " ".join(["the quiet river ran past the town"] * 14)
            for suffix in ("apples", "bees"):
                status, _ = server.post_json("/v1/completions", {"model": MODEL_ID, "prompt": shared + suffix,
                                                                 "max_tokens": 2})
                self.assertEqual(status, 200)
            # A step publishes the statistics once it ends, and an answer may be sent before that (a request can
            # finish within one step): wait for the three requests' end-to-end observations.
            e2e_count = ("tracelm:e2e_request_latency_seconds", "tracelm:e2e_request_latency_seconds_count")
            deadline = time.monotonic() + 10
            while value(fams := families(server), *e2e_count) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            hits = value(fams, "tracelm:prefix_cache_hits", "tracelm:prefix_cache_hits_total")
            queries = value(fams, "tracelm:prefix_cache_queries", "tracelm:prefix_cache_queries_total")
            self.assertGreaterEqual(hits, 96)
            self.assertGreaterEqual(queries, hits)
            for name in ("tracelm:request_queue_time_seconds", "tracelm:e2e_request_latency_seconds"):
                self.assertEqual(value(fams, name, name + "_count"), 3, name)
            self.assertGreater(value(fams, "tracelm:e2e_request_latency_seconds", "tracelm:e2e_request_latency_seconds_sum"),
                               value(fams, "tracelm:request_queue_time_seconds", "tracelm:request_queue_time_seconds_sum"))
            self.assertEqual(value(fams, "tracelm:kv_cache_usage_perc"), 0)
        finally:
            server.kill()


class AccessLog(unittest.TestCase):
    def run_requests(self, server):
        """A non-streamed completion, a streamed chat and a 400; returns what the client saw of each."""
        secret = "the secret word is heliotrope"
        status, doc = server.post_json("/v1/completions", {"model": MODEL_ID, "prompt": secret, "max_tokens": 5,
                                                           "temperature": 0, "ignore_eos": True})
        self.assertEqual(status, 200)
        body = {"model": MODEL_ID, "messages": [{"role": "user", "content": secret}], "max_tokens": 4,
                "stream": True, "stream_options": {"include_usage": True}}
        status, _, raw = server.request("POST", "/v1/chat/completions", json.dumps(body),
                                        {"Content-Type": "application/json"})
        self.assertEqual(status, 200)
        chunks = [json.loads(line[6:]) for line in raw.decode().splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        status, bad = server.post_json("/v1/completions", {"model": MODEL_ID, "prompt": secret, "max_tokens": -1})
        self.assertEqual(status, 400)
        return secret, doc, chunks

    def logged(self, args):
        """run_requests on a server with an access-log file and `args`: what the client saw, and the log's lines."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "access.log")
            server = Server(BINARY, ["--access-log", path] + args)
            try:
                seen = self.run_requests(server)
                lines = log_lines(path, 3)
            finally:
                server.kill()
        self.assertEqual(len(lines), 3, lines)
        return seen, lines

    def test_one_line_per_request_without_the_prompt(self):
        (_, doc, chunks), (whole, streamed, bad) = self.logged([])
        self.assertEqual((whole["path"], whole["status"], whole["id"]), ("/v1/completions", 200, doc["id"]))
        self.assertEqual((whole["prompt_tokens"], whole["completion_tokens"]),
                         (doc["usage"]["prompt_tokens"], doc["usage"]["completion_tokens"]))
        self.assertEqual(whole["finish_reason"], doc["choices"][0]["finish_reason"])
        usage = chunks[-1]["usage"]
        self.assertEqual((streamed["path"], streamed["status"], streamed["id"]),
                         ("/v1/chat/completions", 200, chunks[0]["id"]))
        self.assertEqual((streamed["prompt_tokens"], streamed["completion_tokens"]),
                         (usage["prompt_tokens"], usage["completion_tokens"]))
        self.assertEqual(streamed["finish_reason"], "length")
        for line in (whole, streamed):
            self.assertLessEqual(0, line["queue_s"])
            self.assertLessEqual(line["queue_s"], line["ttft_s"])
            self.assertLessEqual(line["ttft_s"], line["duration_s"])
        self.assertEqual((bad["path"], bad["status"]), ("/v1/completions", 400))
        self.assertNotIn("heliotrope", json.dumps([whole, streamed, bad]))

    def test_log_prompts_adds_the_request(self):
        (secret, _, _), lines = self.logged(["--log-prompts"])
        for line in lines:
            request = json.loads(line["request"])
            self.assertIn(secret, request.get("prompt") or request["messages"][0]["content"])


if __name__ == "__main__":
    sys.exit(run_tests(__doc__, globals()))
