// swift-tools-version: 6.2
// TimerKitNIO: TimerKit's timers on a SwiftNIO event loop. A package of its own, so that users
// of TimerKit who do not use NIO never resolve it. It depends on the library by path, under a
// name that does not depend on the folder the repository is checked out in.
import PackageDescription

let swift6: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let package = Package(
    name: "TimerKitNIO",
    products: [
        .library(name: "TimerKitNIO", targets: ["TimerKitNIO"])
    ],
    dependencies: [
        .package(name: "TimerKit", path: ".."),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
    ],
    targets: [
        .target(
            name: "TimerKitNIO",
            dependencies: [
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: swift6
        ),
        // The library's own test support and conformance suite, compiled again here (the files
        // are symbolic links into ../Tests) with one more backend configuration: `.nio`.
        .target(
            name: "TimerKitTestSupport",
            dependencies: [
                "TimerKitNIO",
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitEpoll", package: "TimerKit"),
                .product(name: "TimerKitLibevent", package: "TimerKit"),
                .product(name: "CLibevent", package: "TimerKit"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Tests/TimerKitNIOTestSupport",
            swiftSettings: swift6 + [.define("TIMERKIT_NIO")]
        ),
        .testTarget(
            name: "TimerKitNIOConformanceTests",
            dependencies: [
                "TimerKitTestSupport",
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitEpoll", package: "TimerKit"),
            ],
            swiftSettings: swift6
        ),
        .testTarget(
            name: "TimerKitNIOTests",
            dependencies: [
                "TimerKitNIO", "TimerKitTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: swift6
        ),
    ]
)
