// swift-tools-version: 6.2
// FrameLoop: a DisplayLink at 60 Hz for a few seconds, printing its frames, the frames it
// dropped and the thread priority it got. It depends on the TimerKit of the checkout it sits
// in, by path (an app would name the repository's URL instead; see the README).
import PackageDescription

let package = Package(
    name: "FrameLoop",
    dependencies: [.package(name: "TimerKit", path: "../..")],
    targets: [
        .executableTarget(
            name: "FrameLoop",
            dependencies: [
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitEpoll", package: "TimerKit"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        )
    ]
)
