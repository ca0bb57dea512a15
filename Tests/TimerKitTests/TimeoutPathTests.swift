import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// A driver that refuses to arm while `refuses` is set, as a timerfd whose descriptor was
/// closed under it would.
private final class RefusingDriver: TimerDriver, @unchecked Sendable {
    // @unchecked: `refusing` is guarded by `lock`.
    private let lock = FutexLock()
    private var refusing = true
    static let refusal = TimerError.systemCall(call: "timerfd_settime", errno: 9)

    var refuses: Bool {
        get { lock.withLock { refusing } }
        set { lock.withLock { refusing = newValue } }
    }

    func wake(at deadline: MonotonicInstant) throws(TimerError) {
        if refuses { throw Self.refusal }
    }
}

/// Counts the ends it hears, and why.
private final class EndCounter: TimerCallback, @unchecked Sendable {
    // @unchecked: `reasons` is guarded by `lock`.
    private let lock = FutexLock()
    private var heard: [TimerEndReason] = []
    func timerFired(_ fire: TimerFire) {}
    func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) { lock.withLock { heard.append(reason) } }
    var reasons: [TimerEndReason] { lock.withLock { heard } }
}

/// A timeout — once, after a delay, on the monotonic clock, with no name or tolerance — is
/// added in one short critical section of its own; any other timer, and a timeout the
/// scheduler cannot take that way (shut down, at a cap, out of room), goes the general way.
/// Both must end in the same state: these tests hold them to it.
@Suite("Timeouts' own path")
struct TimeoutPathTests {
    @Test(arguments: [false, true])
    func aTimerTheDriverRefusesToArmIsEndedAndTheRefusalThrown(named: Bool) throws {
        let clock = VirtualClock(start: MonotonicInstant(nanoseconds: 1_000_000_000))
        let registry = TimerRegistry()
        let scheduler = TimerScheduler(backendName: "refusing", registry: registry, clock: .virtual(clock))
        defer { scheduler.shutdown() }
        let driver = RefusingDriver()
        scheduler.attach(owning: driver)
        // A name sends the timer the general way; without one, a timeout takes its own.
        #expect(throws: RefusingDriver.refusal) {
            try scheduler.schedule(.after(.seconds(1)), name: named ? "handle" : nil, tolerance: .zero, policy: .skip, target: nil) { _ in }
        }
        let callback = EndCounter()
        #expect(throws: RefusingDriver.refusal) {
            try scheduler.schedule(
                .after(.seconds(1)), name: named ? "key" : nil, tolerance: .zero, policy: .skip, calling: callback, of: EndCounter.self)
        }
        #expect(callback.reasons == [.cancelled], "the refused timer ended, and its callback heard so once")
        #expect(scheduler.liveTimers == 0)
        #expect(registry.count == 0)
        // The refusal armed nothing: once the driver takes wake-ups, the next timeout is added.
        driver.refuses = false
        let handle = try scheduler.schedule(.after(.seconds(1)), name: nil, tolerance: .zero, policy: .skip, target: nil) { _ in }
        #expect(handle.currentState == .scheduled)
        #expect(scheduler.liveTimers == 1)
    }

    @Test func aKeysTimeoutIsRefusedAtEitherCapAndCounted() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let callback = EndCounter()
        try backend.limitLiveTimers(to: 1)
        let first = try backend.schedule(.after(.seconds(1)), calling: callback)
        #expect(throws: TimerError.liveTimerLimit(scope: "manual backend", limit: 1)) {
            try backend.schedule(.after(.seconds(1)), calling: callback)
        }
        #expect(backend.refusedByLiveTimerLimit == 1)
        try backend.limitLiveTimers(to: nil)
        try registry.limitLiveTimers(to: 2)
        try backend.schedule(.after(.seconds(1)), calling: callback)
        #expect(throws: TimerError.liveTimerLimit(scope: "registry", limit: 2)) {
            try backend.schedule(.after(.seconds(1)), calling: callback)
        }
        #expect(registry.refusedByLiveTimerLimit == 1)
        #expect(callback.reasons.isEmpty, "a refused timer was never live: its callback hears nothing")
        backend.cancel(first)
        try backend.schedule(.after(.seconds(1)), calling: callback)
        #expect(backend.statistics.liveTimers == 2)
    }

    @Test func aTimeoutOnAShutDownBackendIsRefusedOnBothPaths() {
        let backend = ManualBackend(registry: TimerRegistry())
        backend.shutdown()
        #expect(throws: TimerError.backendShutDown(backend: "manual")) { try backend.schedule(.after(.seconds(1))) { _ in } }
        #expect(throws: TimerError.backendShutDown(backend: "manual")) { try backend.schedule(.after(.seconds(1)), calling: EndCounter()) }
    }

    /// Past 4,096 timers the store and the queue need chunks of memory the timeouts' path does
    /// not map: the timeout at each edge goes the general way, and every timer still fires once,
    /// in deadline order, through both paths.
    @Test func timeoutsPastEveryChunkEdgeFireOnceInDeadlineOrder() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        final class Order: TimerCallback, @unchecked Sendable {
            // @unchecked: Manual fires on the thread that advances it, the test's.
            var fired: [TimerKey] = []
            func timerFired(_ fire: TimerFire) { fired.append(fire.key) }
        }
        let order = Order()
        let count = 3 * 4_096 + 7
        // Deadlines in an order unlike the schedules': 1 ms apart, stepping through a permutation.
        var keys: [Int: TimerKey] = [:]
        var handles: [Int: TimerHandle] = [:]
        let handleOrder = Locked<[Int]>([])
        for index in 0..<count {
            let step = (index * 7_919) % count
            let delay = Duration.milliseconds(step + 1)
            if index.isMultiple(of: 2) {
                keys[step] = try backend.schedule(.after(delay), calling: order)
            } else {
                handles[step] = try backend.schedule(.after(delay)) { _ in handleOrder.withLock { $0.append(step) } }
            }
        }
        #expect(Set(keys.values).count == keys.count, "every key names a timer of its own")
        #expect(backend.statistics.liveTimers == count)
        backend.advance(by: .milliseconds(count + 1))
        let keySteps = keys.sorted { $0.key < $1.key }.map(\.value)
        #expect(order.fired == keySteps, "each key's timer fired once, in deadline order")
        #expect(handleOrder.withLock { $0 } == handles.keys.sorted(), "each handle's timer fired once, in deadline order")
        #expect(handles.values.allSatisfy { $0.currentState == .finished && $0.fireCount == 1 })
        #expect(backend.statistics.liveTimers == 0)
    }
}
