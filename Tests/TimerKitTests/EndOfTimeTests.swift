import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// Virtual time driven to, and past, the end of the timeline: `advance` must return, fire
/// what is due on the way, and never fire what lies past `MonotonicInstant.horizon`.
@Suite("Manual: the end of time")
struct EndOfTimeTests {
    @Test func advancingToTheEndOfTimeWithNothingPendingReturns() {
        withWatchdog(seconds: 10) {
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            clock.advance(to: .distantFuture)
            clock.advance(to: .distantFuture)
            #expect(clock.now() == .distantFuture)
        }
    }

    @Test func advancingByTheLongestDurationTwiceReturns() {
        withWatchdog(seconds: 10) {
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            clock.advance(by: .seconds(Int64.max))
            clock.advance(by: .seconds(Int64.max))
            #expect(clock.now() == .distantFuture, "the clock saturates at the end of time")
            clock.advance(by: .seconds(1))
            #expect(clock.now() == .distantFuture)
        }
    }

    @Test func dueTimersFireOnTheWayAndTimersPastTheHorizonNever() throws {
        try withWatchdog(seconds: 10) {
            let registry = TimerRegistry()
            let clock = ManualBackend(registry: registry)
            defer { clock.shutdown() }
            let fired = Locked<[String]>([])
            let record: @Sendable (Tick) -> Void = { tick in fired.withLock { $0.append(tick.timer.name) } }
            try clock.schedule(.after(.seconds(1)), name: "soon", handler: record)
            try clock.schedule(.every(.seconds(1), count: 3), name: "thrice", handler: record)
            try clock.schedule(.after(.seconds(Int64.max)), name: "int64-max", handler: record)
            try clock.schedule(.at(.distantFuture), name: "distant-future", handler: record)
            try clock.schedule(.at(MonotonicInstant.horizon), name: "horizon", handler: record)
            try clock.schedule(.after(seconds: 1e300), name: "1e300", handler: record)
            clock.advance(to: .distantFuture)
            clock.advance(to: .distantFuture)
            #expect(fired.current == ["soon", "thrice", "thrice", "thrice"])
            #expect(registry.names == ["1e300", "distant-future", "horizon", "int64-max"], "they stay scheduled")
            #expect(clock.requestedWakeUp == .distantFuture, "and no wake-up is ever requested for them")
        }
    }

    @Test func aDeadlineJustBeforeTheHorizonStillFires() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let fired = Locked(false)
        let justBefore = MonotonicInstant(nanoseconds: MonotonicInstant.horizon.nanoseconds - 1)
        try clock.schedule(.at(justBefore), tolerance: .seconds(Int64.max)) { _ in fired.withLock { $0 = true } }
        #expect(clock.requestedWakeUp == justBefore, "a huge tolerance cannot push a deadline past the horizon")
        withWatchdog(seconds: 10) { clock.advance(to: .distantFuture) }
        #expect(fired.current)
    }
}

@Suite("Locks")
struct LockTests {
    /// A debug build's mutex is error-checking: a lock taken again by the thread that holds
    /// it (user code run under a TimerKit lock, calling back in) crashes with a message.
    @Test func aLockTakenTwiceByOneThreadCrashesWithAMessage() async {
        #if DEBUG
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let mutex = PThreadMutex()
                mutex.lock()
                mutex.lock()
            }
            let message = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
            #expect(message.contains("taken again by the thread that holds it"))
        #endif
    }
}
