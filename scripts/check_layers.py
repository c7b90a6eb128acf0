#!/usr/bin/env python3
"""Fails on any #include in src/ that points up or sideways: the allowed includes of each folder are the table in
docs/architecture.md (columns: layer, folder, may include). A folder's rule is that of the longest listed folder
that contains it; an include "a/b/c.h" is allowed when a listed prefix ("a" or "a/b") matches it.

  check_layers.py [REPO]        check REPO (default: this script's repository)
  check_layers.py --self-test   show that a wrong include is caught and a right one is not
"""
import pathlib
import re
import sys
import tempfile

import repo_check

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_rules(repo):
    rules = {}
    text = (repo / "docs" / "architecture.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("src/"):
            continue
        folder = cells[1].rstrip("/")[len("src/"):]
        rules[folder] = [p.strip().strip("`").rstrip("/") for p in cells[2].split(",") if p.strip()]
    if not rules:
        sys.exit("check_layers: no layer table in docs/architecture.md")
    return rules


def rule_for(rules, rel_dir):
    best = None
    for folder in rules:
        if (rel_dir == folder or rel_dir.startswith(folder + "/")) and (best is None or len(folder) > len(best)):
            best = folder
    return best


def check(repo):
    rules = read_rules(repo)
    src = repo / "src"
    errors = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu", ".cuh", ".inc") or not path.is_file():
            continue
        rel = path.relative_to(src)
        folder = rule_for(rules, str(rel.parent))
        if folder is None:
            errors.append(f"src/{rel}: its folder is in no layer of docs/architecture.md")
            continue
        for inc in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            target = inc if "/" in inc else str(rel.parent / inc)
            if not any(target == p or target.startswith(p + "/") for p in rules[folder]):
                errors.append(f"src/{rel}: includes \"{inc}\", which layer '{folder}' may not include "
                              f"(allowed: {', '.join(rules[folder])})")
    return errors


def self_test():
    with tempfile.TemporaryDirectory() as d:
        repo = pathlib.Path(d)
        (repo / "docs").mkdir()
        (repo / "docs" / "architecture.md").write_text(
            "| layer | folder | may include |\n|---|---|---|\n"
            "| runtime | `src/runtime` | runtime |\n| model | `src/model` | runtime, model |\n")
        for f in ("runtime", "model"):
            (repo / "src" / f).mkdir(parents=True)
        (repo / "src" / "runtime" / "a.h").write_text("#pragma once\n")
        (repo / "src" / "model" / "m.cpp").write_text('#include "runtime/a.h"\n#include <vector>\n')
        assert check(repo) == [], check(repo)
        (repo / "src" / "runtime" / "b.cpp").write_text('#include "model/m.h"\n')
        errors = check(repo)
        assert len(errors) == 1 and "src/runtime/b.cpp" in errors[0] and "model/m.h" in errors[0], errors
    print("check_layers self-test: an upward include is reported, downward ones are not")


if __name__ == "__main__":
    repo_check.main(check, self_test,
                    "check_layers: {n} include(s) break the layering",
                    "check_layers: every include in src/ points down")
