#!/usr/bin/env python3
"""One-off generator of Hugging Face goldens for Gemma 3's tokenizer.json (not run in CI; needs transformers,
tokenizers and gguf, but not torch).

There is no model hub here, so the tokenizer.json comes from the Gemma 3 270M GGUF through transformers' own GGUF
tokenizer converter (transformers.integrations.gguf: GemmaTokenizer, a BPE model with byte fallback, merges rebuilt
from the vocabulary in file order, control tokens as special added tokens, user-defined ones as plain added tokens).
That file is 33 MB, too big for the repository, so this script keeps what tracelm's test needs to rebuild it:

  testdata/tokenizer/gemma3_tokenizer_json_recipe.json
      the file without model.vocab, model.merges and added_tokens ("skeleton"), and the SHA-256 of each of those
      three (strings joined with NUL bytes, see digests()), which tests/support/gemma3_tokenizer_json.h checks
      after rebuilding them from the GGUF by transformers' rules;
  testdata/goldens/gemma3_hf_tokenize.jsonl
      Hugging Face `tokenizers` encoding the texts of testdata/goldens/gemma3_tokenize.jsonl (llama.cpp's corpus)
      without special tokens added: {"text", "special", "ids"} per line; special = false sets
      encode_special_tokens (split_special_tokens: special tokens in the text are not matched), and a special =
      true line is written where that changes the ids.

  python -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install transformers tokenizers gguf
  /tmp/hfvenv/bin/python scripts/make_hf_gemma3_tokenizer_goldens.py [--model PATH] [--save-json PATH]
"""
import argparse
import hashlib
import json
import os

import gguf
import tokenizers
import transformers
from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.expanduser("~/.cache/tracelm/models/gemma-3-270m-q4_k_m.gguf")
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def joined_sha256(strings):
    h = hashlib.sha256()
    for s in strings:
        h.update(s.encode("utf-8") + b"\0")
    return h.hexdigest()


def digests(doc):
    """vocab: the token texts by id; merges: left, right, left, right...; added_tokens: per token its id, content
    and the flags special, normalized, lstrip, rstrip, single_word as 0/1."""
    vocab = sorted(doc["model"]["vocab"].items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    flags = ("special", "normalized", "lstrip", "rstrip", "single_word")
    return {
        "vocab": joined_sha256(t for t, _ in vocab),
        "merges": joined_sha256(s for pair in doc["model"]["merges"] for s in pair),
        "added_tokens": joined_sha256(
            s for t in doc["added_tokens"]
            for s in (str(t["id"]), t["content"], "".join("1" if t[f] else "0" for f in flags))),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--save-json", help="also write the whole tokenizer.json here")
    args = ap.parse_args()
    with open(args.model, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if digest != GGUF_SHA256:
        raise SystemExit(f"{args.model}: sha256 {digest}, expected {GGUF_SHA256}")

    reader = gguf.GGUFReader(args.model)
    tokenizer_dict = {name: reader.fields["tokenizer." + key].contents()
                      for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
                      if "tokenizer." + key in reader.fields}
    backend, _ = convert_gguf_tokenizer(reader.fields["general.architecture"].contents(), tokenizer_dict)
    doc = json.loads(backend.to_str())
    if args.save_json:
        backend.save(args.save_json)

    skeleton = {k: v for k, v in doc.items() if k != "added_tokens"}
    skeleton["model"] = {k: v for k, v in doc["model"].items() if k not in ("vocab", "merges")}
    recipe = {
        "made_by": "scripts/make_hf_gemma3_tokenizer_goldens.py",
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "gguf_sha256": digest,
        "counts": {"vocab": len(doc["model"]["vocab"]), "merges": len(doc["model"]["merges"]),
                   "added_tokens": len(doc["added_tokens"])},
        "sha256": digests(doc),
        "skeleton": skeleton,
    }
    path = os.path.join(ROOT, "testdata/tokenizer/gemma3_tokenizer_json_recipe.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(recipe, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path}")

    tok = tokenizers.Tokenizer.from_str(backend.to_str())
    texts, seen = [], set()
    with open(os.path.join(ROOT, "testdata/goldens/gemma3_tokenize.jsonl"), encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            if text not in seen:
                seen.add(text)
                texts.append(text)
    lines = []
    for text in texts:
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        special = tok.encode(text, add_special_tokens=False).ids
        lines.append({"text": text, "special": False, "ids": plain})
        if special != plain:
            lines.append({"text": text, "special": True, "ids": special})
    path = os.path.join(ROOT, "testdata/goldens/gemma3_hf_tokenize.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({len(lines)} lines)")


if __name__ == "__main__":
    main()
