#!/usr/bin/env python3
"""One-off generator of llama.cpp goldens for the GGUF tokenizers and for greedy decoding of SmolLM2-135M-Instruct
Q4_1 and Gemma 3 270M Q4_K_M (not run in CI; needs llama-cpp-python, which compiles llama.cpp, and the `gguf`
package).

  python -m venv /tmp/llamavenv
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" /tmp/llamavenv/bin/pip install \
      llama-cpp-python==0.3.36 gguf numpy
  /tmp/llamavenv/bin/python scripts/make_llamacpp_goldens.py [smollm2] [--model PATH]
  /tmp/llamavenv/bin/python scripts/make_llamacpp_goldens.py gemma3 [--model PATH]   # tracelm fetch-model gemma3-270m

`smollm2` (the default) writes, under testdata/:
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

`token-roles` writes testdata/tokenizer/tiny_roles.gguf, a hand-written SentencePiece vocabulary whose tokens llama.cpp
treats by their text (end of generation, fill-in-the-middle markers, gpt-oss's channel tokens; see ROLE_TOKENS),
and testdata/goldens/tiny_roles_tokenize.jsonl and tiny_roles_vocab.json, as for SmolLM2.

`gemma3` writes, under testdata/goldens/:
  gemma3_tokenize.jsonl  llama.cpp's tokenization with Gemma 3's SentencePiece vocabulary (262,144 tokens) of the
                         corpus above plus Gemma-specific texts (many languages, whitespace runs, HTML tags, byte
                         fallback, <start_of_turn>/<end_of_turn>/<bos> in the text, a ~10 KB document), in the form
                         of smollm2_tokenize.jsonl.
  gemma3_vocab.json      as smollm2_vocab.json.
  gemma3_greedy.json     as smollm2_greedy.json for 9 prompts tokenized with BOS (the GGUF's add_bos_token), three of
                         them longer than the sliding window and one 20 tokens shorter (decoding crosses it), all
                         prefilled in one batch (n_batch = n_ubatch = n_ctx);
                         plus the llama.cpp version and commit, the context parameters, and the model's hyperparameters
                         as the GGUF states them and as llama.cpp derives them (window, layer pattern, RoPE bases,
                         attention scale).
"""
import argparse
import hashlib
import json
import math
import os
import tempfile

import gguf
import llama_cpp
import numpy as np
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.expanduser("~/.cache/tracelm/models")
GGUF_SHA256 = {
    "smollm2": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "gemma3": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
}
GGUF_FILE = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf"}
LLAMA_CPP_PYTHON = "0.3.36"
# The llama.cpp commit that llama-cpp-python 0.3.36 vendors (its CHANGELOG; the package does not expose it).
LLAMA_CPP_COMMIT = "ggml-org/llama.cpp@0c1e57098"
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


def write_spm_gguf(path, tokens, scores, types, add_space_prefix):
    """A tensor-free SentencePiece vocabulary: ids 0-2 are unknown, BOS and EOS."""
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
    w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({len(tokens)} tokens)")


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
    write_spm_gguf(path, tokens, scores, types, add_space_prefix=True)


# A SentencePiece vocabulary for the tokens llama.cpp treats by their text rather than their stated type: (text,
# stated type). 1 normal, 3 control, 4 user-defined. <|im_end|>, <|fim_pad|> and <|eom_id|> end generation (and
# become control tokens); <|fim_prefix|> becomes control; <|channel|> user-defined; <|end|> does not end generation
# beside <|return|> and <|call|>, nor </s> beside <|tool_response>. The pieces "<x" and "y>" let text merge into the
# control token "<xy>" when special tokens are not parsed.
ROLE_TOKENS = [("<|im_end|>", 4), ("<|fim_prefix|>", 4), ("<|fim_pad|>", 1), ("<|eom_id|>", 1), ("<|channel|>", 3),
               ("<|end|>", 3), ("<|return|>", 3), ("<|call|>", 3), ("</s>", 4), ("<|tool_response>", 4),
               ("<xy>", 3), ("<x", 1), ("y>", 1)]
ROLE_TEXTS = [text for text, _ in ROLE_TOKENS] + [
    "a<|im_end|>b", "<|channel|>analysis<|end|>", "<|fim_prefix|>x<|fim_pad|>", "</s>z", "<xy><x y>", "<<xy>>", ""]


def write_tiny_roles(path):
    tokens, scores, types = ["<unk>", "<bos>", "<eos>"], [0.0, 0.0, 0.0], [2, 3, 3]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    scores += [0.0] * 256
    types += [6] * 256
    for c in sorted(set("".join(text for text, _ in ROLE_TOKENS)) | set("abxyz ")):
        tokens.append(c.replace(" ", "▁"))
        scores.append(-1.0)
        types.append(1)
    for text, token_type in ROLE_TOKENS:
        tokens.append(text)
        scores.append(-0.5)
        types.append(token_type)
    write_spm_gguf(path, tokens, scores, types, add_space_prefix=False)


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


def last_logits(llm):
    """The logits of the last token of the last llm.eval, which llama.cpp keeps whether or not logits_all is set."""
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float64)


def greedy(llm, prompts, eog, add_bos):
    records = []
    for prompt in prompts:
        prompt_ids = llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)
        llm.reset()
        llm.eval(prompt_ids)
        tokens, margins, eog_steps = [], [], []
        for step in range(GREEDY_STEPS):
            logits = last_logits(llm)
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
        print(f"{prompt[:60]!r}... ({len(prompt_ids)} prompt ids): {records[-1]['text']!r} (eog at {eog_steps})")
    return records


def vocab_facts(llm, digest):
    """Vocabulary facts as llama.cpp reads them; eog_ids is llama_vocab_is_eog over the whole vocabulary."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "gguf_sha256": digest,
        "n_vocab": n_vocab,
        "bos_id": llama_cpp.llama_vocab_bos(vocab),
        "eos_id": llama_cpp.llama_vocab_eos(vocab),
        "eot_id": llama_cpp.llama_vocab_eot(vocab),
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "eog_ids": [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)],
    }


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path}")


def smollm2_goldens(model, digest, goldens):
    texts = corpus()
    vocab_llm = Llama(model_path=model, vocab_only=True, verbose=False)
    write_jsonl(os.path.join(goldens, "smollm2_tokenize.jsonl"), tokenize_lines(vocab_llm, texts))
    facts = vocab_facts(vocab_llm, digest)
    write_json(os.path.join(goldens, "smollm2_vocab.json"), facts)
    del vocab_llm

    reader = gguf.GGUFReader(model)
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

    llm = Llama(model_path=model, n_ctx=N_CTX, n_threads=1, n_threads_batch=1, seed=SEED, logits_all=True,
                verbose=False)
    write_json(os.path.join(goldens, "smollm2_greedy.json"), {
        "llama_cpp_python": llama_cpp.__version__,
        "gguf": os.path.basename(model),
        "gguf_sha256": digest,
        "n_ctx": N_CTX,
        "seed": SEED,
        "threads": 1,
        "sampling": "argmax of the logits (lowest id on ties); no repeat penalty; no stop on end-of-generation",
        "prompt_tokenization": "llama.cpp, add_bos=False (the GGUF's add_bos_token is false), special=True",
        "steps": GREEDY_STEPS,
        "records": greedy(llm, GREEDY_PROMPTS, set(facts["eog_ids"]), add_bos=False),
    })


def gemma_chat(user):
    return f"<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n"


GEMMA_TEXTS = [
    # languages
    "Die Katze schläft auf dem warmen Fensterbrett, während draußen der Regen fällt.",
    "Größenordnung, Straße, Übermäßig, ÄÖÜ äöü ß ẞ",
    "Le garçon a mangé une crème brûlée à l'hôtel près de la forêt.",
    "Où est la bibliothèque ? « Là-bas », répondit-elle.",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "東京は日本の首都です。ひらがな、カタカナ、漢字を使います。",
    "서울은 대한민국의 수도이며, 한글은 세종대왕이 만들었습니다.",
    "اللغة العربية جميلة، وتكتب من اليمين إلى اليسار.",
    "हिन्दी भारत की राजभाषा है और देवनागरी लिपि में लिखी जाती है।",
    "Москва — столица России. Ёлка, щётка, объём.",
    "¿Dónde está el baño? ¡Muchas gracias!", "Olá, como você está? Coração, ação, pão.",
    "Türkçe: ğüşöçı İĞÜŞÖÇ", "Tiếng Việt có dấu: Đường phố Hà Nội", "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Ελληνικά: Καλημέρα κόσμε", "Українська: Привіт, світе! Ґанок, їжак, єнот.", "Polski: zażółć gęślą jaźń",
    "שלום עולם, עברית נכתבת מימין לשמאל", "Kiswahili: Habari ya asubuhi?", "ქართული ენა", "Հայերեն լեզու",
    "বাংলা ভাষা", "தமிழ் மொழி", "ᠮᠣᠩᠭᠣᠯ", "ትግርኛ", "ꦗꦮ", "Mixed: English, 中文, 日本語, 한국어, العربية, हिन्दी.",
    # emoji and symbols
    "😀😃😄😁 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵 🫠🫡🪿", "∑∫√∞≈≠≤≥ ∀x∈ℝ: x²≥0", "← ↑ → ↓ ⇒ ⇔", "♠♣♥♦ ☀☁☂ ✓✗",
    # byte fallback: characters without a piece of their own
    "𠀀𠀁𠀂 𪚥 𰻞", "\ue000\ue001\uf8ff", "\U000f0000\U0010fffd", "\x01\x02\x03\x1b[0m\x7f", "𓀀𓀁𓂀 𒀀 𐎀",
    "ꙮ ꧁꧂ ⸻", "\u200b\u200c\u200d\u2060\ufeff", "\u0301\u0302 combining marks alone",
    # whitespace runs: Gemma has user-defined tokens for 2-31 spaces and 1-31 newlines or tabs
    *[" " * n for n in (1, 2, 3, 7, 31, 32, 33, 45, 64, 100)],
    *["\n" * n for n in (1, 2, 3, 30, 31, 32, 40, 70)],
    *["\t" * n for n in (1, 2, 4, 31, 32, 40)],
    "a" + " " * 35 + "b", "x\n\n\ny", "\t\tindented\n\t\t\tmore", " \n \n\t \t", "  \n\n  \t\t  ", "\r\n\r\n\r",
    "word \n\n\n   word\t\t\tword", " leading space", "trailing space ", "  two leading", "\u00a0\u00a0nbsp",
    "\u3000\u3000ideographic", "end\n",
    # HTML tags, which are user-defined tokens
    "<table><tr><td>1</td><td>2</td></tr></table>", "<b>bold</b> <i>italic</i> <s>strike</s> <u>u</u>",
    "<h1>Title</h1>\n<p>Paragraph</p>", "<div class=\"box\"><span>x</span></div>", "<a href='https://x.org'>link</a>",
    "<code>int x;</code>", "<blockquote>quote</blockquote>", "<s>", "</s>", "</s>hello</s>", "<<s>>", "<td ",
    # special and control tokens written in the text
    gemma_chat("Hello!"), "<start_of_turn>model\nHi there.<end_of_turn>\n",
    "<bos>text<eos>", "<bos><bos>", "<pad><unk><mask>", "<unused0><unused6241>", "[multimodal]",
    "<start_of_image><end_of_image>", "text<end_of_turn>more", "<start_of_turn", "<<end_of_turn>>",
    "< start_of_turn>", "<end_of_turn><start_of_turn>", "<0x41><0x0A>", "<start_of_turn>user\n\n\n  hi  <end_of_turn>",
    # code
    "import numpy as np\n\nclass Model:\n    def __init__(self):\n        self.w = np.zeros((3, 3))\n",
    "#include <iostream>\nint main() {\n\tstd::cout << \"hi\" << std::endl;\n\treturn 0;\n}\n",
    "fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}', "| a | b |\n|---|---|\n| 1 | 2 |",
    "SELECT name, COUNT(*) FROM t GROUP BY name HAVING COUNT(*) > 1;", "$ ls -la | grep '^d' && echo ok",
]


def gemma_document():
    """A ~10 KB multilingual document: the Gemma texts above, several times over, one per line."""
    parts, size = [], 0
    while size < 10000:
        for t in GEMMA_TEXTS:
            parts.append(t)
            size += len(t.encode("utf-8")) + 1
    return "\n".join(parts)


LIGHTHOUSE_WORDS = {
    "keeper": ["Anna", "Bram", "Clara", "Dmitri", "Elif", "Farah", "Goran", "Hana"],
    "island": ["Mara", "Tolve", "Skerry", "Ardel", "Fenn", "Orla"],
    "wind": ["north", "north-east", "east", "south-west", "west"],
    "sea": ["calm", "choppy", "rough", "glassy"],
}


def lighthouse_log(n):
    """Line n of a made-up lighthouse log: varied but regular text that a long prompt can be made of."""
    w = LIGHTHOUSE_WORDS
    return (f"Day {n}: {w['keeper'][n % 8]} kept the light on {w['island'][(n * 7) % 6]} and counted "
            f"{(n * 37) % 90 + 3} ships; the wind came from the {w['wind'][(n * 3) % 5]} and the sea was "
            f"{w['sea'][(n * 5) % 4]}.")


LOG_WORDS = " ".join(lighthouse_log(n) for n in range(100)).split(" ")


def python_function(n):
    return (f"def scaled_sum_{n}(values, factor={n % 7 + 2}):\n"
            f"    \"\"\"Return the sum of values, each multiplied by {n % 7 + 2}, plus {n}.\"\"\"\n"
            f"    total = {n}\n    for v in values:\n        total += v * factor\n    return total\n\n")


def long_prompt(llm, unit, wrap, min_tokens):
    """wrap(units 0..k joined) for the least k whose BOS + tokens reach min_tokens."""
    body = ""
    for n in range(100000):
        body += unit(n)
        prompt = wrap(body)
        if len(llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)) >= min_tokens:
            return prompt
    raise RuntimeError("unit too short")


def gemma_greedy_prompts(llm, window):
    return [
        "The capital of France is",
        "def fibonacci(n):\n",
        "Der schnellste Weg von Berlin nach München ist",
        gemma_chat("What is the capital of France?"),
        gemma_chat("Write a haiku about the sea."),
        # Longer than the window, so that local layers drop their first keys in prefill and in decode.
        long_prompt(llm, lambda n: lighthouse_log(n) + "\n", lambda b: b, window + 88),
        long_prompt(llm, lambda n: lighthouse_log(n) + "\n",
                    lambda b: gemma_chat("Here is my lighthouse log:\n" + b + "\nWhich keeper counted the most ships?"),
                    window + 388),
        long_prompt(llm, python_function, lambda b: b, 3 * window - 36),
        # Shorter than the window by less than the 32 steps, word by word: decoding crosses it.
        long_prompt(llm, lambda n: (" " if n else "") + LOG_WORDS[n], lambda b: b, window - 20),
    ]


def gguf_hparams(model):
    """The gemma3.* keys as the GGUF states them."""
    reader = gguf.GGUFReader(model)
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("gemma3."):
            value = field.contents()
            out[key] = value if not isinstance(value, float) else round(value, 12)
    return out


def llama_cpp_hparams(llm, n_layer):
    """What llama.cpp derives for gemma3 (src/models/gemma3.cpp, llama-hparams.cpp at LLAMA_CPP_COMMIT): the GGUF has
    no layer pattern, local RoPE base or attention scale, so llama.cpp's defaults apply."""
    model = llm.model
    n_embd = llama_cpp.llama_model_n_embd(model)
    n_head = llama_cpp.llama_model_n_head(model)
    head_dim = int(llm.metadata.get("gemma3.attention.key_length", n_embd // n_head))
    pattern = 6  # load_swa_pattern(ml, 6) without gemma3.attention.sliding_window_pattern in the file
    return {
        "n_layer": llama_cpp.llama_model_n_layer(model),
        "n_embd": n_embd,
        "n_head": n_head,
        "n_head_kv": llama_cpp.llama_model_n_head_kv(model),
        "head_dim": head_dim,
        "n_swa": llama_cpp.llama_model_n_swa(model),
        "swa_type": "standard: query at p1 does not see key at p0 when p1 - p0 >= n_swa",
        "swa_pattern": pattern,
        "is_swa_by_layer": [il % pattern < pattern - 1 for il in range(n_layer)],
        "rope_freq_base_global": float(llm.metadata.get("gemma3.rope.freq_base", 10000.0)),
        "rope_freq_base_swa": float(llm.metadata.get("gemma3.rope.freq_base_swa", 10000.0)),
        "rope_freq_scale_train": llama_cpp.llama_model_rope_freq_scale_train(model),
        "rope_type": {0: "norm", 2: "neox"}.get(llama_cpp.llama_model_rope_type(model), "other"),
        "attention_scale": 1.0 / math.sqrt(head_dim),
        "query_pre_attn_scalar": "absent from the GGUF; llama.cpp scales queries by 1/sqrt(head_dim) (not the 27B)",
        "final_logit_softcapping": float(llm.metadata.get("gemma3.final_logit_softcapping", 0.0)),
        "embedding_scale": math.sqrt(n_embd),
        "ffn": "GELU (tanh approximation) gated, as ggml_gelu",
        "norms": "RMSNorm with the GGUF's weights (the converter stored 1 + w); attn_norm, q/k norm, attn_post_norm, "
                 "ffn_norm, ffn_post_norm, output_norm",
        "tied_embeddings": "output.weight" not in [t.name for t in gguf.GGUFReader(llm.model_path).tensors],
    }


def gemma3_goldens(model, digest, goldens):
    vocab_llm = Llama(model_path=model, vocab_only=True, verbose=False)
    texts = corpus()
    texts += [t for t in GEMMA_TEXTS + [gemma_document()] if t not in texts]
    write_jsonl(os.path.join(goldens, "gemma3_tokenize.jsonl"), tokenize_lines(vocab_llm, texts))
    facts = vocab_facts(vocab_llm, digest)
    write_json(os.path.join(goldens, "gemma3_vocab.json"), facts)
    del vocab_llm

    # One batch for every prompt: n_batch = n_ubatch = n_ctx.
    llm = Llama(model_path=model, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=1, n_threads_batch=1,
                seed=SEED, logits_all=False, verbose=False)
    hparams = gguf_hparams(model)
    derived = llama_cpp_hparams(llm, hparams["gemma3.block_count"])
    prompts = gemma_greedy_prompts(llm, derived["n_swa"])
    cp = llm.context_params
    write_json(os.path.join(goldens, "gemma3_greedy.json"), {
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "gguf": os.path.basename(model),
        "gguf_sha256": digest,
        "n_ctx": cp.n_ctx,
        "n_batch": cp.n_batch,
        "n_ubatch": cp.n_ubatch,
        "swa_full": bool(cp.swa_full),
        "flash_attn": "disabled",
        "kv_type": "f16",
        "seed": SEED,
        "threads": 1,
        "sampling": "argmax of the logits (lowest id on ties); no repeat penalty; no stop on end-of-generation",
        "prompt_tokenization": "llama.cpp, add_bos=True (the GGUF's add_bos_token is true), special=True",
        "steps": GREEDY_STEPS,
        "gguf_metadata": hparams,
        "llama_cpp_hparams": derived,
        "records": greedy(llm, prompts, set(facts["eog_ids"]), add_bos=True),
    })


def token_roles_goldens(goldens):
    path = os.path.join(ROOT, "testdata/tokenizer/tiny_roles.gguf")
    write_tiny_roles(path)
    llm = Llama(model_path=path, vocab_only=True, verbose=False)
    write_jsonl(os.path.join(goldens, "tiny_roles_tokenize.jsonl"), tokenize_lines(llm, ROLE_TEXTS))
    write_json(os.path.join(goldens, "tiny_roles_vocab.json"), vocab_facts(llm, sha256(path)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("which", nargs="?", choices=sorted(GGUF_FILE) + ["token-roles"], default="smollm2")
    ap.add_argument("--model", help="the GGUF file (default: the tracelm model cache)")
    args = ap.parse_args()
    if llama_cpp.__version__ != LLAMA_CPP_PYTHON:
        raise SystemExit(f"llama-cpp-python {llama_cpp.__version__}; these goldens pin {LLAMA_CPP_PYTHON}")
    if args.which == "token-roles":
        token_roles_goldens(os.path.join(ROOT, "testdata/goldens"))
        return
    model = args.model or os.path.join(MODELS_DIR, GGUF_FILE[args.which])
    digest = sha256(model)
    if digest != GGUF_SHA256[args.which]:
        raise SystemExit(f"{model}: sha256 {digest}, expected {GGUF_SHA256[args.which]}")
    goldens = os.path.join(ROOT, "testdata/goldens")
    {"smollm2": smollm2_goldens, "gemma3": gemma3_goldens}[args.which](model, digest, goldens)


if __name__ == "__main__":
    main()
