#!/usr/bin/env python3
"""Fails on any repository path named in README.md or docs/*.md that does not exist, so that a moved or deleted file
shows up as a failing test instead of a stale doc.

What counts as a path: markdown link targets, and the words of inline code, fenced code and prose that look like
one. A word is checked when it
  - starts with a top-level entry of the repository (`src/...`, `tests/...`, `.ci/run`): it must exist from the root;
  - has another folder part and ends in a known extension or '/' (`backends/cpu/ops/matmul.cpp`, `ops/`): a path
    given relative to the folder the text is about, so it must be the tail of an existing path;
  - is a bare file name with a source extension (`quant_x86.inc`): some file must have that name.
Not checked: URLs, absolute and home paths (/tmp, ~, $VARS), globs (*), placeholders (<name>, FILE), flags and
assignments (--flag, -DX=ON), build outputs (build/, build-*/), bare data file names (`config.json` names a file the
user has), and slashed names without an extension (`f32/bf16`, `text/event-stream`, tensor names). Brace patterns
(`engine.{h,cpp}`) are expanded. Link targets are paths whatever they look like, relative to the doc's folder or the
root. A path that leads out of the repository (`../shared/...`) is reported too: docs name only what the repository
holds.

  check_doc_paths.py [REPO]        check REPO (default: this script's repository)
  check_doc_paths.py --self-test   show that a missing path is caught and existing ones are not
"""
import os
import pathlib
import re
import sys
import tempfile

import repo_check

EXTENSIONS = (".h", ".cpp", ".cu", ".cuh", ".inc", ".py", ".sh", ".md", ".txt", ".json", ".cmake")
# A bare name with one of these names a source file; bare .md/.txt/.json names are kinds of user files.
SOURCE_EXTENSIONS = (".h", ".cpp", ".cu", ".cuh", ".inc", ".py", ".sh", ".cmake")
# Project names that look like file names.
NOT_PATHS = {"llama.cpp", "ik_llama.cpp"}

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)((?:(?!\n\s*\n).)+?)\1", re.S)  # may wrap lines, never a paragraph
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
PATH_CHARS = re.compile(r"^[A-Za-z0-9_.+@/{},-]+$")
BARE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
LEADING = "([{<\"'`|"
TRAILING = ")]}>\"'`,;:.!?|"


def expand_braces(word):
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [w for alt in m.group(1).split(",") for w in expand_braces(word[:m.start()] + alt + word[m.end():])]


def strip_wrappers(word):
    # Keep a closing brace that ends a brace pattern; otherwise punctuation around a word is prose, not path.
    while word and word[0] in LEADING and not (word[0] == "{" and "}" in word):
        word = word[1:]
    while word and word[-1] in TRAILING and not (word[-1] == "}" and "{" in word):
        word = word[:-1]
    return word


class Tree:
    """The repository's files and folders, without .git and build outputs."""

    def __init__(self, repo):
        self.repo = repo
        self.paths = set()
        self.dirs = set()
        for root, dirs, files in os.walk(repo):
            rel = pathlib.Path(root).relative_to(repo).as_posix()
            dirs[:] = [d for d in dirs if d not in (".git", "__pycache__") and not (rel == "." and is_build_output(d))]
            for d in dirs:
                p = d if rel == "." else f"{rel}/{d}"
                self.paths.add(p)
                self.dirs.add(p)
            for f in files:
                self.paths.add(f if rel == "." else f"{rel}/{f}")
        self.top = {p for p in self.paths if "/" not in p}

    def has(self, rel, want_dir):
        return rel in (self.dirs if want_dir else self.paths)

    def has_tail(self, tail, want_dir):
        pool = self.dirs if want_dir else self.paths
        return tail in pool or any(p.endswith("/" + tail) for p in pool)


def is_build_output(first):
    return first == "build" or first.startswith("build-")


def word_to_check(word, tree):
    """The path a word of text names, with how to look it up, or None when the word is not a path."""
    word = strip_wrappers(word)
    if not word or word in NOT_PATHS or "://" in word or word.startswith(("-", "/", "~", "$", "mailto:")):
        return None
    if not PATH_CHARS.match(word) or word.count("{") != word.count("}"):
        return None  # placeholders (<name>, *, =, $) and expressions
    first = word.split("/", 1)[0]
    if is_build_output(first) or word.startswith("../"):
        return "outside" if word.startswith("../") else None
    if "/" in word:
        if first in tree.top:
            return "root"
        if word.endswith("/") or word.endswith(EXTENSIONS):
            return "tail"
        return None
    if BARE_NAME.match(word) and word.endswith(SOURCE_EXTENSIONS):
        return "tail"
    return None


def exists(tree, path, how, doc_dir=None):
    want_dir = path.endswith("/")
    rel = path.rstrip("/")
    if how == "link":
        for base in ([doc_dir] if doc_dir else []) + [tree.repo]:
            target = (base / rel).resolve()
            try:
                inside = target.relative_to(tree.repo.resolve()).as_posix()
            except ValueError:
                continue
            if inside == "." or tree.has(inside, want_dir) or (not want_dir and tree.has(inside, True)):
                return True
        return False
    if how == "root":
        return tree.has(rel, want_dir) or (not want_dir and tree.has(rel, True))
    return tree.has_tail(rel, want_dir) or (not want_dir and tree.has_tail(rel, True))


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def blank(text, start, end):
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def check_doc(tree, doc):
    rel_doc = doc.relative_to(tree.repo).as_posix()
    text = doc.read_text(encoding="utf-8")
    found = []  # (offset, word, how)

    # Fenced blocks are commands and listings: their words are checked like prose, but backticks and brackets in
    # them are not markdown.
    lines = text.split("\n")
    fenced = [False] * len(lines)
    inside = False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            fenced[i] = True
            inside = not inside
        else:
            fenced[i] = inside
    markdown, offset = text, 0
    for i, line in enumerate(lines):
        if fenced[i]:
            for m in re.finditer(r"\S+", line):
                found.append((offset + m.start(), m.group(), None))
            markdown = blank(markdown, offset, offset + len(line))
        offset += len(line) + 1

    # Code spans first: a bracket inside one is not a link.
    for m in list(CODE_SPAN.finditer(markdown))[::-1]:
        for w in re.finditer(r"\S+", m.group(2)):
            found.append((m.start(2) + w.start(), w.group(), None))
        markdown = blank(markdown, m.start(), m.end())
    for m in list(LINK.finditer(markdown))[::-1]:
        target = m.group(1).split("#", 1)[0]
        if target and "://" not in target and not target.startswith("mailto:"):
            found.append((m.start(1), target, "link"))
        markdown = blank(markdown, m.start(1), m.end(1))
    for w in re.finditer(r"\S+", markdown):
        found.append((w.start(), w.group(), None))

    errors = []
    for off, word, how in sorted(found):
        if how is None:
            how = word_to_check(word, tree)
            word = strip_wrappers(word)
        if how is None:
            continue
        where = f"{rel_doc}:{line_of(text, off)}"
        if how == "outside":
            errors.append(f"{where}: '{word}' is outside the repository")
            continue
        for path in expand_braces(word):
            if not exists(tree, path, how, doc.parent):
                errors.append(f"{where}: '{path}' does not exist" + (" (named as a tail of a path)" if how == "tail" else ""))
    return errors


def check(repo):
    repo = pathlib.Path(repo).resolve()
    tree = Tree(repo)
    docs = [repo / "README.md"] + sorted((repo / "docs").glob("*.md"))
    errors = []
    for doc in docs:
        if doc.is_file():
            errors += check_doc(tree, doc)
    return errors


def self_test():
    with tempfile.TemporaryDirectory() as d:
        repo = pathlib.Path(d)
        for f in ("src/engine/engine.h", "src/engine/engine.cpp", "scripts/run.sh", "docs/other.md"):
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            (repo / f).write_text("")
        (repo / "README.md").write_text(
            "See [the other doc](docs/other.md), `src/engine/engine.{h,cpp}`, `bash scripts/run.sh --fast`,\n"
            "`engine.cpp`, `engine/`, `config.json`, `/tmp/x`, `tests/<area>/`, `build/tracelm`, llama.cpp, f32/bf16\n"
            "and https://example.com/a.md.\n\n```sh\nbash scripts/run.sh\n```\n")
        (repo / "docs" / "a.md").write_text("[up](../README.md) and [other](other.md#part) and `src/engine/`\n")
        assert check(repo) == [], check(repo)
        (repo / "docs" / "b.md").write_text("intro\n\nbuilt from `src/engine/gone.cpp` and [x](missing.md),\n"
                                            "```sh\nbash scripts/moved.sh\n```\nsee `../shared/notes.md`\n")
        errors = check(repo)
        assert len(errors) == 4, errors
        assert "docs/b.md:3: 'src/engine/gone.cpp'" in errors[0] and "docs/b.md:3: 'missing.md'" in errors[1], errors
        assert "docs/b.md:5: 'scripts/moved.sh'" in errors[2], errors
        assert "docs/b.md:7: '../shared/notes.md' is outside the repository" in errors[3], errors
    print("check_doc_paths self-test: missing paths are reported with file:line, existing ones are not")


if __name__ == "__main__":
    repo_check.main(check, self_test,
                    "check_doc_paths: {n} path(s) named in README.md and docs/*.md do not exist",
                    "check_doc_paths: every path named in README.md and docs/*.md exists")
