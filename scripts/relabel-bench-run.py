#!/usr/bin/env python3
"""Renames backends in a run saved by `timerkit-bench --json` (BENCHMARKS.json, or a run of your
own to `compare` with a newer one): each result's "backend" OLD becomes NEW, and the reasons
`left_out` gives by name too. The file is edited as text, so every figure stays byte for byte as
measured; the script checks that nothing but those names changed.

    python3 scripts/relabel-bench-run.py BENCHMARKS.json uring=io_uring uring-raw=io_uring-raw
"""
import json
import re
import sys

if len(sys.argv) < 3 or any("=" not in pair for pair in sys.argv[2:]):
    sys.exit("usage: relabel-bench-run.py RUN.json OLD=NEW [OLD=NEW ...]")
path = sys.argv[1]
renames = dict(pair.split("=", 1) for pair in sys.argv[2:])
text = open(path, encoding="utf-8").read()
before = json.loads(text)

def rename(match):
    return f'{match.group(1)}{json.dumps(renames[json.loads(match.group(2))])}'

names = "|".join(re.escape(json.dumps(old)) for old in renames)
# A result's backend, and a key of left_out (a name followed by a colon).
text = re.sub(rf'("backend" : )({names})', rename, text)
text = re.sub(rf'(\n\s*)({names})(?= : )', rename, text)
after = json.loads(text)

def relabelled(value, key=None):
    if isinstance(value, dict):
        return {(renames.get(k, k) if key == "left_out" else k): relabelled(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [relabelled(v) for v in value]
    return renames.get(value, value) if key == "backend" else value

if relabelled(before) != after:
    sys.exit("relabel-bench-run: the edit changed more than the names; nothing written")
open(path, "w", encoding="utf-8").write(text)
print(f"relabel-bench-run: {path}: {', '.join(f'{old} -> {new}' for old, new in renames.items())}")
