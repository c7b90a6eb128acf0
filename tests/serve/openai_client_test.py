#!/usr/bin/env python3
"""`tracelm serve` driven over loopback by the official `openai` client (ctest: Serve.OpenAIClient).

Usage: openai_client_test.py TRACELM_BINARY

Starts `tracelm serve --port 0` on the default model (SmolLM2-135M-Instruct Q4_1 in the model cache) and checks chat
and completions, streamed and not; that streamed text equals the non-streamed text of the same greedy request byte for
byte; stop strings that span streamed chunks; multi-byte text; usage against `tracelm tokenize`; every error status
and every refused parameter (unknown fields included); n choices and lists of prompts; echo, with the prompt's logprobs; continue_final_message and add_generation_prompt against
SmolLM2's template rendered by Python jinja2; /health, /v1/models and /metrics; GET /v1/models/{id}; /tokenize and
/detokenize against llama.cpp's tokenization of SmolLM2's vocabulary (testdata/goldens/smollm2_tokenize.jsonl, made by
make_llamacpp_goldens.py); /v1/embeddings' shape, norm, batch invariance and base64 (the numbers against a reference:
Embeddings.* in C++). Exits 77 (skipped) without the model or the `openai` package, unless TRACELM_REQUIRE_MODELS is
set. Every wait is bounded and the server is always killed at the end.
"""
import http.client
import base64
import json
import math
import os
import pathlib
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

from server_process import MODEL, MODEL_ID, Server, metric, run_openai_tests

BINARY = None
API_KEY = "test-key"
SYSTEM = "You are a terse assistant."
GOLDENS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata", "goldens")


def tokenize(text):
    out = subprocess.run([BINARY, "tokenize", "--model", MODEL, "--text", text], capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


SMOLLM2_TEMPLATE = pathlib.Path(__file__).resolve().parents[2] / "testdata/chat_templates/smollm2-135m-instruct.jinja"


def jinja2_prompt(messages, add_generation_prompt, continue_final_message=False):
    """SmolLM2's template rendered by Python jinja2 as transformers' apply_chat_template renders it, with its
    continue_final_message cut: after the last occurrence of the final message's content (as written when the
    rendering kept it so, else stripped). Independent of tracelm's template code."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string(SMOLLM2_TEMPLATE.read_text()).render(
        messages=messages, add_generation_prompt=add_generation_prompt, bos_token="<|im_start|>",
        eos_token="<|im_end|>")
    if continue_final_message:
        final = messages[-1]["content"]
        at = text.rindex(final.strip())
        kept = text[at:at + len(final.lstrip())] == final
        text = text[:at + len(final.lstrip() if kept else final.strip())]
    return text


def chatml(messages):
    """SmolLM2's ChatML prompt, written out independently of tracelm's template code."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + "<|im_start|>assistant\n"


class OpenAIClientTest(unittest.TestCase):
    server = None
    client = None

    @classmethod
    def setUpClass(cls):
        import openai
        cls.openai = openai
        cls.server = Server(BINARY, ["--max-seqs", "4", "--context", "1024", "--api-key", API_KEY])
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.server.port}/v1", api_key=API_KEY, timeout=120,
                                   max_retries=0)

    @classmethod
    def tearDownClass(cls):
        if cls.server:
            code = cls.server.stop()
            cls.server.kill()
            if code != 0:
                raise AssertionError(f"tracelm serve exited with {code} on SIGTERM, not 0")

    def chat(self, content, **kw):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]
        kw.setdefault("temperature", 0)
        return messages, self.client.chat.completions.create(model=MODEL_ID, messages=messages, **kw)

    def stream_chat(self, content, **kw):
        _, stream = self.chat(content, stream=True, **kw)
        return list(stream)

    def completion_chunks(self, prompt, **kw):
        kw.setdefault("temperature", 0)
        return list(self.client.completions.create(model=MODEL_ID, prompt=prompt, stream=True, **kw))

    # --- answers --------------------------------------------------------------------------------------------------

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], [MODEL_ID])

    def test_model_retrieved_by_id(self):
        m = self.client.models.retrieve(MODEL_ID)
        self.assertEqual((m.id, m.object, m.owned_by), (MODEL_ID, "model", "tracelm"))
        self.assertIsInstance(m.created, int)
        with self.assertRaises(self.openai.NotFoundError) as cm:
            self.client.models.retrieve("gpt-4o")
        self.assertEqual(cm.exception.body["code"], "model_not_found")
        self.assertEqual(cm.exception.body["param"], "model")

    def test_tokenize_equals_llamacpp_and_detokenize_gives_the_text(self):
        """Each corpus text's ids as llama.cpp parses special tokens (its special=true line where the flag matters)."""
        expected = {}
        with open(os.path.join(GOLDENS, "smollm2_tokenize.jsonl"), encoding="utf-8") as f:
            for line in map(json.loads, f):
                if line["special"] or line["text"] not in expected:
                    expected[line["text"]] = line["ids"]
        self.assertGreater(len(expected), 250)
        for text, ids in expected.items():
            with self.subTest(text=text[:40]):
                status, vllm = self.server.post_json("/tokenize", {"prompt": text})
                self.assertEqual(status, 200, vllm)
                self.assertEqual(vllm, {"tokens": ids, "count": len(ids), "max_model_len": 1024})
                status, llama = self.server.post_json("/tokenize", {"content": text, "add_special": True})
                self.assertEqual((status, llama), (200, {"tokens": ids}))
                status, back = self.server.post_json("/detokenize", {"model": MODEL_ID, "tokens": ids})
                self.assertEqual((status, back), (200, {"prompt": text, "content": text}))

    def test_tokenize_of_a_chat_is_its_completion_prompt(self):
        """jinja2's rendering of SmolLM2's template (its default system prompt), tokenized by llama.cpp."""
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        with open(os.path.join(GOLDENS, "smollm2_tokenize.jsonl"), encoding="utf-8") as f:
            rendered = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face" \
                       "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n" \
                       "<|im_start|>assistant\n"
            ids = next(line["ids"] for line in map(json.loads, f) if line["special"] and line["text"] == rendered)
        status, t = self.server.post_json("/tokenize", {"model": MODEL_ID, "messages": messages})
        self.assertEqual(status, 200, t)
        self.assertEqual(t["tokens"], ids)
        r = self.client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=1)
        self.assertEqual(t["count"], r.usage.prompt_tokens)
        status, turn = self.server.post_json("/tokenize", {"messages": messages, "add_generation_prompt": False})
        self.assertEqual(status, 200, turn)
        self.assertEqual(turn["tokens"], ids[:len(turn["tokens"])])
        status, rest = self.server.post_json("/detokenize", {"tokens": ids[len(turn["tokens"]):]})
        self.assertEqual(rest["prompt"], "<|im_start|>assistant\n")

    def test_tokenize_refusals_are_named(self):
        cases = [("/detokenize", {"tokens": [1, -1]}, 400, "tokens"),
                 ("/detokenize", {"tokens": [1, 49152]}, 400, "tokens"),
                 ("/detokenize", {"tokens": [1] * 1025}, 400, "tokens"),
                 ("/tokenize", {"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, 400, "messages"),
                 ("/tokenize", {"prompt": "x", "model": "gpt-4o"}, 404, "model")]
        for path, doc, code, param in cases:
            with self.subTest(path=path, doc=str(doc)[:60]):
                status, body = self.server.post_json(path, doc)
                self.assertEqual((status, body["error"]["param"]), (code, param), body)

    def test_embeddings(self):
        texts = ["The sky is blue.", "Un café, s'il vous plaît.", "日本語のテキストです。"]
        # The client asks for base64 and decodes it unless told "float".
        batch = self.client.embeddings.create(model=MODEL_ID, input=texts)
        self.assertEqual([d.index for d in batch.data], [0, 1, 2])
        self.assertEqual(batch.model, MODEL_ID)
        lengths = [self.server.post_json("/tokenize", {"prompt": t})[1]["count"] for t in texts]
        self.assertEqual((batch.usage.prompt_tokens, batch.usage.total_tokens), (sum(lengths), sum(lengths)))
        for text, d in zip(texts, batch.data):
            with self.subTest(text=text):
                self.assertEqual(len(d.embedding), 576)  # SmolLM2-135M's hidden size
                self.assertAlmostEqual(math.sqrt(sum(x * x for x in d.embedding)), 1.0, places=5)
                alone = self.client.embeddings.create(model=MODEL_ID, input=text, encoding_format="float")
                self.assertEqual(alone.data[0].embedding, d.embedding)  # the same bits, batched or alone
        self.assertNotEqual(batch.data[0].embedding, batch.data[1].embedding)
        status, raw = self.server.post_json("/v1/embeddings", {"input": texts[0], "encoding_format": "base64"})
        self.assertEqual(status, 200, raw)
        packed = base64.b64decode(raw["data"][0]["embedding"])
        self.assertEqual(list(struct.unpack(f"<{len(packed) // 4}f", packed)), batch.data[0].embedding)
        ids = self.server.post_json("/tokenize", {"prompt": texts[0]})[1]["tokens"]
        by_ids = self.client.embeddings.create(model=MODEL_ID, input=[ids])
        self.assertEqual(by_ids.data[0].embedding, batch.data[0].embedding)
        with self.assertRaises(self.openai.BadRequestError) as cm:
            self.client.embeddings.create(model=MODEL_ID, input="x", dimensions=64)
        self.assertEqual(cm.exception.body["param"], "dimensions")

    def test_chat_streamed_equals_non_streamed(self):
        messages, r = self.chat("Name three colors.", max_tokens=24)
        text = r.choices[0].message.content
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertTrue(text)
        self.assertEqual(r.usage.prompt_tokens, len(tokenize(chatml(messages))))
        self.assertLessEqual(r.usage.completion_tokens, 24)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

        chunks = self.stream_chat("Name three colors.", max_tokens=24, stream_options={"include_usage": True})
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(streamed.encode(), text.encode())
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, [r.choices[0].finish_reason])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}),
                         r.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}))
        # No usage chunk unless asked for.
        self.assertTrue(all(c.usage is None for c in self.stream_chat("Name three colors.", max_tokens=4)))

    def test_chat_logprobs(self):
        _, r = self.chat("Name three colors.", max_tokens=6, logprobs=True, top_logprobs=3,
                         extra_body={"ignore_eos": True})
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        # The tokens' bytes make up the text exactly.
        self.assertEqual(b"".join(bytes(t.bytes) for t in content), r.choices[0].message.content.encode())
        for t in content:
            self.assertEqual(len(t.top_logprobs), 3)
            self.assertAlmostEqual(t.logprob, t.top_logprobs[0].logprob, places=5)  # greedy: the best one
            self.assertEqual(t.token, t.top_logprobs[0].token)

    def test_completion_streamed_equals_non_streamed_and_usage(self):
        prompt = "The capital of France is"
        r = self.client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=16, temperature=0,
                                           extra_body={"ignore_eos": True}, logprobs=2)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.prompt_tokens, len(tokenize(prompt)))
        self.assertEqual(r.usage.completion_tokens, 16)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 16)
        self.assertEqual(len(lp.token_logprobs), 16)
        self.assertTrue(all(len(t) <= 2 + 1 for t in lp.top_logprobs))
        # Greedy: the chosen token is the most likely one.
        for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
            self.assertAlmostEqual(chosen, max(top.values()), places=5)
        chunks = self.completion_chunks(prompt, max_tokens=16, extra_body={"ignore_eos": True})
        self.assertEqual("".join(c.choices[0].text for c in chunks).encode(), r.choices[0].text.encode())
        self.assertEqual(chunks[-1].choices[0].finish_reason, "length")

    def test_stop_string_across_chunks(self):
        prompt = "Here is a list of fruits: apple, banana,"
        kw = dict(max_tokens=32, extra_body={"ignore_eos": True})
        chunks = [c.choices[0].text for c in self.completion_chunks(prompt, **kw)]
        full = "".join(chunks)
        # A stop string made of the end of one chunk and the start of the next.
        stop = None
        for a, b in zip(chunks[4:], chunks[5:]):
            if len(a) >= 2 and len(b) >= 2:
                stop = a[-2:] + b[:2]
                break
        self.assertIsNotNone(stop, f"no two neighbouring chunks of 2+ characters in {chunks!r}")
        want = full[:full.find(stop)]
        r = self.client.completions.create(model=MODEL_ID, prompt=prompt, temperature=0, stop=[stop, "@@never@@"], **kw)
        self.assertEqual(r.choices[0].text, want)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        streamed = self.completion_chunks(prompt, stop=stop, **kw)
        self.assertEqual("".join(c.choices[0].text for c in streamed), want)
        self.assertEqual(streamed[-1].choices[0].finish_reason, "stop")
        self.assertNotIn(stop, "".join(c.choices[0].text for c in streamed))

    def test_multibyte_text_streams_byte_exact(self):
        prompt = "日本語と中文の文章です。😀🎉 続き:"
        kw = dict(max_tokens=24, extra_body={"ignore_eos": True})
        r = self.client.completions.create(model=MODEL_ID, prompt=prompt, temperature=0, **kw)
        text = r.choices[0].text
        self.assertTrue(any(ord(ch) > 0x7F for ch in text), f"the answer has no multi-byte character: {text!r}")
        # (A character cut by max_tokens ends the text as U+FFFD, in both forms alike.)
        chunks = self.completion_chunks(prompt, **kw)
        self.assertEqual("".join(c.choices[0].text for c in chunks).encode("utf-8"), text.encode("utf-8"))
        self.assertEqual(r.usage.prompt_tokens, len(tokenize(prompt)))

    def test_concurrent_streams_equal_answers_alone(self):
        prompts = ["The sky is", "My favourite food is", "def fibonacci(n):", "In 1492,"]
        kw = dict(max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
        alone = [self.client.completions.create(model=MODEL_ID, prompt=p, **kw).choices[0].text for p in prompts]
        results = [None] * len(prompts)

        def run(i):
            try:
                results[i] = "".join(c.choices[0].text for c in self.completion_chunks(prompts[i], **kw))
            except Exception as e:  # noqa: BLE001 (reported by the comparison below)
                results[i] = repr(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertFalse(any(t.is_alive() for t in threads), "a concurrent stream did not finish in 120 s")
        self.assertEqual(results, alone)

    def test_completion_echo_prepends_the_prompt(self):
        prompt = "The capital of France is"
        kw = dict(model=MODEL_ID, prompt=prompt, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
        alone = self.client.completions.create(**kw)
        echoed = self.client.completions.create(echo=True, **kw)
        self.assertEqual(echoed.choices[0].text, prompt + alone.choices[0].text)
        self.assertEqual(echoed.usage.completion_tokens, alone.usage.completion_tokens)
        chunks = list(self.client.completions.create(echo=True, stream=True, **kw))
        self.assertEqual(chunks[0].choices[0].text, prompt)
        self.assertEqual("".join(c.choices[0].text for c in chunks), prompt + alone.choices[0].text)

    def test_echo_with_logprobs_scores_the_prompt(self):
        """echo with logprobs: the prompt's tokens open the logprobs (the first null, as OpenAI shows it), each the
        log-probability given the tokens before it, which a completion of that prefix alone gives its first token
        (the same model at another batch shape: close, not bit-equal); the answer's own logprobs are unchanged."""
        prompt = "The capital of France is"
        kw = dict(model=MODEL_ID, max_tokens=3, temperature=0, logprobs=2, extra_body={"ignore_eos": True})
        plain = self.client.completions.create(prompt=prompt, **kw).choices[0]
        echoed = self.client.completions.create(prompt=prompt, echo=True, **kw)
        ids = tokenize(prompt)
        lp = echoed.choices[0].logprobs
        self.assertEqual(echoed.choices[0].text, prompt + plain.text)
        self.assertEqual(len(lp.tokens), len(ids) + 3)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertTrue(all(v <= 0 for v in lp.token_logprobs[1:]))
        self.assertEqual(lp.token_logprobs[len(ids):], plain.logprobs.token_logprobs)
        self.assertEqual(lp.text_offset[len(ids)], len(prompt))
        self.assertEqual(lp.text_offset[:len(ids)], sorted(lp.text_offset[:len(ids)]))
        for i in (1, len(ids) // 2, len(ids) - 1):
            with self.subTest(position=i):
                alone = self.client.completions.create(model=MODEL_ID, prompt=ids[:i], max_tokens=1, temperature=0,
                                                       logprobs=2, extra_body={"ignore_eos": True}).choices[0]
                want = alone.logprobs.top_logprobs[0]
                got = lp.top_logprobs[i]
                self.assertEqual(list(got.keys())[0], list(want.keys())[0])
                for token, value in want.items():
                    if token in got:
                        self.assertAlmostEqual(got[token], value, delta=0.02)
        streamed = list(self.client.completions.create(prompt=prompt, echo=True, stream=True, **kw))
        self.assertEqual(streamed[0].choices[0].text, prompt)
        self.assertEqual(streamed[0].choices[0].logprobs.token_logprobs, lp.token_logprobs[:len(ids)])

    def test_continue_final_message_prompt_is_jinja2s(self):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me a story."},
                    {"role": "assistant", "content": "Once upon a time, "}]

        def chat(**fields):
            return self.client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=12,
                                                       temperature=0, extra_body={"ignore_eos": True, **fields})

        cases = [({}, jinja2_prompt(messages, True)),
                 ({"add_generation_prompt": False}, jinja2_prompt(messages, False)),
                 ({"continue_final_message": True}, jinja2_prompt(messages, False, True))]
        self.assertTrue(cases[2][1].endswith("<|im_start|>assistant\nOnce upon a time, "), cases[2][1])
        for fields, prompt in cases:
            with self.subTest(fields=fields):
                r = chat(**fields)
                self.assertEqual(r.usage.prompt_tokens, len(tokenize(prompt)))
                # The same prompt sent as text gives the same greedy answer.
                same = self.client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12, temperature=0,
                                                      extra_body={"ignore_eos": True})
                self.assertEqual(r.choices[0].message.content, same.choices[0].text)
        with self.assertRaises(self.openai.BadRequestError) as cm:
            chat(continue_final_message=True, add_generation_prompt=True)
        self.assertEqual(cm.exception.body["param"], "continue_final_message")

    def test_seeded_sampling_reproduces(self):
        kw = dict(model=MODEL_ID, prompt="Once upon a time", max_tokens=12, temperature=0.9, top_p=0.95, seed=1234)
        a = self.client.completions.create(**kw).choices[0].text
        b = self.client.completions.create(**kw).choices[0].text
        self.assertEqual(a, b)

    def test_n_choices_and_prompt_lists_answer_as_single_requests(self):
        """Choice j of n is the single request seeded seed + j (as vLLM seeds a request's choices), and its later
        choices share the prompt's KV blocks (the prefix cache's hit counter grows by their full blocks); each prompt
        of a list is answered as it is alone; streamed chunks, by index, concatenate to the non-streamed choices."""
        prompt = ("In the quiet village at the edge of the northern forest, where the river bends twice before it "
                  "reaches the sea, an old clockmaker named Tobias kept a secret that nobody in the valley had ever guessed:")
        kw = dict(model=MODEL_ID, max_tokens=10, temperature=0.9, top_p=0.95, extra_body={"ignore_eos": True})
        length = len(tokenize(prompt))
        self.assertGreater(length, 32)
        before = metric(self.server.metrics_when_idle(), "tracelm:prefix_cache_hit_tokens_total")
        many = self.client.completions.create(prompt=prompt, n=3, seed=77, **kw)
        after = metric(self.server.metrics_when_idle(), "tracelm:prefix_cache_hit_tokens_total")
        self.assertGreaterEqual(after - before, 2 * 16 * ((length - 1) // 16))
        self.assertEqual([c.index for c in many.choices], [0, 1, 2])
        singles = [self.client.completions.create(prompt=prompt, seed=77 + j, **kw).choices[0].text for j in range(3)]
        self.assertEqual([c.text for c in many.choices], singles)
        self.assertGreater(len(set(singles)), 1, "sampled choices should differ")
        self.assertEqual((many.usage.prompt_tokens, many.usage.completion_tokens), (length, 30))

        prompts = ["The sky is", "def fibonacci(n):"]
        listed = self.client.completions.create(prompt=prompts, n=2, seed=5, **kw)
        alone = [self.client.completions.create(prompt=p, seed=5 + j, **kw).choices[0].text
                 for p in prompts for j in range(2)]
        self.assertEqual([c.text for c in listed.choices], alone)
        self.assertEqual(listed.usage.prompt_tokens, sum(len(tokenize(p)) for p in prompts))
        streamed = ["", "", "", ""]
        for chunk in self.client.completions.create(prompt=prompts, n=2, seed=5, stream=True, **kw):
            for c in chunk.choices:
                streamed[c.index] += c.text
        self.assertEqual(streamed, alone)

        _, chat = self.chat("Name a colour.", n=2, seed=3, temperature=0.9, max_tokens=8)
        for j in range(2):
            _, one = self.chat("Name a colour.", seed=3 + j, temperature=0.9, max_tokens=8)
            self.assertEqual(chat.choices[j].message.content, one.choices[0].message.content)

    def metric(self, name):
        return metric(self.server.metrics(), name)

    def test_client_gone_mid_stream_is_cancelled(self):
        before = self.metric("tracelm:generation_tokens_total")
        finished = self.metric("tracelm:requests_finished_total")
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        body = json.dumps({"prompt": "Count to a thousand:", "max_tokens": 500, "ignore_eos": True, "stream": True})
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        line = r.readline()
        while line.startswith(b":") or line == b"\n":  # keep-alive comments while the prompt is prefilled
            line = r.readline()
        self.assertTrue(line.startswith(b"data: "), line)
        conn.sock.shutdown(2)  # hang up after the first chunk
        conn.close()
        # /metrics is published after each scheduler step, so it can lag the chunk just read: wait for the request
        # to be counted as finished (cancelled), not only for nothing to run.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.metric("tracelm:requests_finished_total") == finished:
            time.sleep(0.05)
        self.assertEqual(self.metric("tracelm:requests_finished_total"), finished + 1)
        self.assertEqual(self.metric("tracelm:num_requests_running"), 0)
        self.assertLess(self.metric("tracelm:generation_tokens_total") - before, 500)

    # --- errors ---------------------------------------------------------------------------------------------------

    def test_invalid_parameters_are_400_and_named(self):
        cases = [dict(top_p=2), dict(temperature=-1), dict(n=129), dict(max_tokens=0), dict(stop=["a", "b", "c", "d", "e"]),
                 dict(extra_body={"top_k": -5}), dict(extra_body={"repetition_penalty": 0}),
                 dict(presence_penalty=2.5), dict(frequency_penalty=-2.01), dict(reasoning_effort="high"),
                 dict(extra_body={"some_future_field": {"x": 1}}), dict(extra_body={"echo": True})]
        for kw in cases:
            with self.subTest(kw=kw):
                with self.assertRaises(self.openai.BadRequestError) as cm:
                    self.chat("hi", **kw)
                err = cm.exception.body
                name = next(iter(kw.get("extra_body", kw)))
                self.assertEqual(err["param"], name)
                self.assertEqual(err["type"], "invalid_request_error")
                self.assertIn(name, err["message"])

    def test_refused_completion_parameters_are_400_and_named(self):
        cases = [("suffix", dict(suffix="}")), ("best_of", dict(best_of=2)),
                 ("presence_penalty", dict(presence_penalty=-3)),
                 ("some_future_field", dict(extra_body={"some_future_field": 1})),
                 ("top_logprobs", dict(extra_body={"top_logprobs": 1}))]
        for name, kw in cases:
            with self.subTest(kw=kw):
                with self.assertRaises(self.openai.BadRequestError) as cm:
                    self.client.completions.create(model=MODEL_ID, prompt="hi", max_tokens=2, **kw)
                self.assertEqual(cm.exception.body["param"], name)
                self.assertIn(name, cm.exception.body["message"])

    def test_error_statuses(self):
        with self.assertRaises(self.openai.NotFoundError) as cm:
            self.client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(cm.exception.body["param"], "model")
        bad_key = self.openai.OpenAI(base_url=self.client.base_url, api_key="wrong", max_retries=0, timeout=30)
        with self.assertRaises(self.openai.AuthenticationError):
            bad_key.models.list()
        auth = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
        status, _, body = self.server.request("POST", "/v1/chat/completions", b"{\"messages\": [", auth)
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["error"]["type"], "invalid_request_error")
        status, _, body = self.server.request("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"})
        self.assertEqual(status, 401)
        self.assertIn("error", json.loads(body))
        # A body declared over --max-body-bytes is answered 413 from its headers; the client's send of the rest would
        # race the server's close (it drains a bounded amount), so only the headers go.
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=30) as sock:
            sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {API_KEY}\r\n"
                         f"Content-Type: application/json\r\nContent-Length: {2 << 20}\r\n\r\n".encode())
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        head, _, body = raw.partition(b"\r\n\r\n")
        self.assertEqual(int(head.split()[1]), 413, head)
        self.assertIn("error", json.loads(body))
        status, _, body = self.server.request("GET", "/v1/nothing", None, auth)
        self.assertEqual(status, 404)
        self.assertIn("error", json.loads(body))
        # A field the server does not implement is refused as OpenAI refuses one; labels are accepted.
        with self.assertRaises(self.openai.BadRequestError) as cm:
            self.chat("hi", max_tokens=2, extra_body={"some_future_field": {"x": 1}})
        self.assertEqual(cm.exception.body["message"], "Unrecognized request argument supplied: some_future_field")
        _, r = self.chat("hi", max_tokens=2, user="someone", metadata={"k": "v"}, store=False)
        self.assertTrue(r.choices)

    # --- monitoring -----------------------------------------------------------------------------------------------

    def test_health_and_metrics(self):
        self.assertEqual(self.server.request("GET", "/health")[0], 200)  # open without the key
        self.assertIn(self.server.health_codes[-1], (200,))
        self.assertTrue(all(c in (200, 503) for c in self.server.health_codes))
        self.client.completions.create(model=MODEL_ID, prompt="Hello", max_tokens=3, extra_body={"ignore_eos": True})
        status, _, _ = self.server.request("GET", "/metrics")
        self.assertEqual(status, 401)  # /metrics needs the key too (unless --metrics-public)
        status, headers, body = self.server.request("GET", "/metrics", headers=self.server.auth())
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain"))
        samples = {}
        for line in body.decode().splitlines():
            if line.startswith("#"):
                self.assertRegex(line, r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$")
                continue
            m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)', line)
            self.assertIsNotNone(m, line)
            samples[(m.group(1), m.group(2))] = float(m.group(3))
        label = f'model_name="{MODEL_ID}"'
        self.assertGreaterEqual(samples[("tracelm:generation_tokens_total", label)], 3)
        self.assertGreater(samples[("tracelm:prompt_tokens_total", label)], 0)
        self.assertGreater(samples[("tracelm:kv_blocks_total", label)], 0)
        for h in ("tracelm:time_to_first_token_seconds", "tracelm:inter_token_latency_seconds"):
            buckets = [(k[1], v) for k, v in samples.items() if k[0] == h + "_bucket"]
            counts = [v for _, v in buckets]
            self.assertEqual(counts, sorted(counts), f"{h} buckets are not cumulative")
            self.assertEqual(samples[(h + "_bucket", label + ',le="+Inf"')], samples[(h + "_count", label)])
        self.assertGreaterEqual(samples[("tracelm:time_to_first_token_seconds_count", label)], 1)
        # Nothing is left running once the answers are in.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            body = self.server.metrics()
            if f"tracelm:num_requests_running{{{label}}} 0\n" in body:
                break
            time.sleep(0.1)
        self.assertIn(f"tracelm:num_requests_running{{{label}}} 0\n", body)


def main():
    return run_openai_tests(__doc__, globals())


if __name__ == "__main__":
    sys.exit(main())
