#!/usr/bin/env bash
# An app that adds the repository by URL, with no trait (TimerKit's default), resolves TimerKit
# and nothing else, and builds and runs against the public surface alone (no @_spi import).
# The repository is a fresh clone of this checkout (url-clone.sh). Run by `make test`.
set -euo pipefail
source "$(dirname "$0")/consumer-common.sh"
app="$work/App"
mkdir -p "$app/Sources/App"
cat > "$app/Package.swift" <<MANIFEST
// swift-tools-version: 6.2
import PackageDescription
let package = Package(
    name: "App",
    dependencies: [.package(url: "$url", from: "$version")],
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
(cd "$app" && swift package --scratch-path "$scratch_plain" resolve >/dev/null)
identities="$(resolved_identities "$app")"
echo "check-no-dependencies: Package.resolved of an app adding $url from $version, no trait: $identities"
if [ "$identities" != "timerkit" ]; then
    echo "check-no-dependencies: expected TimerKit alone" >&2
    exit 1
fi
bin="$(build_consumer "$app" "$scratch_plain")"
"$bin/App"
