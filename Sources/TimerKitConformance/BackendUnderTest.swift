import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll

/// A backend for the conformance checks to run on: its name, how to make one, and what it
/// cannot do.
///
/// Each check calls `make` for a backend of its own, with a fresh `TimerRegistry` that the
/// backend must use, and shuts it down when done:
///
/// ```swift
/// extension BackendUnderTest {
///     static let pumped = BackendUnderTest("pumped") { registry in
///         let backend = PumpedBackend(registry: registry)
///         let loop = PumpLoop(backend)
///         return .init(backend, callerContext: loop.perform, teardown: loop.stop)
///     }
/// }
/// ```
public struct BackendUnderTest: Sendable, CustomStringConvertible, CustomTestStringConvertible {
    /// A backend made for one check, with what the check needs to drive it.
    public struct Instance: Sendable {
        let backend: any TimerBackend
        let manual: ManualBackend?
        let callerContext: (@Sendable (@escaping @Sendable () -> Void) -> Void)?
        let teardown: @Sendable () -> Void

        /// A backend on real time.
        ///
        /// - Parameters:
        ///   - backend: The backend, made with the registry `make` was given.
        ///   - callerContext: Runs a block where the code that owns the backend runs: on the
        ///     caller's queue, in a callback of the caller's loop. Nil for a backend with a
        ///     loop of its own: the checks then act from a thread of their own.
        ///   - teardown: Called after the backend has shut down: stop and free the loop you
        ///     made for it.
        public init(
            _ backend: any TimerBackend, callerContext: (@Sendable (@escaping @Sendable () -> Void) -> Void)? = nil,
            teardown: @escaping @Sendable () -> Void = {}
        ) {
            self.backend = backend
            self.manual = nil
            self.callerContext = callerContext
            self.teardown = teardown
        }

        init(manual: ManualBackend) {
            self.backend = manual
            self.manual = manual
            self.callerContext = nil
            self.teardown = {}
        }
    }

    /// The name the checks' messages and warnings use.
    public let name: String
    let optedOut: [ConformanceCheck.Need: String]
    let isRealTime: Bool
    private let make: @Sendable (TimerRegistry) throws -> Instance

    /// A backend on real time, made by `make` for each check.
    ///
    /// - Parameters:
    ///   - name: How messages name it.
    ///   - optingOutOf: What it cannot do, each with the reason: the checks that need it are
    ///     skipped, with a warning that gives the reason. Opt out of nothing you can do: every
    ///     check skipped is a promise left untested.
    ///   - make: Makes the backend on the registry it is given. It may throw (a backend whose
    ///     start-up fails); the check then throws that error.
    public init(
        _ name: String, optingOutOf: [ConformanceCheck.Need: String] = [:],
        make: @escaping @Sendable (TimerRegistry) throws -> Instance
    ) {
        self.name = name
        self.optedOut = optingOutOf
        self.isRealTime = true
        self.make = make
    }

    private init(virtualTimeNamed name: String) {
        self.name = name
        self.optedOut = [:]
        self.isRealTime = false
        self.make = { Instance(manual: ManualBackend(registry: $0)) }
    }

    /// TimerKit's `ManualBackend`, on virtual time: the checks that wait out real time are
    /// skipped on it, and the others check exact times.
    public static let manual = BackendUnderTest(virtualTimeNamed: "manual")

    /// TimerKit's `DispatchBackend` on a queue of its own.
    public static let dispatch = BackendUnderTest("dispatch") { .init(DispatchBackend(registry: $0)) }

    /// TimerKit's `EpollBackend`, with a loop thread of its own: what ``ConformanceComparison``
    /// compares a backend with unless told otherwise.
    public static let epoll = BackendUnderTest("epoll") { .init(try EpollBackend(registry: $0)) }

    /// The same backend with the timers the checks schedule with a handler kept as timers
    /// scheduled with a key (`TimerBackend/schedule(_:name:tolerance:missedTicks:calling:)`),
    /// whose callback calls the handler: every check then runs through what the key path runs
    /// (calls through a `TimerCallback`, its `timerEnded`, the end of a timer a callback owns).
    /// For a backend that schedules through TimerKit's `TimerScheduler`, as TimerKit's do.
    public var throughKeys: BackendUnderTest {
        let make = self.make
        return BackendUnderTest(
            name: "\(name) via keys", optedOut: optedOut, isRealTime: isRealTime,
            make: { registry in
                let instance = try make(registry)
                instance.backend.scheduler.keepsHandlesAsKeyedTimers = true
                return instance
            })
    }

    private init(
        name: String, optedOut: [ConformanceCheck.Need: String], isRealTime: Bool,
        make: @escaping @Sendable (TimerRegistry) throws -> Instance
    ) {
        self.name = name
        self.optedOut = optedOut
        self.isRealTime = isRealTime
        self.make = make
    }

    public var description: String { name }
    public var testDescription: String { name }

    /// Makes the backend with a registry of its own, under a watchdog that runs until
    /// `Harness.shutdown()`.
    ///
    /// 90 s: a check's own steps run on a thread of its own, and so do the tasks its timers
    /// start (`scheduleAsync(executorPreference: h.taskExecutor)`): a test suite's blocking
    /// tests can hold the global executor's threads until they are done. Before the checks'
    /// tasks left it, a check waited past 30 s there in 6 runs of 10 with two spinning processes
    /// beside the suite (`test-under-load`), and past 90 s in 1 run of 40. A hang still fails
    /// within minutes.
    package func makeHarness(watchdogSeconds: Double = 90) throws -> Harness {
        let what = ConformanceCheck.running ?? Test.current.map { "\($0.name) [\(name)]" }
        let watchdog = Watchdog(what, seconds: watchdogSeconds)
        do {
            let instance = try make(TimerRegistry())
            return Harness(
                name: name, backend: instance.backend, manual: instance.manual, watchdog: watchdog,
                onCallerContext: instance.callerContext, teardown: instance.teardown)
        } catch {
            watchdog.disarm()
            throw error
        }
    }
}
