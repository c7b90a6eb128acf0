#!/usr/bin/env python3
"""Three `tracelm serve` replicas behind HAProxy, started by scripts/replicas.sh (ctest: Serve.Replicas).

Usage: replicas_test.py TRACELM_BINARY

- Failover: 32 concurrent clients send streamed chats with one of 4 shared system prompts (retrying a failed attempt
  up to 3 times); one replica is killed with SIGKILL mid-load and restarted by the script. Every request ends
  answered, every failed attempt was on the killed replica (or is HAProxy's own error while it was going away), none
  hangs, HAProxy takes it out of rotation within its health checks (after which no attempt fails), and the restarted
  replica serves again.
- Prefix routing: the same traffic on fresh replicas, routed by a hash of the first message's first bytes and then
  round-robin: with prefix routing every prompt's requests reach one replica, and the prefix-cache hits summed over
  the replicas' /metrics are at least 1.8x those of round-robin (each replica's KV pool holds about two of the system
  prompts, so round-robin keeps evicting them).
Bounded: every attempt has a timeout, loopback only, the script and its replicas are stopped at the end. Exits 77
(skipped) without the model or without haproxy, unless TRACELM_REQUIRE_MODELS is set.
"""
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

from server_process import MODEL_ID, SKIP, die_with_parent, metric, run_tests

BINARY = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPLICAS = 3
CLIENTS = 32
PROMPTS = 4
# Small replicas: one thread each (three share two cores), two sequences at a time, a KV pool of 34 blocks of 16 tokens
# (two of the ~15-block system prompts and the running tails: round-robin, which brings all four, keeps evicting).
SERVE_FLAGS = ["--threads", "1", "--max-seqs", "2", "--kv-blocks", "34", "--context", "512", "--access-log", "off"]
TOPICS = ["rivers and the towns along them", "bees, hives and the seasons of honey", "old ships and the people who "
          "sailed them", "mountain weather and how to read the sky"]


def system_prompt(k):
    """About 240 tokens, distinct from its first word (HAProxy hashes the first bytes of the first message); HAProxy's
    hash sends these four to three different replicas (a test below checks)."""
    words = f"{TOPICS[k].capitalize()}: you are guide number {k}, who knows everything about them.".split()
    rng = random.Random(k)
    filler = "answer briefly and kindly with facts that a curious reader would like to know about it".split()
    return " ".join(words + [rng.choice(filler) for _ in range(200)])


def free_ports(count):
    """A base port with `count` consecutive free ports on loopback."""
    for _ in range(100):
        base = random.randint(20000, 60000 - count)
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


class Cluster:
    def __init__(self, routing):
        base = free_ports(REPLICAS + 1)
        self.port, self.first = base, base + 1
        self.pids, self.lines, self.events = {}, [], []
        self.proc = subprocess.Popen(
            ["bash", os.path.join(REPO, "scripts", "replicas.sh"), "--replicas", str(REPLICAS), "--port",
             str(self.port), "--first-port", str(self.first), "--routing", routing, "--tracelm", os.path.abspath(BINARY), "--"]
            + SERVE_FLAGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent,
            start_new_session=True)
        threading.Thread(target=self.read, daemon=True).start()
        threading.Thread(target=self.read_events, daemon=True).start()
        for i in range(REPLICAS):
            self.wait_healthy(i, 120)
        time.sleep(1.5)  # HAProxy's checks (500 ms, two to rise) see every replica up

    def read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.fullmatch(r"replica (\d+) pid (\d+) port \d+\n", line)
            if m:
                self.pids[int(m.group(1))] = int(m.group(2))

    def read_events(self):
        """HAProxy's (and the replicas') stderr, with when each line came: HAProxy says when it takes a server out."""
        for line in self.proc.stderr:
            self.events.append((time.monotonic(), line))

    def marked_down(self, name, after):
        """When HAProxy first said, after `after`, that it took replica `name` out of rotation (None if it has not)."""
        return next((t for t, line in self.events if t > after and f"Server replicas/{name} is DOWN" in line), None)

    def health(self, i):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.first + i, timeout=2)
            conn.request("GET", "/health")
            status = conn.getresponse().status
            conn.close()
            return status
        except OSError:
            return None

    def wait_healthy(self, i, timeout_s):
        deadline = time.monotonic() + timeout_s
        while self.health(i) != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {i} not healthy within {timeout_s} s; script said {self.lines}")
            time.sleep(0.1)

    def prefix_hits(self):
        total = 0
        for i in range(REPLICAS):
            conn = http.client.HTTPConnection("127.0.0.1", self.first + i, timeout=10)
            conn.request("GET", "/metrics")
            total += metric(conn.getresponse().read().decode(), "tracelm:prefix_cache_hits_total")
            conn.close()
        return total

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


def attempt(port, body):
    """One streamed chat through HAProxy: (ok, replica or None, what happened)."""
    replica = None
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        replica = r.getheader("X-Served-By")
        if r.status != 200:
            return False, replica, f"status {r.status}"
        done, finish = False, None
        for raw in r:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                done = True
                break
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if "error" in event:
                    return False, replica, "error chunk"
                finish = event["choices"][0].get("finish_reason") or finish
        conn.close()
        return done and finish is not None, replica, "answered" if done else "cut"
    except socket.timeout:
        return False, replica, "timeout"
    except (OSError, http.client.HTTPException, ValueError) as e:
        return False, replica, repr(e)


def traffic(cluster, per_client, on_progress=None):
    """CLIENTS clients, per_client requests each (with retries); returns every attempt per request."""
    results = {}
    lock = threading.Lock()

    def client(c):
        for j in range(per_client):
            body = {"model": MODEL_ID, "max_tokens": 4, "temperature": 0, "stream": True,
                    "messages": [{"role": "system", "content": system_prompt((c + j) % PROMPTS)},
                                 {"role": "user", "content": f"Client {c}, question {j}: one fact, please."}]}
            tries = []
            for _ in range(4):
                started = time.monotonic()
                tries.append(attempt(cluster.port, body) + (started,))
                if tries[-1][0]:
                    break
                time.sleep(0.5)
            with lock:
                results[(c, j)] = tries
                if on_progress:
                    on_progress(results)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
        if t.is_alive():
            raise AssertionError("a client hung")
    return results


class Replicas(unittest.TestCase):
    def test_a_killed_replica_fails_only_its_own_requests_and_comes_back(self):
        cluster = Cluster("prefix")
        try:
            killed = {}

            def kill_when_loaded(results):
                if killed or len(results) < CLIENTS * 3 // 4:
                    return
                served = [r for tries in results.values() for ok, r, _, _ in tries if ok and r]
                victim = max(set(served), key=served.count)
                i = int(victim[1:])
                killed.update(name=victim, index=i, pid=cluster.pids[i], at=time.monotonic())
                os.kill(cluster.pids[i], signal.SIGKILL)

            results = traffic(cluster, 3, kill_when_loaded)
            self.assertTrue(killed, "the replica was never killed")
            self.assertEqual(len(results), CLIENTS * 3)
            unanswered = [k for k, tries in results.items() if not tries[-1][0]]
            self.assertEqual(unanswered, [], {k: results[k] for k in unanswered[:3]})
            failed = [(r, what, started) for tries in results.values() for ok, r, what, started in tries if not ok]
            self.assertFalse([f for f in failed if f[1] == "timeout"], "an attempt hung until its timeout")
            others = [f for f in failed if f[0] not in (None, killed["name"])]
            self.assertEqual(others, [], "requests on the other replicas failed")
            # HAProxy takes it out within its health checks (two failures 500 ms apart; slack for a loaded machine),
            # and no attempt that started after that failed.
            down = cluster.marked_down(killed["name"], killed["at"])
            self.assertIsNotNone(down, "HAProxy never took the killed replica out")
            self.assertLess(down - killed["at"], 2.5)
            self.assertEqual([f for f in failed if f[2] > down], [], "attempts failed after it was taken out")
            cluster.wait_healthy(killed["index"], 120)
            self.assertNotEqual(cluster.pids[killed["index"]], killed["pid"], "the script did not restart it")
            time.sleep(1.5)
            # The restarted replica is routed to again: some prompt of the four hashes to it.
            served = {attempt(cluster.port, {"model": MODEL_ID, "max_tokens": 1, "messages": [
                {"role": "system", "content": system_prompt(k)}, {"role": "user", "content": "hi"}]})[1]
                for k in range(PROMPTS)}
            self.assertIn(killed["name"], served)
        finally:
            cluster.stop()

    def test_prefix_routing_hits_the_prefix_cache_more_than_round_robin(self):
        hits = {}
        for routing in ("prefix", "roundrobin"):
            cluster = Cluster(routing)
            try:
                results = traffic(cluster, 2)
                self.assertTrue(all(tries[-1][0] for tries in results.values()), routing)
                hits[routing] = cluster.prefix_hits()
                if routing == "prefix":
                    # (client c, request j) sent system prompt (c + j) % PROMPTS.
                    where = {k: {tries[-1][1] for (c, j), tries in results.items() if (c + j) % PROMPTS == k}
                             for k in range(PROMPTS)}
                    self.assertTrue(all(len(r) == 1 for r in where.values()), where)
                    self.assertEqual(len(set.union(*where.values())), REPLICAS, where)
            finally:
                cluster.stop()
        print(f"prefix-cache hits summed over {REPLICAS} replicas: {hits}", file=sys.stderr)
        self.assertGreaterEqual(hits["prefix"], 1.8 * hits["roundrobin"], hits)


def main():
    if shutil.which("haproxy") is None:
        print("skipped: haproxy is not installed (scripts/install_deps.sh installs it)", file=sys.stderr)
        return 1 if os.environ.get("TRACELM_REQUIRE_MODELS") else SKIP
    return run_tests(__doc__, globals())


if __name__ == "__main__":
    sys.exit(main())
