import Dispatch
import Foundation
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
                let mutex = FutexLock()
                mutex.lock()
                mutex.lock()
            }
            let message = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
            #expect(message.contains("taken again by the thread that holds it"))
        #endif
    }

    /// A debug build's lock also refuses to be let go of by a thread that does not hold it.
    @Test func aLockLetGoOfByAnotherThreadCrashesWithAMessage() async {
        #if DEBUG
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let mutex = FutexLock()
                mutex.unlock()
            }
            let message = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
            #expect(message.contains("does not hold it"))
        #endif
    }

    /// Threads that take the lock at once each find what the last holder left: 4 threads ×
    /// 50,000 increments of a plain counter under the lock make exactly 200,000, and no thread
    /// is left asleep on the futex (the watchdog).
    @Test func contendedLockingLosesNoUpdateAndLeavesNoThreadAsleep() {
        final class Counter: @unchecked Sendable {
            // @unchecked: `value` is read and written only under `lock`.
            let lock = FutexLock()
            var value = 0
        }
        let counter = Counter()
        withWatchdog("contended lock", seconds: 60) {
            DispatchQueue.concurrentPerform(iterations: 4) { _ in
                for _ in 0..<50_000 { counter.lock.withLock { counter.value += 1 } }
            }
        }
        #expect(counter.lock.withLock { counter.value } == 200_000)
    }

    /// A broadcast wakes every waiter, including one that is about to sleep (it read the
    /// condition before the broadcast): 8 threads of their own (not a pool's, which other tests
    /// may hold) wait for each of 200 rounds, one thread starts each round and broadcasts, and
    /// every waiter returns from every round.
    @Test func aBroadcastWakesEveryWaiter() {
        final class Gate: @unchecked Sendable {
            // @unchecked: `round` and `returned` are read and written only under `lock`.
            let lock = FutexLock()
            let roundStarted = FutexCondition()
            let waiterReturned = FutexCondition()
            var round = 0
            var returned = 0
        }
        let gate = Gate()
        let (waiters, rounds) = (8, 200)
        withWatchdog("condition broadcast", seconds: 60) {
            for _ in 0..<waiters {
                Thread {
                    for round in 1...rounds {
                        gate.lock.lock()
                        while gate.round < round { gate.roundStarted.wait(gate.lock) }
                        gate.returned += 1
                        gate.waiterReturned.broadcast()
                        gate.lock.unlock()
                    }
                }.start()
            }
            for round in 1...rounds {
                gate.lock.lock()
                gate.round = round
                gate.roundStarted.broadcast()
                while gate.returned < waiters * round { gate.waiterReturned.wait(gate.lock) }
                gate.lock.unlock()
            }
        }
        #expect(gate.lock.withLock { gate.returned } == waiters * rounds)
    }
}
