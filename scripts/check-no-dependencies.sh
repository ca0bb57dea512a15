#!/usr/bin/env bash
# A fresh app that depends on TimerKit by path resolves no other package, and builds and runs
# against the public surface alone (no @_spi import). Run by `make test`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
app="$(mktemp -d)/App"
trap 'rm -rf "$(dirname "$app")"' EXIT
mkdir -p "$app/Sources/App"
cat > "$app/Package.swift" <<MANIFEST
// swift-tools-version: 6.2
import PackageDescription
let package = Package(
    name: "App",
    dependencies: [.package(name: "TimerKit", path: "$root")],
    targets: [
        .executableTarget(
            name: "App",
            dependencies: [
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitEpoll", package: "TimerKit"),
                .product(name: "TimerKitLibevent", package: "TimerKit"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        )
    ]
)
MANIFEST
cat > "$app/Sources/App/main.swift" <<'SOURCE'
import Synchronization
import TimerKit
import TimerKitEpoll
import TimerKitLibevent

let clock = ManualBackend(registry: TimerRegistry())
let ticks = Mutex(0)
let timer = try clock.schedule(.every(.seconds(1), count: 3), name: "app") { _ in ticks.withLock { $0 += 1 } }
clock.advance(by: .seconds(5))
precondition(ticks.withLock { $0 } == 3 && !timer.isActive, "the app's timer did not run as documented")
for backend in [try EpollBackend(registry: TimerRegistry()) as any TimerBackend, try LibeventBackend(registry: TimerRegistry())] {
    try backend.schedule(.after(.seconds(60))) { _ in }
    backend.shutdown()
}
print("app: ok")
SOURCE
cd "$app"
# A scratch folder that survives between runs keeps this from rebuilding TimerKit each time.
scratch="$root/.build-app"
swift package --scratch-path "$scratch" show-dependencies --format json > "$app/dependencies.json"
python3 - "$app/dependencies.json" <<'CHECK'
import json, sys
tree = json.load(open(sys.argv[1]))
direct = tree.get("dependencies", [])
names = [d.get("name") or d.get("identity") for d in direct]
indirect = [sub for d in direct for sub in d.get("dependencies", [])]
if len(direct) != 1 or indirect:
    sys.exit(f"check-no-dependencies: an app depending on TimerKit resolves {names} and {len(indirect)} more; expected TimerKit alone")
print(f"check-no-dependencies: an app depending on TimerKit resolves {names[0]} and nothing else")
CHECK
swift build --scratch-path "$scratch" -Xswiftc -warnings-as-errors 2>&1 | grep -E "error|warning" && exit 1
"$scratch/debug/App"
