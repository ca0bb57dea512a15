// swift-tools-version: 6.2
// Debounce: a search that runs once typing stops, and a progress line at most every 100 ms.
// It depends on the TimerKit of the checkout it sits in, by path (an app would name the
// repository's URL instead; see the README).
import PackageDescription

let package = Package(
    name: "Debounce",
    dependencies: [.package(name: "TimerKit", path: "../..")],
    targets: [
        .executableTarget(
            name: "Debounce",
            dependencies: [.product(name: "TimerKit", package: "TimerKit")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        )
    ]
)
