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
        // TimerKit's contract checks (the TimerKitConformance product) on a NIO loop.
        .testTarget(
            name: "TimerKitNIOConformanceTests",
            dependencies: [
                "TimerKitNIO",
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitConformance", package: "TimerKit"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swift6
        ),
        .testTarget(
            name: "TimerKitNIOTests",
            dependencies: [
                "TimerKitNIO",
                .product(name: "TimerKitConformance", package: "TimerKit"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: swift6
        ),
    ]
)
