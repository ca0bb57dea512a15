// swift-tools-version: 6.1
// Microbenchmarks for TimerKit, kept out of the main package so `make test` never builds them.
// Run: cd Benchmarks && swift package benchmark   (see README.md)
import PackageDescription

let package = Package(
    name: "TimerKitBenchmarks",
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/package-benchmark", from: "1.38.0", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "TimerKitBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "package-benchmark"),
                .product(name: "TimerKit", package: "main"),
                .product(name: "TimerKitEpoll", package: "main"),
            ],
            path: "Benchmarks/TimerKitBenchmarks",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
    ]
)
