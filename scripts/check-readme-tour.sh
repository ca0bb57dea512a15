#!/usr/bin/env bash
# The README's tour, as printed, is an app's main.swift: a fresh executable package that adds the
# repository by URL as the README shows (a fresh clone of this checkout, on its branch main, no
# trait) and depends on the products the tour imports builds it with warnings as errors, then
# runs it (60 s at the most) and checks that it exits 0 having printed its three ticks. Run by
# `make test`.
set -euo pipefail
source "$(dirname "$0")/consumer-common.sh"
app="$work/Tour"
mkdir -p "$app/Sources/Tour"

# The code block of the README's "A tour" section, verbatim, and the modules it imports.
imports="$(python3 - "$root/README.md" "$app/Sources/Tour/main.swift" <<'EXTRACT'
import re, sys
readme, main = sys.argv[1], sys.argv[2]
text = open(readme, encoding="utf-8").read()
section = text.split("\n## A tour\n", 1)
if len(section) != 2:
    sys.exit("check-readme-tour: the README has no '## A tour' section")
block = re.match(r"\s*```swift\n(.*?)```", section[1], re.S)
if not block:
    sys.exit("check-readme-tour: the README's tour section does not open with a Swift code block")
open(main, "w", encoding="utf-8").write(block.group(1))
modules = re.findall(r"^import (\w+)$", block.group(1), re.M)
if not modules:
    sys.exit("check-readme-tour: the tour imports nothing")
print(" ".join(modules))
EXTRACT
)"
products=""
for module in $imports; do
    products="$products                .product(name: \"$module\", package: \"TimerKit\"),
"
done
cat > "$app/Package.swift" <<MANIFEST
// swift-tools-version: 6.2
import PackageDescription
let package = Package(
    name: "Tour",
    dependencies: [.package(url: "$url", $requirement)],
    targets: [
        .executableTarget(
            name: "Tour",
            dependencies: [
$products            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        )
    ]
)
MANIFEST
echo "check-readme-tour: the README's tour ($(wc -l < "$app/Sources/Tour/main.swift") lines, importing $imports) as an app's main.swift"
(cd "$app" && swift package --scratch-path "$scratch_plain" resolve >/dev/null)
bin="$(build_consumer "$app" "$scratch_plain")"
status=0
timeout 60 "$bin/Tour" > "$work/tour.out" 2>&1 || status=$?
cat "$work/tour.out"
if [ "$status" -ne 0 ]; then
    echo "check-readme-tour: the tour exited with status $status (124: still running after 60 s)" >&2
    exit 1
fi
if [ "$(grep -c '^tick [012]$' "$work/tour.out")" -ne 3 ]; then
    echo "check-readme-tour: expected the tour's three ticks, 'tick 0' to 'tick 2'" >&2
    exit 1
fi
echo "check-readme-tour: the tour built with warnings as errors and ran to its end"
