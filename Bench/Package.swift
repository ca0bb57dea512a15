// swift-tools-version: 6.2
// timerkit-bench: the backend comparison. A package of its own, so that users of TimerKit
// never resolve what it depends on (argument parsing, histograms, and the peers it measures
// TimerKit against). It depends on the library by path, with its NIO trait (for NIOBackend),
// under a name that does not depend on the folder the repository is checked out in.
import PackageDescription

let package = Package(
    name: "TimerKitBench",
    dependencies: [
        .package(name: "TimerKit", path: "..", traits: ["NIO"]),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.1.0"),
        .package(url: "https://github.com/apple/swift-async-algorithms", from: "1.0.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
    ],
    targets: [
        .target(name: "CBenchSystem", path: "Sources/CBenchSystem"),
        // liburing's C API for the raw io_uring subject (Debian: liburing-dev, found by pkg-config).
        .systemLibrary(name: "CBenchURing", path: "Sources/CBenchURing", pkgConfig: "liburing", providers: [.apt(["liburing-dev"])]),
        // The statistics of intervals and verdicts: a target of its own so that its tests
        // need no timing.
        .target(name: "BenchStatistics", swiftSettings: [.swiftLanguageMode(.v6)]),
        .testTarget(name: "BenchStatisticsTests", dependencies: ["BenchStatistics"], swiftSettings: [.swiftLanguageMode(.v6)]),
        // The bench's subjects against the backends they measure: each named as its backend.
        .testTarget(
            name: "BenchSubjectTests",
            dependencies: [
                "timerkit-bench",
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitURing", package: "TimerKit"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .executableTarget(
            name: "timerkit-bench",
            dependencies: [
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitEpoll", package: "TimerKit"),
                .product(name: "TimerKitLibevent", package: "TimerKit"),
                .product(name: "CLibevent", package: "TimerKit"),
                .product(name: "TimerKitURing", package: "TimerKit"),
                "CBenchURing",
                "CBenchSystem",
                "BenchStatistics",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "AsyncAlgorithms", package: "swift-async-algorithms"),
                .product(name: "TimerKitNIO", package: "TimerKit"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
