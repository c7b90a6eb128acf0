#!/usr/bin/env python3
"""One-off generator of llama.cpp goldens for the GGUF tokenizers and for greedy decoding of SmolLM2-135M-Instruct
Q4_1 (not run in CI; needs llama-cpp-python, which compiles llama.cpp, and the `gguf` package).

  python -m venv /tmp/llamavenv
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" /tmp/llamavenv/bin/pip install \
      llama-cpp-python==0.3.36 gguf
  /tmp/llamavenv/bin/python scripts/make_llamacpp_goldens.py [--model PATH]

Writes, under testdata/:
  goldens/smollm2_tokenize.jsonl   llama.cpp's tokenization of a text corpus with the SmolLM2 vocabulary: one
                                   {"text", "special", "ids"} per line; special = llama.cpp's parse_special (control
                                   tokens such as <|im_start|> written in the text become single ids). A special=true
                                   line is written for every text where the flag changes the ids.
  goldens/gguf_pre_tokenize.jsonl  the same vocabulary and merges under other tokenizer.ggml.pre values (qwen2,
                                   llama-bpe, gpt-2, default), to pin each pre-tokenizer's regexes: {"pre", "text",
                                   "special", "ids"}.
  goldens/smollm2_vocab.json       vocabulary facts as llama.cpp reads them: bos/eos ids, add_bos, the
                                   end-of-generation ids (llama_vocab_is_eog over the whole vocabulary).
  goldens/smollm2_greedy.json      greedy continuations: prompt text, prompt ids, 32 generated ids (argmax of the
                                   logits at every step, continuing past end-of-generation tokens; eog_steps says
                                   where llama.cpp's own generate loop would have stopped) and the top-1 minus top-2
                                   logit margin per step, so a comparison can tell near-ties.
  tokenizer/tiny_spm.gguf          a hand-written SentencePiece ("llama") vocabulary with no tensors, and
  goldens/tiny_spm_tokenize.jsonl  llama.cpp's tokenization of a few texts with it.
  tokenizer/tiny_bpe.gguf          a hand-written byte-level BPE ("gpt2") vocabulary with no tensors, and
  goldens/tiny_bpe_tokenize.jsonl  llama.cpp's tokenization of a few texts with it under each pre-tokenizer:
                                   {"pre", "text", "special", "ids"}.
"""
import argparse
import hashlib
import json
import os
import tempfile

import gguf
import llama_cpp
import numpy as np
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_MODEL = os.path.expanduser("~/.cache/tracelm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
GREEDY_STEPS = 32
N_CTX = 2048
SEED = 1234

SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


def chat(user, system=False):
    return (SYSTEM if system else "") + f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


EXTRA_TEXTS = [
    # chat formatting and special-token look-alikes
    chat("What is the capital of France?", system=True),
    "<|im_start|>assistant\nSure!<|im_end|>\n<|endoftext|>",
    "<|im_start|><|im_end|><|im_start|>",
    "text<|im_end|>more text",
    "<|im_start", "< |im_start|>", "<|im_end|x>", "<<|im_end|>>",
    "<repo_name>tracelm<filename>src/main.cpp<file_sep>", "<reponame>a/b",
    # code
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) {\n\tprintf(\"%d\\n\", i);\n}\n",
    "const x = {a: [1, 2, 3], 'b': \"c\"};  // comment",
    "#include <vector>\nstd::vector<int> v{1,2,3};",
    "SELECT * FROM users WHERE id = 42;",
    # numbers
    "1234567", "3.14159265358979", "1,000,000.50", "2024-01-15T12:34:56Z", "0xDEADBEEF", "-42 +7 1e-9",
    "١٢٣٤٥", "½ ² ³ Ⅻ", "phone: +1 (555) 123-4567",
    # whitespace
    "a  b   c    d", "   leading", "trailing   ", "\n\n\n", " \n \n ", "\t\tx", "a \t b", "line1\r\nline2\r\n",
    "  \n  ", " ", "", "x\u00a0y", "zero\u200bwidth", "ideographic\u3000space", "a\u2028b",
    # unicode
    "naïve café", "Ünïcödé ÀÉÎÕÜ", "e\u0301 vs \u00e9", "日本語のテキストです。", "中文测试，标点符号！", "한국어 텍스트",
    "Привет, мир!", "مرحبا بالعالم", "עברית", "ελληνικά", "ﬁ ligature", "Ｆｕｌｌｗｉｄｔｈ",
    # contractions
    "I'm sure you're right, they've said she'll go and he'd stay; it's fine.", "DON'T I'M YOU'RE", "y'all rock'n'roll",
    "'s 't 're", "O'Neil's",
    # emoji
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪", "I ❤️ Paris", "🙂🙃😉",
    # misc
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2", "email@example.com", "C++20 & Rust",
    "$100.00 or €90", "@user #hashtag", "...!!!???", "—–-", "«quoted» „quoted“", "a/b\\c|d", "~~~```",
]

GREEDY_PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little",
    "def fibonacci(n):\n",
    "1, 2, 3, 4, 5,",
    chat("What is the capital of France?"),
    chat("Write a haiku about the sea.", system=True),
    chat("How many legs does a spider have?"),
    chat("Translate 'good morning' into Spanish."),
    chat("List three primary colors."),
]

# Pre-tokenizer names checked with SmolLM2's vocabulary besides its own "smollm".
OTHER_PRES = ["qwen2", "llama-bpe", "gpt-2", "default"]

# The hand-written SentencePiece vocabulary: ids 0-2 <unk> <s> </s>, 3-258 the byte tokens <0x00>..<0xFF>, then
# pieces with scores (higher merges first). "ab" < "bc" makes "abc" merge on the right first; "aa" tests the leftmost
# rule on ties; letters such as "z" or "é" have no piece and fall back to bytes; <tool> is user-defined.
SPM_PIECES = [
    ("▁", -1.0), ("a", -2.0), ("b", -2.0), ("c", -2.0), ("d", -2.0), ("e", -2.0), ("h", -2.0), ("l", -2.0),
    ("o", -2.0), ("r", -2.0), ("w", -2.0), ("ab", -3.0), ("bc", -2.5), ("aa", -3.0), ("he", -4.0), ("ll", -4.0),
    ("llo", -5.0), ("hell", -6.0), ("hello", -6.5), ("▁hello", -7.0), ("▁w", -4.5), ("or", -4.0), ("wor", -5.5),
    ("world", -6.0), ("▁world", -6.2), ("▁a", -3.5), ("▁▁", -8.0), ("abc", -9.0),
]
SPM_USER_DEFINED = ["<tool>"]

# The hand-written byte-level BPE ("gpt2") vocabulary: ids 0-255 the bytes in the GPT-2 alphabet, then the tokens the
# merges make (rank order), then tokens no merge reaches ("xyz", "Ġworld": only a pre-tokenizer that ignores merges
# finds them), a control and a user-defined token. Tokenized under each pre-tokenizer, so that digit grouping
# (Llama 3's \p{N}{1,3}, Qwen2's single digits, GPT-2's runs) and ignore_merges show in the ids.
BPE_MERGES = ["1 2", "12 3", "123 4", "Ġ 1", "Ġ1 2", "' s", "h e", "l l", "he ll", "hell o", "Ġ hello", "Ċ Ċ", "Ġ Ġ",
              "! !", "!! !"]
BPE_EXTRA = ["xyz", "Ġworld"]
BPE_PRES = ["smollm", "qwen2", "llama-bpe", "gpt-2", "default"]
BPE_TEXTS = ["1234567", " 1234", "12,345.678", "hello world", " hello", "xyz", " xyz", "he's", "HE'S", "a\n\nb",
             "x   y", "<|endoftext|>hello", "hello<tool>", "!!!", "$+<=>^~|", "a1b22c333", "", "  12  "]
SPM_TEXTS = ["hello world", "Hello world", "abc", "aaa", "aaaa", "  hello", "hello\nworld", "héllo", "z", "",
             "hello<tool>world", "<s>hello</s>", " a b c d", "world hello world", "aa ab abc"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def corpus():
    texts = []
    with open(os.path.join(ROOT, "testdata/tokenizer/qwen3_encode.jsonl"), encoding="utf-8") as f:
        texts += [json.loads(line)["text"] for line in f if line.strip()]
    seen, out = set(), []
    for t in texts + EXTRA_TEXTS:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def tokenize_lines(llm, texts, extra=None):
    lines = []
    for text in texts:
        plain = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        special = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        lines.append({**(extra or {}), "text": text, "special": False, "ids": plain})
        if special != plain:
            lines.append({**(extra or {}), "text": text, "special": True, "ids": special})
    return lines


def write_jsonl(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({len(lines)} lines)")


def field_value(reader, key):
    return reader.fields[key].contents()


def vocab_only_copy(reader, path, pre):
    """A tensor-free GGUF with the model's hyperparameters and tokenizer, tokenizer.ggml.pre replaced."""
    w = gguf.GGUFWriter(path, "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key == "tokenizer.ggml.pre":
            w.add_string(key, pre)
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_array(key, field.contents())
        else:
            w.add_key_value(key, field.contents(), field.types[0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_hparams(w, n_tokens):
    """Hyperparameters llama.cpp insists on even for a vocabulary-only load."""
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(4)
    w.add_vocab_size(n_tokens)


def write_tiny_spm(path):
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    scores += [0.0] * 256
    types += [6] * 256
    for piece, score in SPM_PIECES:
        tokens.append(piece)
        scores.append(score)
        types.append(1)
    for piece in SPM_USER_DEFINED:
        tokens.append(piece)
        scores.append(0.0)
        types.append(4)
    w = gguf.GGUFWriter(path, "llama")
    write_hparams(w, len(tokens))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({len(tokens)} tokens)")


def gpt2_byte_alphabet():
    """GPT-2's byte -> character map: printable Latin-1 bytes stand for themselves, the rest for U+0100 on."""
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(0x100 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_tiny_bpe(path):
    tokens = gpt2_byte_alphabet()
    for merge in BPE_MERGES:
        merged = merge.replace(" ", "")
        if merged not in tokens:
            tokens.append(merged)
    tokens += BPE_EXTRA + ["<|endoftext|>", "<tool>"]
    types = [1] * (len(tokens) - 2) + [3, 4]
    w = gguf.GGUFWriter(path, "llama")
    write_hparams(w, len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(BPE_MERGES)
    w.add_eos_token_id(len(tokens) - 2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({len(tokens)} tokens)")


def greedy(llm, eog):
    records = []
    for prompt in GREEDY_PROMPTS:
        prompt_ids = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(prompt_ids)
        tokens, margins, eog_steps = [], [], []
        for step in range(GREEDY_STEPS):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            order = np.argsort(-logits, kind="stable")  # the lowest id wins a tie, as in argmax
            tok = int(order[0])
            tokens.append(tok)
            margins.append(round(float(logits[order[0]] - logits[order[1]]), 6))
            if tok in eog:
                eog_steps.append(step)
            if step + 1 < GREEDY_STEPS:
                llm.eval([tok])
        records.append({
            "prompt": prompt,
            "prompt_ids": prompt_ids,
            "tokens": tokens,
            "top2_margin": margins,
            "eog_steps": eog_steps,
            "text": llm.detokenize(tokens, special=True).decode("utf-8", errors="replace"),
        })
        print(f"{prompt!r}: {records[-1]['text']!r} (eog at {eog_steps})")
    return records


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    args = ap.parse_args()
    digest = sha256(args.model)
    if digest != GGUF_SHA256:
        raise SystemExit(f"{args.model}: sha256 {digest}, expected {GGUF_SHA256}")
    goldens = os.path.join(ROOT, "testdata/goldens")
    texts = corpus()

    vocab_llm = Llama(model_path=args.model, vocab_only=True, verbose=False)
    write_jsonl(os.path.join(goldens, "smollm2_tokenize.jsonl"), tokenize_lines(vocab_llm, texts))

    vocab = llama_cpp.llama_model_get_vocab(vocab_llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    facts = {
        "llama_cpp_python": llama_cpp.__version__,
        "gguf_sha256": digest,
        "n_vocab": n_vocab,
        "bos_id": llama_cpp.llama_vocab_bos(vocab),
        "eos_id": llama_cpp.llama_vocab_eos(vocab),
        "eot_id": llama_cpp.llama_vocab_eot(vocab),
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "eog_ids": eog,
    }
    with open(os.path.join(goldens, "smollm2_vocab.json"), "w", encoding="utf-8") as f:
        json.dump(facts, f, indent=1)
        f.write("\n")
    del vocab_llm

    reader = gguf.GGUFReader(args.model)
    pre_lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for pre in OTHER_PRES:
            path = os.path.join(tmp, f"{pre}.gguf")
            vocab_only_copy(reader, path, pre)
            llm = Llama(model_path=path, vocab_only=True, verbose=False)
            pre_lines += tokenize_lines(llm, texts, {"pre": pre})
            del llm
    write_jsonl(os.path.join(goldens, "gguf_pre_tokenize.jsonl"), pre_lines)

    spm_path = os.path.join(ROOT, "testdata/tokenizer/tiny_spm.gguf")
    write_tiny_spm(spm_path)
    spm = Llama(model_path=spm_path, vocab_only=True, verbose=False)
    write_jsonl(os.path.join(goldens, "tiny_spm_tokenize.jsonl"), tokenize_lines(spm, SPM_TEXTS))
    del spm

    bpe_path = os.path.join(ROOT, "testdata/tokenizer/tiny_bpe.gguf")
    write_tiny_bpe(bpe_path)
    bpe_reader = gguf.GGUFReader(bpe_path)
    bpe_lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for pre in BPE_PRES:
            path = os.path.join(tmp, f"{pre}.gguf")
            vocab_only_copy(bpe_reader, path, pre)
            llm = Llama(model_path=path, vocab_only=True, verbose=False)
            bpe_lines += tokenize_lines(llm, BPE_TEXTS, {"pre": pre})
            del llm
    write_jsonl(os.path.join(goldens, "tiny_bpe_tokenize.jsonl"), bpe_lines)

    llm = Llama(model_path=args.model, n_ctx=N_CTX, n_threads=1, n_threads_batch=1, seed=SEED, logits_all=True,
                verbose=False)
    out = {
        "llama_cpp_python": llama_cpp.__version__,
        "gguf": os.path.basename(args.model),
        "gguf_sha256": digest,
        "n_ctx": N_CTX,
        "seed": SEED,
        "threads": 1,
        "sampling": "argmax of the logits (lowest id on ties); no repeat penalty; no stop on end-of-generation",
        "prompt_tokenization": "llama.cpp, add_bos=False (the GGUF's add_bos_token is false), special=True",
        "steps": GREEDY_STEPS,
        "records": greedy(llm, set(eog)),
    }
    with open(os.path.join(goldens, "smollm2_greedy.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote smollm2_greedy.json")


if __name__ == "__main__":
    main()
