// swift-tools-version: 6.2
// Microbenchmarks for TimerKit with allocation counts, a package of their own (package-benchmark
// is no dependency of the library). They depend on the library by path, under a name that does
// not depend on the folder the repository is checked out in.
// Run: make benchmarks   (or: cd Benchmarks && swift package --allow-writing-to-package-directory benchmark)
import PackageDescription

let package = Package(
    name: "TimerKitBenchmarks",
    dependencies: [
        .package(name: "TimerKit", path: ".."),
        .package(url: "https://github.com/ordo-one/package-benchmark", from: "1.38.0", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "TimerKitBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "package-benchmark"),
                .product(name: "TimerKit", package: "TimerKit"),
                .product(name: "TimerKitEpoll", package: "TimerKit"),
            ],
            path: "Benchmarks/TimerKitBenchmarks",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        // What statistics cost per fire, by paired rounds (see its header); run by make bench-check.
        .executableTarget(
            name: "statistics-cost",
            dependencies: [.product(name: "TimerKit", package: "TimerKit")],
            path: "StatisticsCost",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // A fixed workload on the timer store for valgrind and profilers (see its header); make
        // bench-check counts its instructions per operation (scripts/instruction-budget.py).
        .executableTarget(
            name: "store-profile",
            dependencies: [
                .product(name: "TimerKit", package: "TimerKit"), .product(name: "TimerKitEpoll", package: "TimerKit"),
                .product(name: "TimerKitURing", package: "TimerKit"), .product(name: "TimerKitLibevent", package: "TimerKit"),
            ],
            path: "StoreProfile",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
