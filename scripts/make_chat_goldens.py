#!/usr/bin/env python3
"""Renders chat prompts with the models' real Jinja chat templates (jinja2, as transformers'
apply_chat_template does: trim_blocks, lstrip_blocks) for tests/chat/test_chat_template.cpp.

Templates: SmolLM2-135M-Instruct's (read from its GGUF), Qwen3's (models/qwen3-tokenizer) and
Meta Llama 3 Instruct's (text below, from its tokenizer_config.json). bos_token is rendered empty:
tracelm leaves BOS to the tokenizer's add_bos_token.

Run once (needs: pip install jinja2 gguf):
  python3 scripts/make_chat_goldens.py ~/.cache/tracelm/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import json
import pathlib
import sys

import jinja2
from gguf import GGUFReader

LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Capital of Italy?"}],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello. How can I help?"},
     {"role": "user", "content": "  Tell me a joke.\n"}],
]


def render(template, messages, add_generation_prompt):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token="", eos_token="")


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    smollm2 = GGUFReader(sys.argv[1]).fields["tokenizer.chat_template"].contents()
    qwen3 = json.loads((root / "models/qwen3-tokenizer/tokenizer_config.json").read_text())["chat_template"]
    cases = []
    for name, template in [("smollm2", smollm2), ("qwen3", qwen3), ("llama3", LLAMA3)]:
        for messages in CONVERSATIONS:
            if name == "qwen3" and any(m["role"] == "assistant" for m in messages):
                continue  # Qwen3 rewrites assistant turns (thinking blocks): not a plain ChatML case
            for gen in (True, False):
                cases.append({"template": name, "messages": messages, "add_generation_prompt": gen,
                              "text": render(template, messages, gen)})
    out = {"templates": {"smollm2": smollm2, "qwen3": qwen3, "llama3": LLAMA3}, "cases": cases}
    (root / "testdata/goldens/chat_templates.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
