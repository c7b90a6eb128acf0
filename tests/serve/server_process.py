"""A `tracelm serve` process on loopback for the serve tests: started on a free port, ready once /health says 200,
killed with the test process (parent-death signal) and at exit."""
import atexit
import ctypes
import http.client
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import unittest

SKIP = 77
MODEL = os.path.join(os.environ.get("TRACELM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tracelm"),
                     "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


def model_or_skip():
    """The default model's path; None (skip) when it is absent and TRACELM_REQUIRE_MODELS is not set."""
    if os.path.exists(MODEL):
        return MODEL
    print(f"skipped: {MODEL} is not in the model cache", file=sys.stderr)
    if os.environ.get("TRACELM_REQUIRE_MODELS"):
        sys.exit(1)
    return None


def die_with_parent():
    """In the child: SIGKILL when the test process dies (e.g. killed by ctest's timeout)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def metric(body, name):
    """The value of metric `name` (one sample, any labels) in a Prometheus text body."""
    m = re.search(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)$", body, re.M)
    if m is None:
        raise AssertionError(f"no {name} in /metrics")
    return float(m.group(1))


class Server:
    def __init__(self, binary, args, model=MODEL):
        # With --api-key, metrics() sends the key (every route but /health needs it).
        self.api_key = args[args.index("--api-key") + 1] if "--api-key" in args else None
        threads = os.environ.get("TRACELM_THREADS", "2")
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--threads", threads] + args,
                                     stdout=subprocess.PIPE, stderr=sys.stderr, text=True, preexec_fn=die_with_parent)
        atexit.register(self.kill)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", line)
        if not m:
            self.kill()
            raise RuntimeError(f"no 'listening on' line from tracelm serve, got {line!r}")
        self.port = int(m.group(1))
        self.health_codes = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status, _, _ = self.request("GET", "/health")
            self.health_codes.append(status)
            if status == 200:
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError("the server did not become ready within 120 s")

    def request(self, method, path, body=None, headers=None, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def post_json(self, path, doc, timeout=120):
        status, _, body = self.request("POST", path, json.dumps(doc), {"Content-Type": "application/json",
                                                                      **self.auth()}, timeout)
        return status, json.loads(body)

    def auth(self):
        """The Authorization header of the server's --api-key (none without one)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def metrics(self):
        return self.request("GET", "/metrics", headers=self.auth())[2].decode()

    def metrics_when_idle(self, timeout_s=30):
        """/metrics once nothing runs or waits (or after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        while True:
            body = self.metrics()
            idle = metric(body, "tracelm:num_requests_running") == 0 and metric(body, "tracelm:num_requests_waiting") == 0
            if idle or time.monotonic() > deadline:
                return body
            time.sleep(0.1)

    def stop(self):
        """SIGTERM, then the exit status (killed after 30 s)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def run_openai_tests(doc, module_globals):
    """run_tests for a module driven by the `openai` client: also 77 (skipped) without the package unless
    TRACELM_REQUIRE_MODELS is set."""
    return run_tests(doc, module_globals, needs_openai=True)


def run_tests(doc, module_globals, needs_openai=False):
    """main() of a unittest module against a server of the default model: sets the module's BINARY from argv (usage
    and 2 without it) and runs its tests; 77 (skipped) without the model unless TRACELM_REQUIRE_MODELS is set."""
    if len(sys.argv) != 2:
        print(doc, file=sys.stderr)
        return 2
    required = bool(os.environ.get("TRACELM_REQUIRE_MODELS"))
    if model_or_skip() is None:
        return SKIP
    if needs_openai:
        try:
            import openai  # noqa: F401
        except ImportError:
            print("skipped: the Python package 'openai' is not installed (scripts/run_tests.sh installs it)",
                  file=sys.stderr)
            return 1 if required else SKIP
    module_globals["BINARY"] = sys.argv[1]
    result = unittest.main(module="__main__", argv=[sys.argv[0], "-v"], exit=False).result
    return 0 if result.wasSuccessful() else 1
