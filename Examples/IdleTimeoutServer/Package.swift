// swift-tools-version: 6.2
// IdleTimeoutServer: a SwiftNIO HTTP/1.1 server that closes connections idle for N seconds, with
// TimerKit's NIOBackend (one per event loop). It depends on the TimerKit of the checkout it sits
// in, by path, with the trait NIO (an app would name the repository's URL instead; see the
// README), and on swift-nio for the server itself.
import PackageDescription

let package = Package(
    name: "IdleTimeoutServer",
    dependencies: [
        .package(name: "TimerKit", path: "../..", traits: ["NIO"]),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
    ],
    targets: [
        .executableTarget(
            name: "IdleTimeoutServer",
            dependencies: [
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitNIO", package: "TimerKit"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        )
    ]
)
