import Foundation

/// A source of timers: Dispatch, RunLoop, libevent, epoll or Manual (virtual time).
///
/// Every backend shares the same core, so timers behave identically on all of them: the same
/// grid, missed-tick policy, states, errors and registry. Backends differ only in how their
/// loop wakes up and which thread runs the handlers. (To write a backend for a loop of your
/// own, see the "Writing a backend" article.)
///
/// ```swift
/// let backend = DispatchBackend()
/// let timer = try backend.schedule(.every(.milliseconds(100)), name: "autosave") { tick in
///     save()
/// }
/// ...
/// timer.cancel()
/// ```
public protocol TimerBackend: AnyObject, Sendable {
    /// The core scheduler this backend drives, which it owns: the same one, kept alive for as
    /// long as the backend lives (a stored `let`). For backend implementors only.
    @_spi(BackendImplementation) var scheduler: TimerScheduler { get }

    /// `scheduler`, not retained: the backend's per-timer calls (a key's schedule, cancel and
    /// reschedule, a handler's schedule) borrow the scheduler through it, which the backend
    /// keeps alive, instead of retaining and releasing it each time. The default reads
    /// `scheduler`; a backend whose `scheduler` is a stored `let` saves that read's retain and
    /// release by returning `.passUnretained(scheduler)` from the stored property itself. For
    /// backend implementors only.
    @_spi(BackendImplementation) var unretainedScheduler: Unmanaged<TimerScheduler> { get }

    /// Cancels this backend's timers, stops its loop and frees what it holds (threads,
    /// descriptors, native timers). Idempotent. Later `schedule` calls throw
    /// `TimerError.backendShutDown`.
    func shutdown()
}

extension TimerBackend {
    /// Reads `scheduler`, which the backend keeps alive.
    @_spi(BackendImplementation) public var unretainedScheduler: Unmanaged<TimerScheduler> { .passUnretained(scheduler) }

    /// Runs `body` with the scheduler, borrowed from the backend, which keeps it alive while
    /// `self` is (no retain and release per call, as reading `scheduler` through the protocol
    /// costs).
    @inline(__always)
    func withScheduler<Result>(_ body: (TimerScheduler) throws(TimerError) -> Result) throws(TimerError) -> Result {
        try unretainedScheduler.withBorrowed(body)
    }

    /// The backend's short name, which its timers' handles (`TimerHandle/backendName`) and
    /// snapshots (`TimerSnapshot/backend`) give too: "epoll" (`EpollBackend`, in either wait
    /// mode), "io_uring" (`IOURingBackend`), "libevent" (`LibeventBackend` on its own thread),
    /// "libevent-attached" (`LibeventBackend` on your `event_base`), "dispatch"
    /// (`DispatchBackend`), "runloop" (`RunLoopBackend`, on its own thread or attached), and
    /// "runloop[<mode>]" for the backend of another of its modes (`RunLoopBackend/mode(_:)`, the
    /// mode's raw value between the brackets), "nio" (`NIOBackend`), "manual" (`ManualBackend`,
    /// unless given another `name`) and "display@<rate>Hz" (`DisplaySource`: "display@60Hz").
    public var name: String { scheduler.backendName }

    /// The registry this backend's timers are registered in.
    public var registry: TimerRegistry { scheduler.registry }

    /// The most live timers (scheduled or suspended) this backend holds; nil: no limit.
    public var maxLiveTimers: Int? { scheduler.maxLiveTimers }

    /// How many schedules this backend's cap (`limitLiveTimers(to:)`) has refused.
    public var refusedByLiveTimerLimit: Int { scheduler.refusedByLiveTimerLimit }

    /// Caps this backend's live timers (scheduled or suspended, helpers' and sleeps' timers
    /// included): once `limit` are live, scheduling another throws
    /// `TimerError.liveTimerLimit(scope:limit:)`, naming this backend and the cap, until one
    /// ends. Timers live already are kept, even above a lower new limit. Nil removes the cap.
    /// - Throws: `TimerError.invalidOption` for a negative `limit`.
    public func limitLiveTimers(to limit: Int?) throws(TimerError) {
        try scheduler.limitLiveTimers(to: limit)
    }

    /// What this backend's timers have done since it started or since `resetStatistics()`:
    /// live timers, fires, cancels, lateness and handler-time histograms, missed ticks, how
    /// busy its loop was, and the longest handler call. Kept always, in fixed memory.
    public var statistics: TimerStatistics { scheduler.statistics() }

    /// Starts `statistics` again from now (the live-timer count is always current).
    public func resetStatistics() { scheduler.resetStatistics() }

    /// Handler calls (and jobs of tasks on the loop) that run at least this long are reported
    /// to the event observers (`addEventObserver(_:)`) as `TimerBackendEvent.slowHandler`,
    /// one report per call, with the timer's name, how long it ran and how many timers came
    /// due meanwhile. Nil, the default, reports none (each job is then not timed on its own):
    /// what counts as slow depends on the loop (a 120 Hz frame loop has 8 ms a frame, a
    /// server's idle timeouts tolerate far more), and nothing is reported unasked. A
    /// duration below 1 ns counts as 1 ns.
    public var slowHandlerThreshold: Duration? {
        get { scheduler.slowHandlerThreshold }
        set { scheduler.slowHandlerThreshold = newValue }
    }

    /// Tells `observer` of every later event of this backend as a whole: slow handlers, a
    /// loop failure, shutdown. It runs outside TimerKit's locks, on the thread where the event
    /// happened (the loop's, for a slow handler: after the batch of handlers it was in), and
    /// must be quick. It is kept until the backend shuts down, after it has heard of that; one
    /// added after shutdown is let go of at once, never called.
    public func addEventObserver(_ observer: @escaping @Sendable (TimerBackendEvent) -> Void) {
        scheduler.addEventObserver(observer)
    }

    /// The backend's reading of the wall clock (`DeadlineClock.wall`): the date its wall timers
    /// are judged by. The system's clock, but for Manual (a virtual wall clock) and a custom
    /// clock (whose wall clock is fixed to it when the backend starts).
    public var wallClock: Date { scheduler.wallClockNow() }

    /// The backend's current time (CLOCK_MONOTONIC; virtual for Manual).
    public func now() -> MonotonicInstant { scheduler.now() }

    /// The backend's loop as a `TaskExecutor`: a task that prefers it runs on the loop's
    /// thread, between batches of handlers, as a handler would.
    ///
    /// ```swift
    /// let backend = try EpollBackend()
    /// Task(executorPreference: backend.taskExecutor) {
    ///     for await tick in try backend.ticks(.every(.milliseconds(1))) { render(tick) }
    /// }
    /// ```
    ///
    /// A task there that awaits this backend's timers (`clock.sleep`, `ticks`) is resumed
    /// on the loop right after the timer fires, without the hop to another thread that the
    /// global executor costs (see the bench's `async` scenario for the difference). The rules
    /// are a handler's: what runs there holds the loop's other timers back until it suspends,
    /// so it must not block. Jobs queued while a batch runs wait for the next wake-up, so a
    /// task that keeps yielding cannot starve the timers. When the backend shuts down, a job
    /// of such a task that is running on the loop finishes there (`shutdown()` called from
    /// another thread waits for it), and the task's later jobs run on the global executor. On
    /// a `ManualBackend` this is its `ManualBackend/taskExecutor`.
    public var taskExecutor: any TaskExecutor { scheduler.taskExecutor ?? scheduler }

    /// Schedules `handler` to run on the backend's loop according to `schedule`.
    ///
    /// - Parameters:
    ///   - schedule: `.after(_:)`, `.at(_:)` or `.every(_:firstAfter:count:jitter:)`.
    ///   - name: a unique name for the registry; nil generates `timer#<id>`.
    ///   - tolerance: how late the timer may fire, so wake-ups can be coalesced. A lone timer
    ///     fires at the end of its window; a repeating timer's tolerance is capped at half its
    ///     interval (as Core Foundation does), so it never costs a tick.
    ///   - missedTicks: what a repeating timer does with ticks it was too late for.
    ///   - handler: runs once per tick, serially with the backend's other handlers.
    /// - Throws: `TimerError` naming the bad value: negative or non-finite durations, a zero
    ///   interval, a count below 1, an empty, reserved or duplicate name, a shut-down backend.
    @discardableResult
    public func schedule(
        _ schedule: TimerSchedule, name: String? = nil, tolerance: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable (Tick) -> Void
    ) throws(TimerError) -> TimerHandle {
        try withScheduler { scheduler throws(TimerError) in
            try scheduler.schedule(schedule, name: name, tolerance: tolerance, policy: missedTicks, target: nil, handler: handler)
        }
    }

    /// Target-action scheduling (NSTimer's target/selector, with NSProxy's weak reference
    /// built in): the timer holds `target` weakly and passes it to `action`, so the
    /// caller never captures `self`. When the target is deallocated its timers cancel
    /// themselves and leave the registry; the target's `deinit` runs even while a timer
    /// targeting it is scheduled.
    @discardableResult
    public func schedule<Target: AnyObject & Sendable>(
        _ schedule: TimerSchedule, target: Target, name: String? = nil, tolerance: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        action: @escaping @Sendable (Target, Tick) -> Void
    ) throws(TimerError) -> TimerHandle {
        let reference = WeakReference(target)
        return try scheduler.schedule(
            schedule, name: name, tolerance: tolerance, policy: missedTicks,
            target: reference
        ) { tick in
            // The fire path has checked the target and keeps it alive for this call.
            guard let object = reference.object else { return }
            action(unsafeDowncast(object, to: Target.self), tick)
        }
    }
}
