#!/usr/bin/env bash
# An app that adds the repository by URL, on its branch main as the README shows, with no trait
# (TimerKit's default), resolves TimerKit and nothing else, and builds and runs against the public
# surface alone (no @_spi import). It depends on every product the README's table lists for no
# trait, and that list is every library product of Package.swift but the traits' own. The
# repository is a fresh clone of this checkout (url-clone.sh). Run by `make test`.
set -euo pipefail
source "$(dirname "$0")/consumer-common.sh"

# The README's table of traits and products against Package.swift's products; prints the
# products of the row for no trait.
products="$(python3 - "$root/README.md" "$root/Package.swift" <<'EXTRACT'
import re, sys
readme, manifest = open(sys.argv[1], encoding="utf-8").read(), open(sys.argv[2], encoding="utf-8").read()
rows = {}
for line in readme.splitlines():
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    if len(cells) == 3 and cells[0] in ("none (the default)", "`NIO`", "`Observability`"):
        rows[cells[0]] = re.findall(r"`(\w+)`", cells[1])
if len(rows) != 3:
    sys.exit(f"check-no-dependencies: the README's table of traits should have rows for none, NIO and Observability, found {sorted(rows)}")
declared = set(re.findall(r'\.library\(name: "(\w+)"', manifest))
if set(rows["none (the default)"]) - declared:
    sys.exit(f"check-no-dependencies: the README lists {sorted(set(rows['none (the default)']) - declared)} for no trait; Package.swift declares no such product")
# Each product in one row (a trait's row also names types, such as NIOBackend).
listed = [name for names in rows.values() for name in names if name in declared]
if sorted(listed) != sorted(declared):
    sys.exit(f"check-no-dependencies: the README's table lists the products {sorted(listed)}, Package.swift declares {sorted(declared)}")
print(" ".join(rows["none (the default)"]))
EXTRACT
)"
echo "check-no-dependencies: the products of no trait, as the README lists them: $products"
# The app below imports each of them: a product the README adds needs a line of its own there.
for used in TimerKit TimerKitEpoll TimerKitURing TimerKitLibevent TimerKitConformance CLibevent; do
    case " $products " in
        *" $used "*) ;;
        *) echo "check-no-dependencies: the app below uses $used; the README's list for no trait ($products) leaves it out" >&2; exit 1 ;;
    esac
done
if [ "$(echo $products | wc -w)" -ne 6 ]; then
    echo "check-no-dependencies: the README lists $products for no trait; the app below uses 6 products: add the new one to it" >&2
    exit 1
fi
app_products=""
for product in $products; do
    [ "$product" = TimerKitConformance ] && continue  # for test targets: the app's test target's
    app_products="$app_products                .product(name: \"$product\", package: \"TimerKit\"),
"
done

app="$work/App"
mkdir -p "$app/Sources/App" "$app/Tests/AppTests"
cat > "$app/Package.swift" <<MANIFEST
// swift-tools-version: 6.2
import PackageDescription
let package = Package(
    name: "App",
    dependencies: [.package(url: "$url", $requirement)],
    targets: [
        .executableTarget(
            name: "App",
            dependencies: [
$app_products            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "AppTests",
            dependencies: [
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitConformance", package: "TimerKit"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
MANIFEST
cat > "$app/Sources/App/main.swift" <<'SOURCE'
import CLibevent
import Synchronization
import TimerKit
import TimerKitEpoll
import TimerKitLibevent
import TimerKitURing

let clock = ManualBackend(registry: TimerRegistry())
let ticks = Mutex(0)
let timer = try clock.schedule(.every(.seconds(1), count: 3), name: "app") { _ in ticks.withLock { $0 += 1 } }
clock.advance(by: .seconds(5))
precondition(ticks.withLock { $0 } == 3 && !timer.isActive, "the app's timer did not run as documented")
var backends: [any TimerBackend] = [try EpollBackend(registry: TimerRegistry()), try LibeventBackend(registry: TimerRegistry())]
do {
    backends.append(try IOURingBackend(registry: TimerRegistry()))
} catch {
    guard case .unavailable(_, let reason) = error else { throw error }
    print("app: io_uring cannot run here (\(reason))")
}
for backend in backends {
    try backend.schedule(.after(.seconds(60))) { _ in }
    backend.shutdown()
}
print("app: ok on \(backends.map(\.name).joined(separator: ", ")); libevent \(String(cString: event_get_version()))")
SOURCE
cat > "$app/Tests/AppTests/AppTests.swift" <<'SOURCE'
import Testing
import TimerKit
import TimerKitConformance

@Test func theContractHasChecks() {
    #expect(!ConformanceCheck.all.isEmpty)
}
SOURCE
(cd "$app" && swift package --scratch-path "$scratch_plain" resolve >/dev/null)
identities="$(resolved_identities "$app")"
echo "check-no-dependencies: Package.resolved of an app adding $url ($requirement), no trait: $identities"
if [ "$identities" != "timerkit" ]; then
    echo "check-no-dependencies: expected TimerKit alone" >&2
    exit 1
fi
bin="$(build_consumer "$app" "$scratch_plain" --build-tests)"
"$bin/App"
