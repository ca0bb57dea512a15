#!/usr/bin/env python3
"""Prints the latest released version in CHANGELOG.md: the first "## [X.Y.Z]" heading (the
"Unreleased" section has none). The consumer checks tag their clone of the repository with it,
and the README's dependency line must ask for it."""
import re
import sys

text = open(sys.argv[1], encoding="utf-8").read()
found = re.search(r"^## \[(\d+\.\d+\.\d+)\]", text, re.M)
if not found:
    sys.exit("release-version: CHANGELOG.md names no released version (a '## [X.Y.Z]' heading)")
print(found.group(1))
