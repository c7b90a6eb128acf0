#!/usr/bin/env python3
"""Tool calling through `tracelm serve` with the official `openai` client (ctest: Serve.ToolCallsClient).

Usage: tool_calls_client_test.py TRACELM_BINARY

SmolLM2's own template ignores tools, so the server renders with Qwen3's real template (--chat-template
testdata/chat_templates/qwen3.jinja), which offers tools in a system block and asks for Qwen's <tool_call> format
(the `ready:` line names it). Checks that tools change prompt_tokens, that an agent loop's second turn (an assistant
call with JSON-text arguments and a `role: tool` result) is accepted, that with tool_choice auto the answer goes
through the parser and streamed deltas assemble to the non-streamed message, that tool_choice none keeps the tools
in the prompt, and the 400s of bad tools. Forced calls (tool_choice "required" or a named function) are enforced by
constrained decoding: SmolLM2-135M rarely writes a well-formed call by itself, yet every forced answer here is a call
whose arguments `jsonschema` (an implementation independent of tracelm's) validates against the tool's parameters,
greedy and sampled, streamed and not, and a full agent round trip (forced call, tool result, answer) completes.
Exits 77 (skipped) without the model or the `openai` package, unless TRACELM_REQUIRE_MODELS is set.
"""
import json
import os
import sys
import unittest

from server_process import MODEL_ID, Server, run_openai_tests

BINARY = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web.",
                                      "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}},
]
USER = [{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}]


def assemble(chunks):
    """The message a client builds from streamed chunks: content joined, calls by index."""
    content, calls, finish = "", [], None
    for c in chunks:
        if not c.choices:
            continue
        ch = c.choices[0]
        finish = ch.finish_reason or finish
        if ch.delta.content:
            content += ch.delta.content
        for tc in ch.delta.tool_calls or []:
            if tc.index == len(calls):
                assert tc.id and tc.type == "function" and tc.function.name, tc
                assert tc.function.arguments == "", tc
                calls.append({"name": tc.function.name, "arguments": ""})
            elif tc.function.arguments:
                calls[tc.index]["arguments"] += tc.function.arguments
    return content or None, calls, finish


class ToolCallsClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import openai
        cls.openai = openai
        cls.server = Server(BINARY, ["--max-seqs", "2", "--context", "2048", "--chat-template",
                                     os.path.join(ROOT, "testdata", "chat_templates", "qwen3.jinja")])
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.server.port}/v1", api_key="x", timeout=120,
                                   max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.server.kill()

    def create(self, **kw):
        kw.setdefault("temperature", 0)
        kw.setdefault("max_tokens", 48)
        kw.setdefault("messages", USER)
        return self.client.chat.completions.create(model=MODEL_ID, **kw)

    def test_tools_change_prompt_tokens(self):
        plain = self.create(max_tokens=1).usage.prompt_tokens
        with_tools = self.create(max_tokens=1, tools=TOOLS).usage.prompt_tokens
        self.assertGreater(with_tools, plain + 50)
        # tool_choice none: the tools are still shown to the model (vLLM's default), only the parser is off
        self.assertEqual(self.create(max_tokens=1, tools=TOOLS, tool_choice="none").usage.prompt_tokens, with_tools)

    def test_agent_loop_second_turn_is_accepted(self):
        messages = USER + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_abc", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
            {"role": "tool", "tool_call_id": "call_abc", "content": json.dumps({"temperature_c": 21})},
        ]
        r = self.create(messages=messages, tools=TOOLS)
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length", "tool_calls"))

    def test_auto_streamed_deltas_equal_the_answer(self):
        for messages in (USER, [{"role": "user", "content": "Say hello."}]):
            r = self.create(messages=messages, tools=TOOLS, tool_choice="auto")
            msg = r.choices[0].message
            want_calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in msg.tool_calls or []]
            content, calls, finish = assemble(self.create(messages=messages, tools=TOOLS, stream=True))
            self.assertEqual(content, msg.content)
            self.assertEqual(calls, want_calls)
            self.assertEqual(finish, r.choices[0].finish_reason)
            for c in msg.tool_calls or []:
                self.assertTrue(c.id.startswith("call_"))
                json.loads(c.function.arguments)

    def check_calls(self, message, names):
        """The message holds calls of the given functions only, each with arguments valid under its parameters."""
        import jsonschema
        self.assertTrue(message.tool_calls, message)
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        for c in message.tool_calls:
            self.assertIn(c.function.name, names)
            self.assertTrue(c.id.startswith("call_"))
            jsonschema.validate(json.loads(c.function.arguments), schemas[c.function.name])

    def test_forced_named_call_round_trip(self):
        named = {"type": "function", "function": {"name": "get_weather"}}
        r = self.create(tools=TOOLS, tool_choice=named)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.check_calls(choice.message, {"get_weather"})
        self.assertEqual(len(choice.message.tool_calls), 1)
        self.assertFalse(choice.message.content)
        call = choice.message.tool_calls[0]
        messages = USER + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 21, "sky": "clear"})},
        ]
        answer = self.create(messages=messages, tools=TOOLS, tool_choice="none", max_tokens=32).choices[0]
        self.assertIn(answer.finish_reason, ("stop", "length"))
        self.assertTrue(answer.message.content and answer.message.content.strip(), answer)
        self.assertIsNone(answer.message.tool_calls)

    def test_required_calls_stream_as_they_answer(self):
        for parallel in (True, False):
            r = self.create(tools=TOOLS, tool_choice="required", parallel_tool_calls=parallel,
                            messages=[{"role": "user", "content": "Say hello."}], max_tokens=96)
            msg = r.choices[0].message
            self.check_calls(msg, {"get_weather", "search"})
            if not parallel:
                self.assertEqual(len(msg.tool_calls), 1)
            want = [{"name": c.function.name, "arguments": c.function.arguments} for c in msg.tool_calls]
            content, calls, finish = assemble(self.create(
                tools=TOOLS, tool_choice="required", parallel_tool_calls=parallel, stream=True,
                messages=[{"role": "user", "content": "Say hello."}], max_tokens=96))
            self.assertEqual((content, calls, finish), (msg.content, want, r.choices[0].finish_reason))

    def test_forced_calls_hold_when_sampled(self):
        named = {"type": "function", "function": {"name": "search"}}
        for seed in range(4):
            r = self.create(tools=TOOLS, tool_choice=named, temperature=1.0, seed=seed, max_tokens=96)
            self.assertEqual(r.choices[0].finish_reason, "tool_calls", r)
            self.check_calls(r.choices[0].message, {"search"})

    def test_bad_tools_and_forced_choices_are_400s(self):
        cases = [
            ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
            ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name"),
            ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
             "tool_choice.function.name"),
            ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"x": {"not": {"type": "string"}}}}}}],
              "tool_choice": "required"}, "tools"),
            ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
             "response_format"),
            ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ]
        for kw, param in cases:
            with self.assertRaises(self.openai.BadRequestError) as ctx:
                self.create(**kw)
            self.assertEqual(ctx.exception.body.get("param"), param, kw)


def main():
    return run_openai_tests(__doc__, globals())


if __name__ == "__main__":
    sys.exit(main())
