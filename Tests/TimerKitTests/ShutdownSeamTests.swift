import Dispatch
import Foundation
import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// A key's callback that runs `ended` when told its timer has ended.
private final class WhenEnded: TimerCallback {
    let ended: @Sendable (TimerEndReason) -> Void
    init(_ ended: @escaping @Sendable (TimerEndReason) -> Void) { self.ended = ended }
    func timerFired(_ fire: TimerFire) {}
    func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) { ended(reason) }
}

private final class Silent: TimerCallback {
    func timerFired(_ fire: TimerFire) {}
}

/// The seams of a shutdown: what a call made from the code it runs does, what another thread's
/// call does while it runs, and what holds between its slices.
@Suite("Shutdown's seams", .onAThreadOfItsOwn)
struct ShutdownSeamTests {
    @Test func aShutdownCalledFromAnOnEndActionOfThatShutdownReturns() {
        let backend = ManualBackend(registry: TimerRegistry())
        let told = Locked<[TimerEndReason]>([])
        let timer = try? backend.schedule(.after(.seconds(60))) { _ in }
        timer?.onEnd { reason in
            backend.shutdown()
            told.withLock { $0.append(reason) }
        }
        #expect(returns { backend.shutdown() })
        #expect(told.current == [.backendShutDown])
    }

    @Test func aShutdownCalledFromATimerEndedOfThatShutdownReturns() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let told = Locked<[TimerEndReason]>([])
        try backend.schedule(
            .after(.seconds(60)),
            calling: WhenEnded { reason in
                backend.shutdown()
                told.withLock { $0.append(reason) }
            })
        #expect(returns { backend.shutdown() })
        #expect(told.current == [.backendShutDown])
    }

    /// `fail(with:)` on the loop's thread (a `ManualBackend`'s is the caller's), as a loop that
    /// stops on an error calls it: the callbacks hear `.loopFailed`, and their `shutdown()` returns.
    @Test func aShutdownCalledFromTheEndCallbacksOfALoopFailureReturns() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let cause = TimerError.systemCall(call: "epoll_wait", errno: 9)
        let told = Locked<[TimerEndReason]>([])
        try backend.schedule(
            .after(.seconds(60)),
            calling: WhenEnded { reason in
                backend.shutdown()
                told.withLock { $0.append(reason) }
            })
        let timer = try backend.schedule(.after(.seconds(60))) { _ in }
        timer.onEnd { reason in
            backend.shutdown()
            told.withLock { $0.append(reason) }
        }
        #expect(returns { backend.scheduler.fail(with: cause) })
        #expect(told.current.count == 2)
        #expect(told.current.allSatisfy { $0 == .loopFailed(cause) })
        #expect(backend.scheduler.failure == cause)
    }

    /// Another thread's `shutdown()` while one runs waits until every timer has ended, and is
    /// not held by the end callbacks the first one runs (they run once the timers have ended).
    @Test func aShutdownFromAnotherThreadReturnsOnceEveryTimerHasEndedWithoutWaitingForEndCallbacks() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let inCallback = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let keys = try (0..<3 * 4096).map { _ in try backend.schedule(.after(.seconds(60)), calling: Silent()) }
        try backend.schedule(
            .after(.seconds(60)),
            calling: WhenEnded { _ in
                inCallback.signal()
                _ = release.wait(timeout: .now() + .seconds(20))
            })
        let first = DispatchSemaphore(value: 0)
        onBackgroundThread {
            backend.shutdown()
            first.signal()
        }
        #expect(inCallback.wait(timeout: .now() + .seconds(20)) == .success)
        // The first shutdown is held in an end callback: every timer has ended by then.
        #expect(returns { backend.shutdown() })
        #expect(keys.allSatisfy { !backend.isActive($0) })
        release.signal()
        #expect(first.wait(timeout: .now() + .seconds(20)) == .success)
    }

    /// A `shutdown()` from an end callback, on another thread than the loop, does not wait for
    /// the shutdown it is part of, but, like any call from another thread, it waits for a
    /// handler under way on the loop: it returns once that handler has.
    @Test func aShutdownFromAnEndCallbackStillWaitsForAHandlerUnderWayOnTheLoop() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let inHandler = DispatchSemaphore(value: 0)
        let releaseHandler = DispatchSemaphore(value: 0)
        try backend.schedule(.after(.seconds(1))) { _ in
            inHandler.signal()
            _ = releaseHandler.wait(timeout: .now() + .seconds(20))
        }
        let nestedReturned = Locked(false)
        try backend.schedule(
            .after(.seconds(60)),
            calling: WhenEnded { _ in
                backend.shutdown()
                nestedReturned.withLock { $0 = true }
            })
        let loop = DispatchSemaphore(value: 0)
        onBackgroundThread {
            backend.advance(by: .seconds(1))  // the loop: the handler runs here
            loop.signal()
        }
        #expect(inHandler.wait(timeout: .now() + .seconds(20)) == .success)
        let outer = DispatchSemaphore(value: 0)
        onBackgroundThread {
            backend.shutdown()
            outer.signal()
        }
        // The timers end and the end callback runs while the handler is held.
        #expect(waitFor(.seconds(20)) { backend.registry.count == 0 })
        Thread.sleep(forTimeInterval: 0.2)
        #expect(!nestedReturned.current, "the nested shutdown returned while a handler ran on the loop")
        releaseHandler.signal()
        #expect(outer.wait(timeout: .now() + .seconds(20)) == .success)
        #expect(nestedReturned.current)
        #expect(loop.wait(timeout: .now() + .seconds(20)) == .success)
    }

    /// The hook between slices usually captures its scheduler: the shutdown lets go of it, or
    /// the two would keep each other alive (AddressSanitizer's leak check found the cycle).
    @Test func theShutdownLetsGoOfWhatRunsBetweenItsSlices() {
        weak var weakScheduler: TimerScheduler?
        let ran = Locked(0)
        do {
            let backend = ManualBackend(registry: TimerRegistry())
            let scheduler = backend.scheduler
            weakScheduler = scheduler
            _ = try? backend.schedule(.after(.seconds(60)), calling: Silent())
            scheduler.runBetweenShutdownSlices {
                _ = scheduler.pendingCount
                ran.withLock { $0 += 1 }
            }
            backend.shutdown()
        }
        #expect(ran.current > 0)
        #expect(weakScheduler == nil)
    }

    /// The defect this pins: a shutdown drains a queue from its end, which takes live entries and
    /// leaves dead ones, so between two slices dead entries outnumbered live ones past their
    /// bound, and a debug build's check after the next operation stopped the process (the issue's
    /// case: 174,000 timeouts, the middle 74,000 cancelled; here the same shape, smaller). The check
    /// knows the queue is draining now. In a process of its own: a failed check traps.
    @Test func callsBetweenTheSlicesOfAShutdownPassTheDebugBuildsChecks() async {
        await #expect(processExitsWith: .success) {
            let backend = ManualBackend(registry: TimerRegistry())
            let scheduler = backend.scheduler
            // Few enough for a child process that does not hold the run for long (an exit test's
            // parent blocks a thread of the global executor while it waits), enough for the
            // drain to leave more dead entries than live ones after its third slice.
            let keys = try (0..<40_000).map { index in
                try backend.schedule(.after(.seconds(60) + .milliseconds(index)), calling: Silent())
            }
            for key in keys[10_000..<26_000] { backend.cancel(key) }
            try backend.suspend(keys[35_000])
            let slices = Locked(0)
            let outOfBound = Locked(0)
            scheduler.runBetweenShutdownSlices {
                let slice = slices.withLock { count in
                    count += 1
                    return count
                }
                if scheduler.deadEntryCount > scheduler.pendingCount + 1 { outOfBound.withLock { $0 += 1 } }
                // What another thread's calls do there, each checked by the debug build as it ends.
                try? backend.suspend(keys[35_000])
                try? backend.suspend(keys[30_000 + slice])
                try? backend.resume(keys[35_000])
                backend.cancel(keys[33_000 + slice])
                scheduler.checkQueueInvariants()
            }
            backend.shutdown()
            // The situation of the defect did arise, and every call between slices passed.
            guard slices.current > 8, outOfBound.current > 0, keys.allSatisfy({ !backend.isActive($0) }) else { exit(1) }
        }
    }
}
