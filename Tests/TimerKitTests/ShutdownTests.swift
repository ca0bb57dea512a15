import Dispatch
import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// A driver that records its wake-ups, and flags any that come once the test has begun a
/// shutdown: nothing may arm a loop that is shutting down.
private final class RecordingDriver: TimerDriver, @unchecked Sendable {
    // @unchecked: `calls` and `shuttingDown` are guarded by `lock`.
    private let lock = FutexLock()
    private var shuttingDown = false
    private var wakesAfterShutdown: [MonotonicInstant] = []

    func wake(at deadline: MonotonicInstant) throws(TimerError) {
        lock.withLock { if shuttingDown { wakesAfterShutdown.append(deadline) } }
    }

    func beginShutdown() { lock.withLock { shuttingDown = true } }
    var lateWakes: [MonotonicInstant] { lock.withLock { wakesAfterShutdown } }
}

/// Runs `action` when it is released.
private final class OnRelease: Sendable {
    let action: @Sendable () -> Void
    init(_ action: @escaping @Sendable () -> Void) { self.action = action }
    deinit { action() }
}

@Suite("Shutdown")
struct ShutdownTests {
    @Test func aHandlerThatReturnsDuringShutdownIsNotQueuedAgain() throws {
        try withWatchdog {
            let clock = VirtualClock(start: MonotonicInstant(nanoseconds: 1_000_000_000))
            let scheduler = TimerScheduler(backendName: "recording", registry: TimerRegistry(), clock: .virtual(clock))
            let driver = RecordingDriver()
            scheduler.attach(owning: driver)
            let inHandler = DispatchSemaphore(value: 0)
            let fired = DispatchSemaphore(value: 0)
            // A second timer, still queued: the shutdown cancels it first, and the deinit of its
            // handler's capture holds the shutdown there until the fire loop has finished. So
            // the first timer's handler returns after the shutdown began and before it was
            // cancelled: the window in which it used to be queued again.
            _ = try scheduler.schedule(.after(.seconds(60)), name: nil, tolerance: .zero, policy: .skip, target: nil) {
                [holdsShutdown = OnRelease { fired.wait() }] _ in
                withExtendedLifetime(holdsShutdown) {}
            }
            let timer = try scheduler.schedule(
                .every(ms(10)), name: "repeating", tolerance: .zero, policy: .skip, target: nil
            ) { _ in
                inHandler.signal()
                // Return only once the shutdown has begun on the other thread.
                #expect(waitFor { scheduler.hasShutDown })
            }
            clock.move(to: clock.now + ms(10))
            onBackgroundThread {
                scheduler.fireDueTimers()
                fired.signal()
            }
            inHandler.wait()
            driver.beginShutdown()
            scheduler.shutdown()  // waits for the handler, which returns during it
            #expect(driver.lateWakes.isEmpty, "the driver was woken after shutdown began: \(driver.lateWakes)")
            #expect(timer.currentState == .cancelled)
            #expect(scheduler.registry.count == 0)
        }
    }

    /// A driver the scheduler owns goes at shutdown, so a scheduler that handles keep alive
    /// holds nothing of a backend that is gone; and it goes after unlocking: its release here
    /// asks the scheduler something (which takes the lock), and would hang (a debug build's
    /// lock traps) if it ran under it.
    @Test func anOwnedDriverGoesAtShutdownAndNotUnderTheLock() throws {
        try withWatchdog {
            let scheduler = TimerScheduler(backendName: "owned", registry: TimerRegistry())
            let released = Locked<Int?>(nil)
            final class OwnedDriver: TimerDriver, Sendable {
                let onRelease: OnRelease
                init(_ onRelease: OnRelease) { self.onRelease = onRelease }
                func wake(at deadline: MonotonicInstant) throws(TimerError) {}
            }
            scheduler.attach(owning: OwnedDriver(OnRelease { [weak scheduler] in released.withLock { $0 = scheduler?.pendingCount } }))
            let timer = try scheduler.schedule(.after(.seconds(60)), name: nil, tolerance: .zero, policy: .skip, target: nil) { _ in }
            #expect(released.withLock { $0 } == nil)
            scheduler.shutdown()
            #expect(released.withLock { $0 } != nil, "the driver was not released at shutdown")
            #expect(timer.currentState == .cancelled)
            withExtendedLifetime(timer) {}
        }
    }
}

@Suite("ManualBackend from several threads")
struct ManualThreadingTests {
    @Test func advanceCallsFromTwoThreadsTakeTurns() throws {
        try withWatchdog {
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let order = Locked<[String]>([])
            let inHandler = DispatchSemaphore(value: 0)
            let letGo = DispatchSemaphore(value: 0)
            try clock.schedule(.after(ms(10))) { _ in
                order.withLock { $0.append("first handler begins") }
                inHandler.signal()
                letGo.wait()
                order.withLock { $0.append("first handler ends") }
            }
            try clock.schedule(.after(ms(30))) { _ in order.withLock { $0.append("at 30 ms") } }
            let done = DispatchSemaphore(value: 0)
            onBackgroundThread {
                clock.advance(by: ms(10))
                done.signal()
            }
            inHandler.wait()
            onBackgroundThread {
                clock.advance(by: ms(30))  // waits for the first call's turn to end
                done.signal()
            }
            blockRealTime(ms(20))
            // While a handler runs, other threads use the backend freely: no lock of it is held.
            try clock.schedule(.after(ms(5))) { _ in order.withLock { $0.append("at 15 ms") } }
            #expect(clock.registry.count == 3)
            letGo.signal()
            done.wait()
            done.wait()
            #expect(order.current == ["first handler begins", "first handler ends", "at 15 ms", "at 30 ms"])
        }
    }
}
