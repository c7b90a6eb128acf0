#!/usr/bin/env python3
"""Goldens for tool-calling conversations through real chat templates, rendered by Hugging Face transformers'
own renderer (transformers.utils.chat_template_utils.render_jinja_template, what apply_chat_template calls).

Each case pairs the request body an OpenAI client sends (tool call arguments as JSON text, the assistant's content
null, a tool result with its tool_call_id) with the conversation as transformers documents it (arguments as an
object), rendered with the tools. tests/chat/test_tool_rendering.cpp sends the request body through tracelm's
request parser and chat template and expects the same text. Every template here writes the arguments with tojson,
so transformers' conversation has them as objects (as its docs show them).

Writes testdata/goldens/tool_conversations.json. Run once (needs transformers >= 4.56 and jinja2 3.1):
  python3 scripts/make_tool_goldens.py
"""
import copy
import json
import pathlib

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = pathlib.Path(__file__).resolve().parent.parent

# template: (bos_token, eos_token, whether the conversation gives arguments as objects)
TEMPLATES = {
    "qwen3": (None, "<|im_end|>", True),
    "qwen2.5-7b-instruct": (None, "<|im_end|>", True),
    "llama-3.1-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>", True),
    "llama-3.2-3b-instruct": ("<|begin_of_text|>", "<|eot_id|>", True),
    "hermes-3-llama-3.1-8b-tool-use": ("<|begin_of_text|>", "<|im_end|>", True),
    "mistral-nemo-instruct-2407": ("<s>", "</s>", True),
    "mistral-small-3.2-24b-instruct-2506": ("<s>", "</s>", True),
    "deepseek-r1-distill-qwen-32b": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", True),
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]

ARGS = {"city": "Paris", "unit": "celsius"}
CALL_ID = "abcDEF123"  # 9 alphanumerics: Mistral's templates refuse other ids


def request(parallel):
    """The body an OpenAI client sends for the agent loop's second turn."""
    calls = [{"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}]
    results = [{"role": "tool", "tool_call_id": CALL_ID, "content": "{\"temperature\": 21}"}]
    if parallel:
        calls.append({"id": "xyzXYZ789", "type": "function",
                      "function": {"name": "search", "arguments": "{\"query\": \"Paris news\"}"}})
        results.append({"role": "tool", "tool_call_id": "xyzXYZ789", "content": "3 results"})
    # date_string: Llama 3.2's template would print today's date (strftime_now) without it
    return {"model": "m", "tools": TOOLS, "chat_template_kwargs": {"date_string": "15 Jan 2025"}, "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *results]}


def hf_conversation(body, object_arguments):
    """The same conversation as transformers documents it: arguments as objects, no null content."""
    messages = copy.deepcopy(body["messages"])
    for m in messages:
        if m.get("content") is None:
            m["content"] = ""
        for c in m.get("tool_calls", []):
            if object_arguments:
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return messages


def main():
    cases = []
    for name, (bos, eos, object_arguments) in TEMPLATES.items():
        source = (ROOT / "testdata" / "chat_templates" / f"{name}.jinja").read_text()
        for parallel in (False, True):
            if parallel and name.startswith("llama-3"):
                continue  # Llama 3.x templates take one call per message (they raise otherwise)
            body = request(parallel)
            tokens = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
            rendered, _ = render_jinja_template(conversations=[hf_conversation(body, object_arguments)],
                                                tools=TOOLS, chat_template=source, add_generation_prompt=True,
                                                **tokens, **body["chat_template_kwargs"])
            cases.append({"template": name, "bos_token": bos, "eos_token": eos, "request": body,
                          "text": rendered[0]})
    out = ROOT / "testdata" / "goldens" / "tool_conversations.json"
    out.write_text(json.dumps({"transformers": transformers.__version__, "cases": cases}, indent=1,
                              ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
