// swift-tools-version: 6.2
// TimerKit: one timer API over Linux's event loops. The library has no package dependencies:
// the comparison tool (Bench/) and the microbenchmarks (Benchmarks/) are packages of their own.
//
// Linux only: the code uses Glibc, epoll, timerfd and libevent, so `platforms` names no Apple
// platform (it builds on none).
import PackageDescription

let swift6: [SwiftSetting] = [.swiftLanguageMode(.v6)]

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
        // liburing's C API, for the bench's raw io_uring baseline.
        .library(name: "CLibURing", targets: ["CLibURing"]),
        // The backend contract as checks a backend's own test target runs (Swift Testing).
        .library(name: "TimerKitConformance", targets: ["TimerKitConformance"]),
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
        .target(
            name: "TimerKitTestSupport",
            dependencies: [
                "TimerKit", "TimerKitEpoll", "TimerKitLibevent", "TimerKitURing", "CLibevent", "CTimerShims", "TimerKitConformance",
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
    ]
)
