#!/usr/bin/env bash
# Apps that add the repository by URL with a trait, as the README shows: with "NIO", the
# README's own Package.swift (its URL pointed at a fresh clone of this checkout, on the branch
# main it asks for) builds and runs a NIOBackend timer on a SwiftNIO event loop; with
# "Observability", an app's backend reports to swift-metrics (its test factory). Each prints the
# identities its Package.resolved pins, and neither resolves the other trait's packages. The
# DocC articles' lines adding TimerKit name the README's URL and branch. Run by `make test`.
set -euo pipefail
source "$(dirname "$0")/consumer-common.sh"

# --- NIO: the README's manifest.
nio="$work/Server"
mkdir -p "$nio/Sources/Server"
python3 - "$root/README.md" "$url" "$requirement" "$root/Sources" > "$nio/Package.swift" <<'EXTRACT'
import glob, re, sys
readme, url, requirement, sources = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
text = open(readme, encoding="utf-8").read()
section = text.split("\n## Adding TimerKit\n", 1)
if len(section) != 2:
    sys.exit("check-trait-consumers: the README has no '## Adding TimerKit' section")
block = re.search(r"```swift\n(.*?)```", section[1], re.S)
if not block:
    sys.exit("check-trait-consumers: the README's 'Adding TimerKit' section has no Swift code block")
line = re.compile(r'\.package\(url: "([^"]*/TimerKit(?:\.git)?)", ([^)]*?)(?:, traits: [^)]*)?\)')
shown = line.findall(block.group(1))
if len(shown) != 1 or shown[0][1] != requirement:
    sys.exit(f"check-trait-consumers: the README's manifest should add TimerKit by URL once, with {requirement}; it shows {shown}")
readme_url = shown[0][0]
# The articles show the same dependency: the README's URL, on the same branch.
for article in sorted(glob.glob(f"{sources}/*/*.docc/*.md")):
    for found in line.findall(open(article, encoding="utf-8").read()):
        if found != (readme_url, requirement):
            sys.exit(f"check-trait-consumers: {article} adds TimerKit as {found}; the README as {(readme_url, requirement)}")
print(block.group(1).replace(f'"{readme_url}"', f'"{url}"'), end="")
EXTRACT
cat > "$nio/Sources/Server/main.swift" <<'SOURCE'
import Foundation
import NIOPosix
import Synchronization
import TimerKit
import TimerKitNIO

Thread.detachNewThread {
    Thread.sleep(forTimeInterval: 30)
    print("nio-app: the timer had not ended after 30 s")
    exit(1)
}
let ticks = Mutex(0)
let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
let loop = group.next()
let timers = NIOBackend(on: loop, registry: TimerRegistry())
let timer = try timers.schedule(.every(.milliseconds(20), count: 3), name: "heartbeat") { _ in
    precondition(loop.inEventLoop, "a NIOBackend handler runs on its event loop")
    ticks.withLock { $0 += 1 }
}
let reason = try await timer.ended
timers.shutdown()
try await group.shutdownGracefully()
print("nio-app: \(ticks.withLock { $0 }) ticks on the event loop, then \(reason)")
exit(ticks.withLock { $0 } == 3 ? 0 : 1)
SOURCE
(cd "$nio" && swift package --scratch-path "$scratch_nio" resolve >/dev/null)
identities="$(resolved_identities "$nio")"
echo "check-trait-consumers: Package.resolved with traits [\"NIO\"]: $identities"
case " $identities " in
    *" timerkit "*" swift-nio "* | *" swift-nio "*" timerkit "*) ;;
    *) echo "check-trait-consumers: expected timerkit and swift-nio" >&2; exit 1 ;;
esac
case " $identities " in
    *" swift-metrics "* | *" swift-log "*) echo "check-trait-consumers: NIO alone resolved Observability's packages" >&2; exit 1 ;;
esac
bin="$(build_consumer "$nio" "$scratch_nio")"
"$bin/Server" | tee "$work/nio.out"
grep -q "^nio-app: 3 ticks on the event loop" "$work/nio.out"

# --- Observability: statistics to swift-metrics.
metrics="$work/MetricsApp"
mkdir -p "$metrics/Sources/MetricsApp"
cat > "$metrics/Package.swift" <<MANIFEST
// swift-tools-version: 6.2
import PackageDescription
let package = Package(
    name: "MetricsApp",
    dependencies: [
        .package(url: "$url", $requirement, traits: ["Observability"]),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
    ],
    targets: [
        .executableTarget(
            name: "MetricsApp",
            dependencies: [
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitObservability", package: "TimerKit"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        )
    ]
)
MANIFEST
cat > "$metrics/Sources/MetricsApp/main.swift" <<'SOURCE'
import MetricsTestKit
import TimerKit
import TimerKitObservability

let metrics = TestMetrics()
let clock = ManualBackend(registry: TimerRegistry())
let reporter = try TimerMetricsReporter(backend: clock, factory: metrics, every: nil)
try clock.schedule(.every(.seconds(1), count: 5), name: "work") { _ in }
clock.advance(by: .seconds(10))
reporter.report()
let fires = try metrics.expectCounter("timerkit_fires", [("backend", "manual")]).totalValue
clock.shutdown()
print("metrics-app: swift-metrics counted \(fires) fires")
SOURCE
(cd "$metrics" && swift package --scratch-path "$scratch_plain" resolve >/dev/null)
identities="$(resolved_identities "$metrics")"
echo "check-trait-consumers: Package.resolved with traits [\"Observability\"]: $identities"
if [ "$identities" != "swift-log swift-metrics timerkit" ]; then
    echo "check-trait-consumers: expected timerkit, swift-metrics and swift-log alone" >&2
    exit 1
fi
bin="$(build_consumer "$metrics" "$scratch_plain")"
"$bin/MetricsApp" | tee "$work/metrics.out"
grep -q "^metrics-app: swift-metrics counted 5 fires$" "$work/metrics.out"
