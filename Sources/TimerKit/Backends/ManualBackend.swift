import Foundation
import Glibc
import Synchronization

/// A backend on virtual time, for tests: nothing fires until you advance the clock, and
/// then everything due fires synchronously on the calling thread, in deadline order.
///
/// ```swift
/// let clock = ManualBackend()
/// try clock.schedule(.every(.seconds(1))) { tick in print(tick.index) }
/// clock.advance(by: .seconds(3))   // prints 0, 1, 2
/// ```
///
/// It is also a deterministic test clock for `async` code: hand `clock` (a `Clock<Duration>`)
/// to the code under test, run that code's tasks on `taskExecutor`, and `await
/// advanceAndSettle(by:)` fires what came due and returns once those tasks have all finished or are
/// suspended again — no `Task.yield` loops, sleeps or time-outs. See the "Testing with
/// ManualBackend" article.
///
/// Handlers run on the thread that calls `advance`, and no TimerKit lock is held while they
/// run. Calls of `advance` from different threads take turns: one made while another
/// thread's call is running handlers waits until that call returns, then fires what is still
/// due. So a handler must not wait for another thread that advances the same backend (that
/// thread waits for the handler's `advance` to return); a handler that calls `advance` itself
/// moves the clock without waiting (see `advance(to:)`).
public final class ManualBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: `advancingThread` is guarded by `mutex`; the clock and `wakeUps` guard
    // themselves.

    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    @_spi(BackendImplementation) public var unretainedScheduler: Unmanaged<TimerScheduler> { .passUnretained(scheduler) }
    private let mutex = FutexLock()
    /// Broadcast when an `advance` call ends its turn.
    private let turnEnded = FutexCondition()
    private let clock: VirtualClock
    private var advancingThread: pthread_t?
    /// The scheduler's driver: the wake-up it asked for last.
    private let wakeUps = ManualWakeUps()
    private let executor = ManualTaskExecutor()

    /// Creates a manual clock starting at `start`, registering timers in `registry`. Its
    /// virtual wall clock starts at `wallClockStart` (by default 2026-01-01 00:00:00 UTC, so
    /// that tests give the same dates on every machine), and its continuous clock with the
    /// monotonic one.
    public init(
        start: MonotonicInstant = MonotonicInstant(nanoseconds: 1_000_000_000),
        registry: TimerRegistry = .shared, name: String = "manual",
        wallClockStart: Date = Date(timeIntervalSince1970: 1_767_225_600)
    ) {
        clock = VirtualClock(start: start, wallStart: wallClockStart.nanosecondsSince1970)
        scheduler = TimerScheduler(backendName: name, registry: registry, clock: .virtual(clock), taskExecutor: executor)
        scheduler.attach(owning: wakeUps)
    }

    deinit { shutdown() }

    /// The executor for the tasks under test: start them with
    /// `Task(executorPreference: clock.taskExecutor) { ... }` or inside
    /// `withTaskExecutorPreference(clock.taskExecutor) { ... }` (their structured children,
    /// `async let` and task groups, inherit it; an unstructured `Task {}` does not), and
    /// `settle()` and `advanceAndSettle(by:)` wait for them.
    /// Tasks of `scheduleAsync` on this backend run there too. Tasks isolated to an actor (such
    /// as the main actor) run on that actor instead, and are not waited for.
    public var taskExecutor: ManualTaskExecutor { executor }

    /// Waits until every task on `taskExecutor` has finished or is suspended (in a sleep on
    /// this clock, or waiting for anything else); at once if none is running. Virtual time
    /// does not move. A test whose own body runs on `taskExecutor` (inside
    /// `withTaskExecutorPreference`) may call it: it waits for the other tasks.
    public func settle() async {
        await executor.settle()
    }

    /// The deadline the scheduler last asked to be woken at (`.distantFuture`: none):
    /// lets tests check that the core re-arms only when the earliest deadline changes.
    public var requestedWakeUp: MonotonicInstant { wakeUps.request }

    /// Makes every `wake(at:)` fail with this error, to test how the core handles a
    /// backend whose native mechanism refuses. Nil (the default) restores normal behaviour.
    package var injectedWakeFailure: TimerError? {
        get { wakeUps.lock.withLock { wakeUps.failure } }
        set { wakeUps.lock.withLock { wakeUps.failure = newValue } }
    }

    /// Makes the jitter of this backend's timers (`TimerSchedule/every(_:firstAfter:count:jitter:)`)
    /// repeatable: after the same seed, the same schedules draw the same delays. Every backend
    /// starts from a random seed.
    public func seedJitter(_ seed: UInt64) { scheduler.seedJitter(seed) }

    /// Moves virtual time forward by `duration`, firing everything that comes due.
    /// A negative duration does nothing; a huge one saturates at the end of time.
    public func advance(by duration: Duration) {
        advanceSynchronously(to: clock.now + (duration.isNegative ? .zero : duration))
    }

    /// Moves virtual time forward by `duration` for code running on `taskExecutor`.
    ///
    /// First it settles (the tasks under test get to run until they all wait, so that every
    /// sleep they are about to start is scheduled); then, deadline by deadline up to the
    /// target, it moves the clock to the next deadline, fires what is due there, and settles
    /// again. So a resumed task runs at the virtual time it woke at, and the timers it
    /// schedules within the window fire too, each at its own time. It returns with the clock
    /// at the target and every task on `taskExecutor` finished or suspended.
    ///
    /// Unlike `advance(by:)`, which fires handlers and returns, it waits for the tasks that
    /// the fired timers resume, so it is `async`; call it from the test, not from a handler.
    public func advanceAndSettle(by duration: Duration) async {
        await advanceAndSettle(to: clock.now + (duration.isNegative ? .zero : duration))
    }

    /// Moves virtual time to `deadline` for code running on `taskExecutor`, as
    /// `advanceAndSettle(by:)` does.
    public func advanceAndSettle(to deadline: MonotonicInstant) async {
        await settle()
        while true {
            let next = wakeUps.request
            guard next != .distantFuture, next <= deadline else { break }
            advanceSynchronously(to: max(next, clock.now))
            await settle()
        }
        advanceSynchronously(to: deadline)
    }

    /// Moves virtual time to `deadline` (never backwards), firing everything that comes due
    /// in deadline order; each handler sees the virtual time of its own deadline.
    ///
    /// Called from inside a handler, it moves the clock without firing anything: that is how
    /// a test makes a handler "take" virtual time (to exercise the missed-tick policies).
    /// What came due fires once the handler has returned: in the outer call, if a timer of that
    /// call's window is still to fire there (it fires everything due at the clock's reading);
    /// otherwise at the next `advance` or `runDue()`, as after `stall(for:)`.
    ///
    /// Each due tick runs in turn, so advancing far past a repeating timer runs every tick of
    /// it on the way (`.skip` drops none: each one is on time in virtual time). Timers that
    /// other threads schedule while it runs fire too if they come due before `deadline`, so
    /// threads that keep adding such timers keep it busy. Deadlines at or past
    /// `MonotonicInstant.horizon` never come, however far the clock moves.
    public func advance(to deadline: MonotonicInstant) {
        advanceSynchronously(to: deadline)
    }

    private func advanceSynchronously(to deadline: MonotonicInstant) {
        mutex.lock()
        if let thread = advancingThread, pthread_equal(thread, pthread_self()) != 0 {
            clock.move(to: deadline)  // from a handler: the outer call, or the next, fires what came due
            mutex.unlock()
            return
        }
        // Another thread's turn: wait for it without holding anything while its handlers run.
        while advancingThread != nil { turnEnded.wait(mutex) }
        advancingThread = pthread_self()
        mutex.unlock()
        defer {
            mutex.withLock {
                advancingThread = nil
                turnEnded.broadcast()
            }
        }
        while true {
            // `.distantFuture` is "nothing pending", even when `deadline` is the end of time.
            guard let next = wakeUps.take(upTo: deadline) else { break }
            clock.move(to: next)
            scheduler.fireDueTimers()
        }
        clock.move(to: deadline)
    }

    /// Moves virtual time forward without firing anything, as if the loop had been blocked
    /// (a long handler elsewhere, a run loop in another mode). What came due fires at the
    /// next `advance` or `runDue()`, under each timer's missed-tick policy.
    public func stall(for duration: Duration) {
        clock.move(to: clock.now + (duration.isNegative ? .zero : duration))
    }

    /// Fires whatever is due at the current virtual time without moving it.
    public func runDue() { advanceSynchronously(to: clock.now) }

    /// Steps the virtual wall clock by `step`, forward or back, as an administrator or NTP
    /// steps a real one; the monotonic and continuous clocks do not move. Timers on the wall
    /// clock are re-evaluated at once: those the step jumped past fire now, once (their ticks
    /// say `clockChanged`), and none fires before its date. Observers hear a `clockChanged`
    /// event while a timer waits on the wall or continuous clock: for any step, however small
    /// (virtual clocks read exactly; on the kernel's clocks a step below 0.2 ms cannot be told
    /// from the spread of two readings and is no event). Call it from the test, not from a
    /// handler.
    public func stepWallClock(by step: Duration) {
        clock.stepWall(by: step.saturatingNanoseconds)
        scheduler.clockMayHaveChanged()
        runDue()
    }

    /// Simulates a suspend of the machine for `duration`: the monotonic clock stands still
    /// while the continuous and wall clocks move on. On resume, timers on those clocks that
    /// came due meanwhile fire once, under their missed-tick policy; monotonic timers keep
    /// their deadlines, which the suspend did not bring nearer. Call it from the test.
    public func simulateSuspend(for duration: Duration) {
        clock.suspend(for: UInt64(duration.isNegative ? 0 : duration.saturatingNanoseconds))
        scheduler.clockMayHaveChanged()
        runDue()
    }

    public func shutdown() {
        scheduler.shutdown()
        executor.stop()
    }
}

/// A `ManualBackend`'s driver: the wake-up its scheduler asked for last. An object of its own,
/// which the scheduler owns (`TimerScheduler.attach(owning:)`): it holds neither the backend
/// nor the scheduler, so no weak reference to the backend is needed (a weak reference gives
/// its object a side table, and every retain and release of the backend would then take the
/// runtime's slow path: ~250 instructions per fire).
final class ManualWakeUps: TimerDriver, @unchecked Sendable {
    // @unchecked: `failure` is read and written only under `lock`; `requested` and `failing` are
    // atomics. The wake-up asked for is one word that a fire asks for and the advancing loop
    // takes once per fire: an atomic, where a lock cost two lock-and-unlock pairs a fire.
    let lock = FutexLock()
    /// The wake-up asked for last, in nanoseconds; `.max` (`.distantFuture`) for none.
    private let requested = Atomic<UInt64>(.max)
    /// Whether `failure` is set: a wake-up request looks at `failure` only then.
    private let failing = Atomic<Bool>(false)
    /// Set by tests: every wake-up request fails with it.
    private var failureStorage: TimerError?

    var failure: TimerError? {
        get { failureStorage }
        set {
            failureStorage = newValue
            failing.store(newValue != nil, ordering: .releasing)
        }
    }

    /// The wake-up asked for last; `.distantFuture` for none.
    var request: MonotonicInstant { MonotonicInstant(nanoseconds: requested.load(ordering: .acquiring)) }

    /// Takes the wake-up asked for, if it is due by `deadline`: it is used up (unless a newer
    /// request replaced it meanwhile, which is then taken or left as it is due).
    func take(upTo deadline: MonotonicInstant) -> MonotonicInstant? {
        var current = requested.load(ordering: .acquiring)
        let none = UInt64.max  // `.distantFuture`
        while current != none, current <= deadline.nanoseconds {
            let (exchanged, original) = requested.compareExchange(expected: current, desired: none, ordering: .acquiringAndReleasing)
            if exchanged { return MonotonicInstant(nanoseconds: current) }
            current = original
        }
        return nil
    }

    func wake(at deadline: MonotonicInstant) throws(TimerError) {
        if failing.load(ordering: .acquiring) {
            try lock.withLock { () throws(TimerError) in if let failureStorage { throw failureStorage } }
        }
        requested.store(deadline.nanoseconds, ordering: .releasing)
    }
}
