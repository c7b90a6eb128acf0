#!/usr/bin/env python3
"""Graceful stop of `tracelm serve` over loopback (ctest: Serve.Lifecycle).

Usage: lifecycle_test.py TRACELM_BINARY

SIGTERM while 16 streams generate (the short ones half done): /health answers 503 at its next poll and new requests get
503 with Retry-After, short streams finish normally, long ones end with an error chunk and [DONE] once --drain-timeout
(3 s, three times that under the sanitizers) is over (none is cut without one), the process exits 0 and nothing
listens on its port any more. Also: a drain whose requests all finish
exits as soon as they do, and a second signal stops the server at once. Bounded: every request has a timeout and the
server is killed at the end. Exits 77 (skipped) without the model, unless TRACELM_REQUIRE_MODELS is set.
"""
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
import unittest

from server_process import MODEL_ID, Server, run_tests

BINARY = None
STREAMS = 16
POLL_S = 0.1  # how often a balancer's health check polls here
# Under the sanitizers (CI's ASan stage sets ASAN_OPTIONS) the server runs several times slower: the drain time scales.
SLOW = 3.0 if os.environ.get("ASAN_OPTIONS") else 1.0
SHORT, SHORT_READY = 12, 6  # a short stream's tokens, and how many it has before the SIGTERM


def stream(port, max_tokens, out, i, started, ready_at):
    """One streamed completion; out[i] = (events, ended_with_done). started[i] is set at its ready_at-th token."""
    events, done = [], False
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        body = {"model": MODEL_ID, "prompt": f"Story number {i}: once upon a time", "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True, "stream": True}
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            out[i] = ([("status", r.status)], False)
            return
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            events.append(json.loads(line[6:]))
            if len(events) >= ready_at:
                started[i].set()
        conn.close()
    except (OSError, http.client.HTTPException) as e:
        events.append(("exception", repr(e)))
    finally:
        started[i].set()
        out[i] = (events, done)


def outcome(events):
    """'length' for a stream that finished normally, 'error' for one ended by an error chunk, else what it was."""
    if events and isinstance(events[-1], dict) and "error" in events[-1]:
        return "error"
    finishes = [c["finish_reason"] for e in events if isinstance(e, dict) for c in e.get("choices", [])
                if c.get("finish_reason")]
    return finishes[-1] if finishes else repr(events[-1:] or "no events")


def start_streams(server, lengths, ready_at=None):
    """The streams, each running once it has its ready_at[i]-th token (default: its first)."""
    out, started = [None] * len(lengths), [threading.Event() for _ in lengths]
    ready_at = ready_at or [1] * len(lengths)
    threads = [threading.Thread(target=stream, args=(server.port, n, out, i, started, ready_at[i]))
               for i, n in enumerate(lengths)]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(120), "a stream got no token within 120 s"
    return threads, out


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


class Lifecycle(unittest.TestCase):
    def test_sigterm_drains_then_ends_what_is_left_with_an_error(self):
        drain = 3 * SLOW
        server = Server(BINARY, ["--max-seqs", str(STREAMS), "--drain-timeout", f"{drain:g}"])
        try:
            # Half the streams are short enough to finish within the drain time (the signal comes when they are half
            # done), half are far too long.
            lengths = [SHORT if i % 2 == 0 else 4000 for i in range(STREAMS)]
            threads, out = start_streams(server, lengths, [SHORT_READY if n == SHORT else 1 for n in lengths])
            t0 = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(POLL_S)
            status, _, body = server.request("GET", "/health", timeout=5)
            self.assertEqual(status, 503, body)
            self.assertIn("shutting down", json.loads(body)["error"]["message"])
            status, headers, body = server.request(
                "POST", "/v1/completions", json.dumps({"model": MODEL_ID, "prompt": "hi", "max_tokens": 2}),
                {"Content-Type": "application/json"}, timeout=5)
            self.assertEqual(status, 503, body)
            self.assertEqual(headers.get("Retry-After"), "1")
            for t in threads:
                t.join(60)
                self.assertFalse(t.is_alive(), "a stream neither finished nor failed")
            code = server.proc.wait(timeout=30)
            elapsed = time.monotonic() - t0
            self.assertEqual(code, 0)
            self.assertLess(elapsed, drain + 5 + 5, "the drain took far longer than its timeout")
            self.assertFalse(listening(server.port), "the port still accepts connections")
            for i, (events, done) in enumerate(out):
                self.assertTrue(done, f"stream {i} was cut without [DONE]: {events[-1:]}")
                self.assertEqual(outcome(events), "length" if lengths[i] == SHORT else "error", f"stream {i}")
            errors = [e[-1]["error"] for e, _ in out if outcome(e) == "error"]
            self.assertTrue(all("shutting down" in e["message"] for e in errors), errors[:1])
        finally:
            server.kill()

    def test_a_drain_whose_requests_finish_exits_at_once(self):
        server = Server(BINARY, ["--drain-timeout", "60"])
        try:
            threads, out = start_streams(server, [24] * 4)
            t0 = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            for t in threads:
                t.join(60)
            self.assertEqual(server.proc.wait(timeout=30), 0)
            self.assertLess(time.monotonic() - t0, 30, "waited for the drain timeout with nothing left to run")
            self.assertEqual([outcome(e) for e, _ in out], ["length"] * 4)
        finally:
            server.kill()

    def test_a_second_signal_stops_at_once(self):
        server = Server(BINARY, ["--drain-timeout", "600"])
        try:
            threads, _ = start_streams(server, [4000] * 4)
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(POLL_S)
            t0 = time.monotonic()
            server.proc.send_signal(signal.SIGINT)
            self.assertEqual(server.proc.wait(timeout=30), 0)
            self.assertLess(time.monotonic() - t0, 10)
            for t in threads:
                t.join(30)
                self.assertFalse(t.is_alive())
        finally:
            server.kill()


if __name__ == "__main__":
    sys.exit(run_tests(__doc__, globals()))
