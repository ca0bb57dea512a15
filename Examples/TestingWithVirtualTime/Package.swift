// swift-tools-version: 6.2
// TestingWithVirtualTime: a type that retries with back-off and gives each attempt a time
// limit, and its tests on ManualBackend's virtual time (no sleeps: the tests move the clock).
// It depends on the TimerKit of the checkout it sits in, by path (an app would name the
// repository's URL instead; see the README).
import PackageDescription

let package = Package(
    name: "TestingWithVirtualTime",
    dependencies: [.package(name: "TimerKit", path: "../..")],
    targets: [
        .target(
            name: "Retrying",
            dependencies: [.product(name: "TimerKit", package: "TimerKit")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "RetryingTests",
            dependencies: ["Retrying", .product(name: "TimerKit", package: "TimerKit")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
