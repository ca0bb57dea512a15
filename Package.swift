// swift-tools-version: 6.2
// TimerKit: one timer API over Linux's event loops. With no trait enabled (the default) the
// library has no package dependencies. Two package traits add a product each, with the packages
// it needs: `NIO` (TimerKitNIO: swift-nio) and `Observability` (TimerKitObservability:
// swift-metrics and swift-log). A dependency used only under a trait is left out of a consumer's
// resolution while the trait is off; the modules of a trait that is off build empty (`#if NIO`).
// The comparison tool (Bench/) and the microbenchmarks (Benchmarks/) are packages of their own.
//
// Linux only: the code uses Glibc, epoll, timerfd and libevent, so `platforms` names no Apple
// platform (it builds on none).
import PackageDescription

let swift6: [SwiftSetting] = [.swiftLanguageMode(.v6)]
let nio: TargetDependencyCondition? = .when(traits: ["NIO"])
// `make api-check` sets TIMERKIT_ENABLE_ALL_TRAITS: the API digester builds the baseline commit
// with its default traits (it takes no --traits), and the products of both traits are checked too.
let defaultTraits: Set<String> = Context.environment["TIMERKIT_ENABLE_ALL_TRAITS"] == nil ? [] : ["NIO", "Observability"]
let observability: TargetDependencyCondition? = .when(traits: ["Observability"])

let package = Package(
    name: "TimerKit",
    products: [
        .library(name: "TimerKit", targets: ["TimerKit"]),
        .library(name: "TimerKitEpoll", targets: ["TimerKitEpoll"]),
        .library(name: "TimerKitLibevent", targets: ["TimerKitLibevent"]),
        // The io_uring backend: needs liburing (Debian: liburing-dev), found by pkg-config.
        .library(name: "TimerKitURing", targets: ["TimerKitURing"]),
        // libevent's C API, for programs that make the event_base a LibeventBackend attaches to.
        .library(name: "CLibevent", targets: ["CLibevent"]),
        // The backend contract as checks a backend's own test target runs (Swift Testing).
        .library(name: "TimerKitConformance", targets: ["TimerKitConformance"]),
        // Trait NIO: NIOBackend, TimerKit's timers on a SwiftNIO event loop.
        .library(name: "TimerKitNIO", targets: ["TimerKitNIO"]),
        // Trait Observability: a backend's statistics to swift-metrics, its events to swift-log.
        .library(name: "TimerKitObservability", targets: ["TimerKitObservability"]),
    ],
    traits: [
        .trait(name: "NIO", description: "The TimerKitNIO product: NIOBackend on a SwiftNIO event loop (depends on swift-nio)."),
        .trait(
            name: "Observability",
            description: "The TimerKitObservability product: statistics to swift-metrics, events to swift-log (depends on both)."
        ),
        .default(enabledTraits: defaultTraits),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        // CTimerShims gives the core the timerfd it watches the wall clock with (ClockWatcher).
        .target(name: "TimerKit", dependencies: ["CTimerShims"], swiftSettings: swift6),
        .target(name: "CTimerShims", path: "CShims/CTimerShims"),
        .target(name: "TimerKitEpoll", dependencies: ["TimerKit", "CTimerShims"], swiftSettings: swift6),
        .systemLibrary(
            name: "CLibevent",
            path: "CShims/CLibevent",
            pkgConfig: "libevent",
            providers: [.apt(["libevent-dev"])]
        ),
        .target(name: "TimerKitLibevent", dependencies: ["TimerKit", "CLibevent"], swiftSettings: swift6),
        .systemLibrary(
            name: "CLibURing",
            path: "CShims/CLibURing",
            pkgConfig: "liburing",
            providers: [.apt(["liburing-dev"])]
        ),
        // It shares TimerKitEpoll's thread options (ThreadPriority) and loop bookkeeping.
        .target(name: "TimerKitURing", dependencies: ["TimerKit", "TimerKitEpoll", "CLibURing", "CTimerShims"], swiftSettings: swift6),
        // For test targets only: it imports the toolchain's Testing.
        .target(name: "TimerKitConformance", dependencies: ["TimerKit", "TimerKitEpoll"], swiftSettings: swift6),
        // What TimerKit's own test targets share: its backend configurations (`BackendKind`), the
        // caller loops they attach to, and child-process helpers; it re-exports TimerKitConformance.
        // Sets the test process's environment before Swift's runtime starts (environment.c).
        .target(name: "CTestEnvironment", path: "Tests/CTestEnvironment"),
        .target(
            name: "TimerKitTestSupport",
            dependencies: [
                "TimerKit", "TimerKitEpoll", "TimerKitLibevent", "TimerKitURing", "CLibevent", "CTimerShims", "TimerKitConformance",
                "CTestEnvironment",
            ],
            path: "Tests/TimerKitTestSupport",
            swiftSettings: swift6
        ),
        .testTarget(name: "TimerKitTests", dependencies: ["TimerKit", "TimerKitTestSupport"], swiftSettings: swift6),
        .testTarget(
            name: "TimerKitEpollTests", dependencies: ["TimerKitEpoll", "CTimerShims", "TimerKitTestSupport"], swiftSettings: swift6),
        .testTarget(
            name: "TimerKitLibeventTests", dependencies: ["TimerKitLibevent", "CLibevent", "TimerKitTestSupport"], swiftSettings: swift6),
        .testTarget(
            name: "TimerKitURingTests", dependencies: ["TimerKitURing", "TimerKitEpoll", "CTimerShims", "TimerKitTestSupport"],
            swiftSettings: swift6),
        .testTarget(
            name: "BackendConformanceTests",
            dependencies: ["TimerKit", "TimerKitConformance", "TimerKitTestSupport"],
            swiftSettings: swift6
        ),
        .target(
            name: "TimerKitNIO",
            dependencies: [
                "TimerKit",
                .product(name: "NIOCore", package: "swift-nio", condition: nio),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio", condition: nio),
                .product(name: "NIOEmbedded", package: "swift-nio", condition: nio),
            ],
            swiftSettings: swift6
        ),
        // TimerKit's contract checks (the TimerKitConformance product) on a NIO loop.
        .testTarget(
            name: "TimerKitNIOConformanceTests",
            dependencies: [
                "TimerKitNIO", "TimerKit", "TimerKitConformance",
                .product(name: "NIOCore", package: "swift-nio", condition: nio),
                .product(name: "NIOPosix", package: "swift-nio", condition: nio),
            ],
            swiftSettings: swift6
        ),
        .testTarget(
            name: "TimerKitNIOTests",
            dependencies: [
                "TimerKitNIO", "TimerKitConformance",
                .product(name: "NIOCore", package: "swift-nio", condition: nio),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio", condition: nio),
                .product(name: "NIOPosix", package: "swift-nio", condition: nio),
                .product(name: "NIOEmbedded", package: "swift-nio", condition: nio),
            ],
            swiftSettings: swift6
        ),
        .target(
            name: "TimerKitObservability",
            dependencies: [
                "TimerKit",
                .product(name: "CoreMetrics", package: "swift-metrics", condition: observability),
                .product(name: "Logging", package: "swift-log", condition: observability),
            ],
            swiftSettings: swift6
        ),
        .testTarget(
            name: "TimerKitObservabilityTests",
            dependencies: [
                "TimerKitObservability", "TimerKit", "TimerKitEpoll",
                .product(name: "MetricsTestKit", package: "swift-metrics", condition: observability),
                .product(name: "InMemoryLogging", package: "swift-log", condition: observability),
            ],
            swiftSettings: swift6
        ),
    ]
)
