// swift-tools-version: 6.2
// TimerKitObservability: a backend's statistics in swift-metrics and its events in swift-log. A
// package of its own, so that the library stays free of dependencies; it depends on TimerKit by
// path, under a name that does not depend on the folder the repository is checked out in.
import PackageDescription

let swift6: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let package = Package(
    name: "TimerKitObservability",
    products: [
        .library(name: "TimerKitObservability", targets: ["TimerKitObservability"])
    ],
    dependencies: [
        .package(name: "TimerKit", path: ".."),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .target(
            name: "TimerKitObservability",
            dependencies: [
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swift6
        ),
        .testTarget(
            name: "TimerKitObservabilityTests",
            dependencies: [
                "TimerKitObservability",
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitEpoll", package: "TimerKit"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ],
            swiftSettings: swift6
        ),
    ]
)
