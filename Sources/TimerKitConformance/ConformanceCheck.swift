import Testing
@_spi(BackendImplementation) import TimerKit

/// One promise of the backend contract, checked on a backend you give it.
///
/// Pass ``all`` to a parameterised Swift Testing test and run each check on your backend:
///
/// ```swift
/// @Test(arguments: ConformanceCheck.all)
/// func meetsTheContract(_ check: ConformanceCheck) async throws {
///     try await check.run(on: .pumped)
/// }
/// ```
///
/// Each check makes a backend of its own (with a registry of its own), runs under a watchdog
/// that ends the test process if it hangs, and shuts the backend down before it returns.
/// Failures are recorded as issues of the running test, with messages that name the check and
/// the backend. A check the backend cannot take (see ``Need``) records a warning that names
/// the reason and passes.
public struct ConformanceCheck: Sendable, Hashable, CustomStringConvertible, CustomTestStringConvertible {
    /// The part of the contract a check belongs to.
    public enum Group: String, Sendable, CaseIterable {
        /// Schedules, ordering, repeats, missed ticks, cancel, suspend, shutdown, the registry.
        case contract
        /// Re-entrant releases, cancel racing fire, shutdown from inside a handler.
        case adversarial
        /// Debouncer, Throttler, Timeout, ReusedTimer, `scheduleAsync`, end reasons, jitter.
        case helpers
        /// `sleep`, the backend's `Clock`, tick sequences and tasks on the loop.
        case concurrency
        /// A display link's frames delivered on the backend.
        case displayDelivery
        /// Many timers from many threads at once.
        case stress
        /// Deadlines on the wall and continuous clocks.
        case clocks
        /// Timers scheduled with a key: what a key answers and what its callback hears.
        case keys
    }

    /// What a check needs of a backend beyond the basic contract. A backend without one
    /// opts out of it (``BackendUnderTest/init(_:optingOutOf:make:)``) and the checks that
    /// need it are skipped with the reason given.
    public enum Need: String, Sendable, CaseIterable {
        /// The check waits out real time; skipped on virtual time (``BackendUnderTest/manual``),
        /// where other checks test the same promise exactly.
        case realTime
        /// The check acts on the backend from the context that owns it: a block on the caller's
        /// queue, a callback of the caller's loop (``BackendUnderTest/Instance/init(_:callerContext:teardown:)``).
        case callerContext
        /// The check uses Swift Concurrency on the backend: `sleep`, its `Clock`, `ticks`, its
        /// `taskExecutor`.
        case concurrency
        /// The check has a `DisplayLink` deliver frames on the backend.
        case displayDelivery
    }

    /// The check's name: what it promises, in camel case.
    public let name: String
    /// The part of the contract it belongs to.
    public let group: Group
    /// What it needs beyond the basic contract.
    public let needs: Set<Need>
    private let body: Body

    private enum Body: Sendable {
        case blocking(@Sendable (BackendUnderTest) throws -> Void)
        case async(@Sendable (BackendUnderTest) async throws -> Void)
    }

    init(_ name: String, _ group: Group, needs: Set<Need> = [], _ body: @escaping @Sendable (BackendUnderTest) throws -> Void) {
        self.name = name
        self.group = group
        self.needs = needs
        self.body = .blocking(body)
    }

    init(_ name: String, _ group: Group, needs: Set<Need> = [], _ body: @escaping @Sendable (BackendUnderTest) async throws -> Void) {
        self.name = name
        self.group = group
        self.needs = needs
        self.body = .async(body)
    }

    /// Every check, grouped in the order of ``Group``.
    public static let all: [ConformanceCheck] =
        Checks.checks + Checks.Adversarial.checks + Checks.Helpers.checks + Checks.Concurrency.checks
        + Checks.DisplayDelivery.checks + Checks.Stress.checks + Checks.Clocks.checks + Checks.Keys.checks

    /// The checks of one group.
    public static func all(in group: Group) -> [ConformanceCheck] { all.filter { $0.group == group } }

    /// Why `backend` cannot take this check, or nil when it runs.
    public func skipReason(on backend: BackendUnderTest) -> String? {
        if needs.contains(.realTime) && !backend.isRealTime {
            return "it waits out real time, and \(backend.name) runs on virtual time"
        }
        for need in Need.allCases where needs.contains(need) {
            if let reason = backend.optedOut[need] { return "\(backend.name) opted out of \(need.rawValue): \(reason)" }
        }
        return nil
    }

    /// Runs the check on a backend that `backend` makes. Issues are recorded in the running
    /// test; a check `backend` cannot take records a warning with ``skipReason(on:)`` instead.
    /// Throws what the check's own code throws (a refused schedule, a failed `make`).
    public func run(on backend: BackendUnderTest) async throws {
        if let reason = skipReason(on: backend) {
            Issue.record("\(name) skipped: \(reason)", severity: .warning)
            return
        }
        try await Self.$running.withValue("\(name) [\(backend.name)]") {
            // Every check runs on a thread of its own. A blocking check run on the cooperative
            // pool holds one of its threads (one per core) for its whole run, and an async step
            // queued behind such checks came seconds late, long after its watchdog was armed:
            // under load, tests timed out and sleeps that ended on time seemed late.
            let executor = ThreadTaskExecutor()
            defer { executor.stop() }
            // At a priority of its own: what the check leaves to the global executor (the tasks
            // a shut-down backend hands on, a task of no preference) waits only for the checks'
            // own jobs. The global executor runs each priority on threads of their own, and a
            // test run's blocking tests fill the default priority's: a check's task queued
            // behind them did not start within its 90 s watchdog (`test-under-load`, 9 of 16
            // runs, every backend at once).
            let body = self.body
            let check = Task(executorPreference: executor, priority: .high) {
                switch body {
                case .blocking(let check): try check(backend)
                case .async(let check): try await check(backend)
                }
            }
            try await withTaskCancellationHandler {
                try await check.value
            } onCancel: {
                check.cancel()
            }
        }
    }

    /// The check and backend running in this task, for the watchdog's message.
    @TaskLocal static var running: String?

    public var description: String { "\(group.rawValue)/\(name)" }
    public var testDescription: String { description }

    public static func == (lhs: ConformanceCheck, rhs: ConformanceCheck) -> Bool { lhs.name == rhs.name && lhs.group == rhs.group }
    public func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(group)
    }
}
