#!/usr/bin/env python3
"""Regenerates testdata/tokenizer/qwen3_encode.jsonl, the Qwen3 tokenizer goldens, with an independent
implementation: Hugging Face's `tokenizers` package (not run in CI).

  python -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
  /tmp/tokvenv/bin/python scripts/make_qwen3_encode_goldens.py [--check]

The texts are the file's own (its corpus); each line's ids are recomputed by encoding the text with
models/qwen3-tokenizer/tokenizer.json, without added special tokens (Qwen3 adds none; control tokens written in
the text, such as <|im_start|>, become their single ids). The file is rewritten only if an id differs; --check
only reports the lines that differ and exits 1 if any do.
"""
import argparse
import json
import os
import sys

import tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDENS = os.path.join(ROOT, "testdata/tokenizer/qwen3_encode.jsonl")
TOKENIZER = os.path.join(ROOT, "models/qwen3-tokenizer/tokenizer.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report differing lines, write nothing")
    args = ap.parse_args()
    tok = tokenizers.Tokenizer.from_file(TOKENIZER)
    with open(GOLDENS, encoding="utf-8") as f:
        old = [json.loads(line) for line in f if line.strip()]
    new = [{"text": r["text"], "ids": tok.encode(r["text"], add_special_tokens=False).ids} for r in old]
    differ = [i for i, (a, b) in enumerate(zip(old, new)) if a["ids"] != b["ids"]]
    for i in differ:
        print(f"line {i + 1}: {old[i]['text']!r}: file {old[i]['ids']}, tokenizers {new[i]['ids']}", file=sys.stderr)
    print(f"{len(new)} texts, {len(differ)} differ (tokenizers {tokenizers.__version__})")
    if args.check or not differ:
        return 1 if differ else 0
    with open(GOLDENS, "w", encoding="utf-8") as f:
        for r in new:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"rewrote {GOLDENS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
