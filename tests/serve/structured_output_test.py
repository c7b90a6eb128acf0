#!/usr/bin/env python3
"""Structured output and logit_bias against a real `tracelm serve` (ctest: Serve.StructuredOutput).

Usage: structured_output_test.py TRACELM_BINARY [--record FILE]

Starts `tracelm serve --port 0` on the default model (SmolLM2-135M-Instruct Q4_1) and sends every schema of
testdata/structured_output/schemas.json as response_format json_schema, 16 requests at a time, at temperature 0 and
sampled (temperature 0.8, a seed per schema): every answer must finish with "stop" and validate against its schema
under Python's `jsonschema` (an implementation independent of tracelm and xgrammar). Also json_object answers parse
as JSON objects; the extension fields (guided_regex, guided_grammar, guided_json, llama-server's json_schema); a
logit_bias of +100 forces a token and -100 bans one; streamed constrained text equals the non-streamed text; and
every invalid value is a 400 naming its parameter. --record writes the answers to FILE (the corpus's answers in
testdata were written so). Exits 77 (skipped) without the model or `jsonschema`, unless TRACELM_REQUIRE_MODELS is set.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import time
import unittest

from server_process import MODEL, SKIP, Server, model_or_skip

BINARY = None
RECORD = None
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata", "structured_output",
                      "schemas.json")
SYSTEM = "You are a helpful assistant. Answer in JSON."


def token_id(text):
    out = subprocess.run([BINARY, "tokenize", "--model", MODEL, "--text", text], capture_output=True, text=True,
                         timeout=60, check=True)
    ids = json.loads(out.stdout)
    ids = ids["ids"] if isinstance(ids, dict) else ids
    assert len(ids) == 1, f"{text!r} is {len(ids)} tokens"
    return ids[0]


class StructuredOutputTest(unittest.TestCase):
    server = None
    answers = {}

    @classmethod
    def setUpClass(cls):
        cls.server = Server(BINARY, ["--max-seqs", "16", "--context", "1024"])
        with open(CORPUS) as f:
            cls.corpus = json.load(f)["schemas"]

    @classmethod
    def tearDownClass(cls):
        if cls.server:
            cls.server.kill()
        if RECORD:
            with open(RECORD, "w") as f:
                json.dump(cls.answers, f, indent=1, sort_keys=True)

    def chat(self, content, **extra):
        doc = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}],
               "max_tokens": 300, "temperature": 0}
        doc.update(extra)
        return self.server.post_json("/v1/chat/completions", doc)

    def answer(self, content, **extra):
        status, body = self.chat(content, **extra)
        self.assertEqual(status, 200, body)
        choice = body["choices"][0]
        return choice["message"]["content"], choice["finish_reason"]

    def run_corpus(self, sampled):
        import jsonschema

        def one(i, entry):
            extra = {"temperature": 0.8, "top_p": 0.95, "seed": 1000 + i} if sampled else {}
            rf = {"type": "json_schema", "json_schema": {"name": entry["name"], "schema": entry["schema"],
                                                        "strict": True}}
            return self.answer(entry["prompt"], response_format=rf, **extra)

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(one, range(len(self.corpus)), self.corpus))
        self.assertGreaterEqual(len(results), 30)
        for entry, (text, finish) in zip(self.corpus, results):
            with self.subTest(schema=entry["name"], sampled=sampled):
                self.answers.setdefault(entry["name"], {})["sampled" if sampled else "greedy"] = text
                self.assertEqual(finish, "stop", text)
                jsonschema.validate(json.loads(text), entry["schema"], cls=jsonschema.Draft202012Validator)

    def test_corpus_greedy_answers_validate(self):
        self.run_corpus(sampled=False)

    def test_corpus_sampled_answers_validate(self):
        self.run_corpus(sampled=True)

    def test_json_object_answers_are_objects(self):
        # Prompts SmolLM2-135M answers briefly: json_object bounds nothing, and the small model can repeat itself inside
        # an open-ended object until max_tokens (as it does without a constraint).
        prompts = ['Return a JSON object with the key "ok" set to true.', "What is 2 + 2? Answer as a JSON object.",
                   'Give the capital of France as a JSON object with the key "capital".']
        for prompt in prompts:
            for extra in [{}, {"temperature": 1.0, "seed": 7}, {"temperature": 0.8, "seed": 3}]:
                text, finish = self.answer(prompt, response_format={"type": "json_object"}, **extra)
                self.assertEqual(finish, "stop", text)
                self.assertIsInstance(json.loads(text), dict)
        text, _ = self.answer("Say hi.", response_format={"type": "text"}, max_tokens=8)
        self.assertTrue(text)

    def test_extension_fields(self):
        text, _ = self.answer("Give a phone extension.", guided_regex="[0-9]{3}-[0-9]{2}")
        self.assertRegex(text, r"^[0-9]{3}-[0-9]{2}$")
        text, _ = self.answer("Is fire hot?", guided_grammar='root ::= "yes" | "no"')
        self.assertIn(text, ("yes", "no"))
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        for field in ("guided_json", "json_schema"):
            text, _ = self.answer("Give a number.", **{field: schema})
            self.assertIsInstance(json.loads(text)["n"], int)
        text, _ = self.answer("Give a number.", guided_json=json.dumps(schema))
        self.assertIsInstance(json.loads(text)["n"], int)

    def test_streamed_constrained_text_equals_non_streamed(self):
        rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": self.corpus[0]["schema"]}}
        want, _ = self.answer(self.corpus[0]["prompt"], response_format=rf)
        doc = {"messages": [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": self.corpus[0]["prompt"]}], "max_tokens": 300,
               "temperature": 0, "response_format": rf, "stream": True}
        status, _, body = self.server.request("POST", "/v1/chat/completions", json.dumps(doc),
                                              {"Content-Type": "application/json"})
        self.assertEqual(status, 200)
        text = ""
        for line in body.decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                delta = json.loads(line[6:])["choices"][0]["delta"]
                text += delta.get("content") or ""
        self.assertEqual(text, want)

    def test_logit_bias_forces_and_bans(self):
        hello = token_id("Hello")
        text, _ = self.answer("Write a poem.", logit_bias={str(hello): 100}, max_tokens=5)
        self.assertEqual(text, "Hello" * 5)
        status, body = self.server.post_json("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4,
                                                                 "temperature": 0, "logit_bias": {str(hello): 100}})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["choices"][0]["text"], "Hello" * 4)
        # Under a constraint of two answers, banning the greedy one leaves the other.
        first, _ = self.answer("Is fire hot?", guided_regex="(yes|no)")
        other = {"yes": "no", "no": "yes"}[first]
        text, _ = self.answer("Is fire hot?", guided_regex="(yes|no)", logit_bias={str(token_id(first)): -100})
        self.assertEqual(text, other)

    def expect_400(self, param, fragment, **extra):
        status, body = self.chat("hi", max_tokens=4, **extra)
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], param, body)
        self.assertIn(fragment, body["error"]["message"])

    def test_invalid_values_are_400_naming_the_parameter(self):
        self.expect_400("logit_bias", "token ids", logit_bias={"abc": 1})
        self.expect_400("logit_bias", "[-100, 100]", logit_bias={"5": 101})
        self.expect_400("logit_bias", "outside the vocabulary", logit_bias={"49152": 1})
        self.expect_400("logit_bias", "at most 300", logit_bias={str(i): 1 for i in range(301)})
        self.expect_400("response_format.type", "bogus", response_format={"type": "bogus"})
        self.expect_400("response_format.json_schema", "required", response_format={"type": "json_schema"})
        rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "not": {}}}}
        self.expect_400("response_format.json_schema.schema", "'not'", response_format=rf)
        rf["json_schema"]["schema"] = {"type": "strange"}
        self.expect_400("response_format.json_schema.schema", "strange", response_format=rf)
        rf["json_schema"]["schema"] = {"$ref": "https://example.com/x.json"}
        self.expect_400("response_format.json_schema.schema", "$ref", response_format=rf)
        self.expect_400("guided_choice", "not supported", guided_choice=["a", "b"])
        self.expect_400("guided_regex", "guided_regex", guided_regex="(unclosed")
        self.expect_400("guided_grammar", "guided_grammar", guided_grammar="root ::= missing")
        self.expect_400("guided_regex", "one constraint", response_format={"type": "json_object"}, guided_regex="a")

    def test_hostile_schemas_are_refused_in_bounded_time(self):
        deep = {}
        for _ in range(60):
            deep = {"type": "array", "items": deep}
        # 5,000 properties in five objects of 1,000 (a request's JSON objects hold at most 1,024 members each).
        part = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(1000)}}
        wide = {"type": "object", "properties": {f"o{j}": part for j in range(5)}}
        for schema in (deep, wide):
            t0 = time.monotonic()
            rf = {"type": "json_schema", "json_schema": {"name": "h", "schema": schema}}
            self.expect_400("response_format.json_schema.schema", "schema", response_format=rf)
            self.assertLess(time.monotonic() - t0, 5)
        # One object of 5,000 members is refused as the body is parsed.
        rf = {"type": "json_schema", "json_schema": {"name": "h", "schema": {
            "type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(5000)}}}}
        self.expect_400(None, "more than 1024 members", response_format=rf)


def main():
    global BINARY, RECORD
    args = sys.argv[1:]
    if "--record" in args:
        RECORD = args[args.index("--record") + 1]
        del args[args.index("--record"):args.index("--record") + 2]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    BINARY = args[0]
    required = bool(os.environ.get("TRACELM_REQUIRE_MODELS"))
    if model_or_skip() is None:
        return SKIP
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        print("skipped: the Python package 'jsonschema' is not installed (scripts/run_tests.sh installs it)",
              file=sys.stderr)
        return 1 if required else SKIP
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
