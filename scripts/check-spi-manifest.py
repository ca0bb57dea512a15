#!/usr/bin/env python3
"""Checks .spi.yml against what the Swift Package Index reads (its SPIManifest package): at
most 1,000 bytes (a larger file is ignored), only the keys it decodes, an `image:` only from
the Index's own registry of images, and documentation targets that are library targets of this
package with a DocC catalog. Run by `make test`."""
import json
import os
import re
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
path = os.path.join(root, ".spi.yml")
data = open(path, "rb").read()
problems = []
if len(data) > 1000:
    problems.append(f"{len(data)} bytes: the Index ignores a .spi.yml over 1,000 bytes")
known = {"version", "metadata", "authors", "builder", "configs", "platform", "swift_version", "image", "scheme", "target",
         "documentation_targets", "custom_documentation_parameters", "external_links", "documentation"}
targets = []
in_targets = False
for line in data.decode("utf-8").splitlines():
    if not line.strip() or line.lstrip().startswith("#"):
        continue
    key = re.match(r"^\s*(?:-\s*)?([A-Za-z_]+):", line)
    if key:
        in_targets = key.group(1) == "documentation_targets"
        if key.group(1) not in known:
            problems.append(f"'{key.group(1)}' is no key the Index reads")
        if key.group(1) == "image" and "/spi-images:" not in line:
            problems.append(f"the Index builds only in its own images (spi-images), not {line.split(':', 1)[1].strip()}")
        if key.group(1) == "platform" and line.split(":", 1)[1].strip() not in ("linux", "ios", "macos-spm", "macos-xcodebuild", "tvos", "visionos", "watchos"):
            problems.append(f"unknown platform in '{line.strip()}'")
        continue
    item = re.match(r"^\s*-\s*([A-Za-z_][A-Za-z0-9_]*)\s*(#.*)?$", line)
    if in_targets and item:
        targets.append(item.group(1))
package = json.loads(subprocess.run(["swift", "package", "dump-package"], cwd=root, capture_output=True, text=True, check=True).stdout)
library_targets = {t for p in package["products"] if "library" in p["type"] for t in p["targets"]}
for target in targets:
    if target not in library_targets:
        problems.append(f"documentation target '{target}' is no library target of the package")
    elif not os.path.isdir(os.path.join(root, "Sources", target, f"{target}.docc")):
        problems.append(f"documentation target '{target}' has no DocC catalog")
if not targets:
    problems.append("no documentation_targets")
if problems:
    sys.exit("check-spi-manifest: .spi.yml: " + "; ".join(problems))
print(f"check-spi-manifest: .spi.yml ({len(data)} bytes) documents {', '.join(targets)}")
