#!/usr/bin/env bash
# A backend outside this repository passes TimerKit's contract through the TimerKitConformance
# product, as its author would run it: a fresh package whose library is the "Writing a backend"
# article's example backend and whose test target is the article's test file, both taken from
# the article as shown, so the article's code is compiled and run. Run by `make test`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
article="$root/Sources/TimerKit/TimerKit.docc/WritingABackend.md"
package="$(mktemp -d)/PumpedTimers"
trap 'rm -rf "$(dirname "$package")"' EXIT
mkdir -p "$package/Sources/PumpedTimers" "$package/Tests/PumpedTimersTests"

# The article's Swift code blocks: the one that defines the backend, and the test file.
python3 - "$article" "$package" <<'EXTRACT'
import re, sys
article, package = sys.argv[1], sys.argv[2]
blocks = re.findall(r"```swift\n(.*?)```", open(article).read(), re.S)
def the_block(marker):
    found = [block for block in blocks if marker in block]
    if len(found) != 1:
        sys.exit(f"check-conformance-product: expected one code block with '{marker}' in the article, found {len(found)}")
    return found[0]
open(f"{package}/Sources/PumpedTimers/PumpedBackend.swift", "w").write(the_block("final class PumpedBackend"))
open(f"{package}/Tests/PumpedTimersTests/PumpedTimersTests.swift", "w").write(the_block("import TimerKitConformance"))
EXTRACT

cat > "$package/Package.swift" <<MANIFEST
// swift-tools-version: 6.2
import PackageDescription
let package = Package(
    name: "PumpedTimers",
    dependencies: [.package(name: "TimerKit", path: "$root")],
    targets: [
        .target(name: "PumpedTimers", dependencies: [.product(name: "TimerKit", package: "TimerKit")]),
        .testTarget(
            name: "PumpedTimersTests",
            dependencies: [
                "PumpedTimers",
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitConformance", package: "TimerKit"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
MANIFEST

cd "$package"
# The scratch folder the examples without SwiftNIO build in (TimerKit the same, with no trait):
# it survives between runs, so TimerKit is not built again each time.
scratch="$root/.build-plain"
swift build --build-tests --scratch-path "$scratch" -Xswiftc -warnings-as-errors
swift test --skip-build --scratch-path "$scratch" 2>&1 | tee "$scratch/conformance.log" | grep -E "✘|against epoll|^figure|µs|ns\)|passed after|failed after" || true
python3 - "$scratch/conformance.log" "$root" <<'CHECK'
import re, sys
log = open(sys.argv[1]).read()
if "✘" in log or "Test run with" not in log:
    sys.exit("check-conformance-product: the outside package's tests failed (log: .build-plain/conformance.log)")
cases = re.search(r"Test pumpedMeetsTheContract\(_:\) with (\d+) test cases passed", log)
if not cases:
    sys.exit("check-conformance-product: the contract test did not run")
print(f"check-conformance-product: a backend outside the repository passed {cases.group(1)} contract checks")
CHECK
