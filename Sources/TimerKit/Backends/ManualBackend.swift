import Glibc

/// A backend on virtual time, for tests: nothing fires until you advance the clock, and
/// then everything due fires synchronously on the calling thread, in deadline order.
///
/// ```swift
/// let clock = ManualBackend()
/// try clock.schedule(.every(.seconds(1))) { tick in print(tick.index) }
/// clock.advance(by: .seconds(3))   // prints 0, 1, 2
/// ```
public final class ManualBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: `wakeRequest` and `advancingThread` are guarded by `mutex`; the clock
    // guards itself.

    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    private let mutex = PThreadMutex()
    private let advancing = PThreadMutex()
    private let clock: VirtualClock
    private var wakeRequest = MonotonicInstant.distantFuture
    private var advancingThread: pthread_t?
    private var wakeFailure: TimerError?

    /// Creates a manual clock starting at `start`, registering timers in `registry`.
    public init(
        start: MonotonicInstant = MonotonicInstant(nanoseconds: 1_000_000_000),
        registry: TimerRegistry = .shared, name: String = "manual"
    ) {
        clock = VirtualClock(start: start)
        scheduler = TimerScheduler(backendName: name, registry: registry, clock: .virtual(clock))
        scheduler.attach(self)
    }

    deinit { scheduler.shutdown() }

    /// The deadline the scheduler last asked to be woken at (`.distantFuture`: none):
    /// lets tests check that the core re-arms only when the earliest deadline changes.
    public var requestedWakeUp: MonotonicInstant { mutex.withLock { wakeRequest } }

    /// Makes every `wake(at:)` fail with this error, to test how the core handles a
    /// backend whose native mechanism refuses. Nil (the default) restores normal behaviour.
    package var injectedWakeFailure: TimerError? {
        get { mutex.withLock { wakeFailure } }
        set { mutex.withLock { wakeFailure = newValue } }
    }

    /// Moves virtual time forward by `duration`, firing everything that comes due.
    /// A negative duration does nothing; a huge one saturates at the end of time.
    public func advance(by duration: Duration) {
        advance(to: clock.now + max(duration, .zero))
    }

    /// Moves virtual time to `deadline` (never backwards), firing everything that comes due
    /// in deadline order; each handler sees the virtual time of its own deadline.
    ///
    /// Called from inside a handler, it moves the clock without firing anything: that is how
    /// a test makes a handler "take" virtual time (to exercise the missed-tick policies);
    /// what came due fires after the handler returns.
    ///
    /// Each due tick runs in turn, so advancing far past a repeating timer runs every tick of
    /// it on the way (`.skip` drops none: each one is on time in virtual time). Timers that
    /// other threads schedule while it runs fire too if they come due before `deadline`, so
    /// threads that keep adding such timers keep it busy. Deadlines at or past
    /// `MonotonicInstant.horizon` never come, however far the clock moves.
    public func advance(to deadline: MonotonicInstant) {
        let reentrant = mutex.withLock {
            guard let thread = advancingThread, pthread_equal(thread, pthread_self()) != 0 else { return false }
            clock.move(to: deadline)
            return true
        }
        if reentrant { return }
        advancing.lock()
        mutex.withLock { advancingThread = pthread_self() }
        defer {
            mutex.withLock { advancingThread = nil }
            advancing.unlock()
        }
        while true {
            let next = mutex.withLock { wakeRequest }
            // `.distantFuture` is "nothing pending", even when `deadline` is the end of time.
            guard next != .distantFuture, next <= deadline else { break }
            mutex.withLock { wakeRequest = .distantFuture }
            clock.move(to: next)
            scheduler.fireDueTimers()
        }
        clock.move(to: deadline)
    }

    /// Moves virtual time forward without firing anything, as if the loop had been blocked
    /// (a long handler elsewhere, a run loop in another mode). What came due fires at the
    /// next `advance` or `runDue()`, under each timer's missed-tick policy.
    public func stall(for duration: Duration) {
        clock.move(to: clock.now + max(duration, .zero))
    }

    /// Fires whatever is due at the current virtual time without moving it.
    public func runDue() { advance(by: .zero) }

    public func shutdown() { scheduler.shutdown() }
}

@_spi(BackendImplementation) extension ManualBackend: TimerDriver {
    public func wake(at deadline: MonotonicInstant) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if let failure = wakeFailure { throw failure }
            wakeRequest = deadline
        }
    }
}
