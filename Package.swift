// swift-tools-version: 6.0
import PackageDescription

let strict: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let package = Package(
    name: "TimerKit",
    products: [
        .library(name: "TimerKit", targets: ["TimerKit"]),
        .library(name: "TimerKitEpoll", targets: ["TimerKitEpoll"]),
        .library(name: "TimerKitLibevent", targets: ["TimerKitLibevent"]),
        .executable(name: "timerkit-bench", targets: ["timerkit-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.1.0"),
    ],
    targets: [
        .target(name: "TimerKit", swiftSettings: strict),
        .target(name: "CTimerShims", path: "CShims/CTimerShims"),
        .target(name: "TimerKitEpoll", dependencies: ["TimerKit", "CTimerShims"], swiftSettings: strict),
        .systemLibrary(
            name: "CLibevent",
            path: "CShims/CLibevent",
            pkgConfig: "libevent",
            providers: [.apt(["libevent-dev"])]
        ),
        .target(name: "TimerKitLibevent", dependencies: ["TimerKit", "CLibevent"], swiftSettings: strict),
        .executableTarget(
            name: "timerkit-bench",
            dependencies: [
                "TimerKit",
                "TimerKitEpoll",
                "TimerKitLibevent",
                "CLibevent",
                "CTimerShims",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            swiftSettings: strict
        ),
        // Helpers every test target shares: tick logs, waits, watchdogs, /proc readers, and
        // the harness that runs one test body on every backend configuration.
        .target(
            name: "TimerKitTestSupport",
            dependencies: ["TimerKit", "TimerKitEpoll", "TimerKitLibevent", "CLibevent", "CTimerShims"],
            path: "Tests/TimerKitTestSupport",
            swiftSettings: strict
        ),
        .testTarget(name: "TimerKitTests", dependencies: ["TimerKit", "TimerKitTestSupport"], swiftSettings: strict),
        .testTarget(name: "TimerKitEpollTests", dependencies: ["TimerKitEpoll", "CTimerShims", "TimerKitTestSupport"], swiftSettings: strict),
        .testTarget(name: "TimerKitLibeventTests", dependencies: ["TimerKitLibevent", "CLibevent", "TimerKitTestSupport"], swiftSettings: strict),
        .testTarget(
            name: "BackendConformanceTests",
            dependencies: ["TimerKit", "TimerKitEpoll", "TimerKitLibevent", "CLibevent", "TimerKitTestSupport"],
            swiftSettings: strict
        ),
    ]
)
