#!/usr/bin/env python3
"""How many siblings name each module of a folder of kiln-store's sources.

For a folder (a module with children), each child module (a file, or a
folder counted as one) and the folder's own `mod.rs` is a node; a child
names another when its text has `super::NAME`, `crate::PATH::NAME`, or (for
the `mod.rs` node) uses an item `mod.rs` defines or re-exports through
`super::ITEM` / `super::{.., ITEM, ..}` / `crate::PATH::ITEM`. Inside a
child's `#[cfg(test)]` module, `super::super::` plays the part of `super::`.

    fan_in.py SRC_DIR FOLDER [--no-tests]

`--no-tests` leaves out every `#[cfg(test)]` module and test-only file.
Prints each node with its count and the limit (a third of its siblings).
"""

import os
import re
import sys


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def split_tests(text):
    """(production text, test text): `#[cfg(test)] mod X { ... }` blocks
    go to the second."""
    prod, tests = [], []
    pos = 0
    for match in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s+\w+\s*\{", text):
        if match.start() < pos:
            continue
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        prod.append(text[pos:match.start()])
        tests.append(text[match.start():i])
        pos = i
    prod.append(text[pos:])
    return "".join(prod), "".join(tests)


def group_items(text, prefix):
    """The first segment of every path after `prefix` (e.g. `super::`)."""
    names = []
    for match in re.finditer(re.escape(prefix) + r"(\{[^;]*?\}|\w+)", text):
        found = match.group(1)
        if found.startswith("{"):
            depth, item, items = 0, "", []
            for ch in found[1:-1]:
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                if ch == "," and depth == 0:
                    items.append(item)
                    item = ""
                else:
                    item += ch
            items.append(item)
            names += [re.split(r"::|\s", it.strip())[0] for it in items if it.strip()]
        else:
            names.append(found)
    return names


def defined_in(text):
    names = set(re.findall(r"\b(?:struct|enum|fn|type|const|static|trait|union|macro_rules!)\s+(\w+)", text))
    for match in re.finditer(r"\buse\s+[^;]*;", text):
        use = match.group(0)
        for alias in re.findall(r"\bas\s+(\w+)", use):
            names.add(alias)
        for leaf in re.findall(r"(\w+)\s*(?=[,}]|;)", use):
            names.add(leaf)
    return names


def main():
    src, folder = sys.argv[1], sys.argv[2].strip("/")
    no_tests = "--no-tests" in sys.argv
    base = os.path.join(src, folder) if folder not in ("", ".") else src
    crate_path = "crate::" + folder.replace("/", "::") + "::" if folder not in ("", ".") else "crate::"
    parent = os.path.join(base, "mod.rs") if folder not in ("", ".") else os.path.join(src, "lib.rs")
    parent_text = strip_comments(open(parent).read())
    test_only = set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+);", parent_text))
    nodes = {}
    for entry in sorted(os.listdir(base)):
        path = os.path.join(base, entry)
        if entry.endswith(".rs") and entry not in ("mod.rs", "lib.rs"):
            nodes[entry[:-3]] = [path]
        elif os.path.isdir(path) and os.path.exists(os.path.join(path, "mod.rs")):
            nodes[entry] = [
                os.path.join(root, name)
                for root, _, names in os.walk(path)
                for name in names
                if name.endswith(".rs")
            ]
    if no_tests:
        nodes = {name: files for name, files in nodes.items() if name not in test_only}
    parent_node = "mod.rs" if folder not in ("", ".") else "lib.rs"
    parent_items = defined_in(split_tests(parent_text)[0] if no_tests else parent_text) - set(nodes)
    nodes[parent_node] = [parent]
    named_by = {name: set() for name in nodes}
    for name, files in nodes.items():
        for path in files:
            prod, tests = split_tests(strip_comments(open(path).read()))
            # A file inside a child folder reaches its siblings with more supers;
            # `crate::PATH::` reaches them from anywhere.
            depth = os.path.relpath(os.path.dirname(path), base).count(os.sep) + (
                0 if os.path.dirname(path) == base else 1
            )
            texts = [(prod, "super::" * (depth + 1))]
            if not no_tests:
                texts.append((tests, "super::" * (depth + 2)))
            for text, sup in texts:
                # `super::super::x` must not also read as `super::x`.
                text_super = re.sub(r"(?<!super::)" + re.escape(sup), "\0", text)
                found = group_items(text_super, "\0") + group_items(text, crate_path)
                for item in found:
                    if item in nodes and item != name:
                        named_by[item].add(name)
                    elif item in parent_items and name != parent_node:
                        named_by[parent_node].add(name)
    siblings = len(nodes) - 1
    limit = siblings / 3
    worst = 0
    for name in sorted(named_by, key=lambda n: -len(named_by[n])):
        count = len(named_by[name])
        worst = max(worst, count)
        mark = "OVER" if count > limit else ""
        print(f"{name:16} {count:3} / {siblings} {mark}  {' '.join(sorted(named_by[name]))}")
    print(f"limit {limit:.1f}; most {worst}")


main()
