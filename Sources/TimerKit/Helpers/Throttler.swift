/// Runs work at most once per interval however often it is called: scroll handlers, progress
/// reports, a refresh that many events ask for.
///
/// ```swift
/// let progress = try Throttler(every: .milliseconds(100), edge: .both, on: backend)
/// func bytesReceived(_ count: Int) {
///     try? progress.call { report(count) }
/// }
/// ```
///
/// A call when no window is open opens one, `interval` long. With `.leading` (and `.both`)
/// that call's work runs at once, on the backend's loop; calls inside the window are
/// dropped (`.leading`), or the latest of them runs when the window closes (`.trailing`,
/// `.both`). Work runs on the backend's loop like a handler, never two runs of one throttler
/// at once. With `.leading` and `.both`, the loop begins a run no sooner than `interval` after
/// it began the one before, even when it was late for that one: a window runs from its
/// leading run, and a trailing run opens a new window, in which calls wait for its end. With
/// `.trailing`, each window's run comes `interval` after the call that opened it.
///
/// Like `Debouncer`, a throttler reuses one timer, registered as `name` (suspended while no
/// window is open); cancelling it by name drops waiting work, shutting the backend down makes
/// later calls throw, and releasing the throttler cancels its timer.
public final class Throttler: ReusedTimerOwner, @unchecked Sendable {
    // @unchecked: `leadingWork`, `trailingWork`, `windowEnd` and `reused` are read and written
    // only while holding `mutex`; the other stored properties are immutable.

    /// Which calls of a window run.
    public enum Edge: Sendable, Equatable {
        /// The call that opens a window runs at once; the rest of the window's calls are dropped.
        case leading
        /// The latest call of a window runs when the window closes.
        case trailing
        /// Both: the call that opens a window runs at once, and the latest of the rest, if
        /// any, when it closes.
        case both

        var runsLeading: Bool { self != .trailing }
        var runsTrailing: Bool { self != .leading }
    }

    /// The shortest time between two runs (with `.trailing`: from a window's first call to its run).
    public let interval: Duration
    /// Which calls of a window run.
    public let edge: Edge
    /// The name the throttler's timer is registered under; nil registers it under a generated name.
    public let name: String?
    private let intervalNanoseconds: UInt64
    private let mutex = FutexLock()
    private var leadingWork: (@Sendable () -> Void)?
    private var trailingWork: (@Sendable () -> Void)?
    /// When the open window closes; 0 when none is open.
    private var windowEnd: UInt64 = 0
    private var reused: ReusedTimer
    private let tasks = SerialTasks()

    /// A throttler on `backend`.
    /// - Throws: `TimerError` for an `interval` that is zero or negative, or an empty or
    ///   reserved `name`. A duplicate name is reported by the first `call(_:)`.
    public convenience init(every interval: Duration, edge: Edge = .leading, name: String? = nil, on backend: some TimerBackend)
        throws(TimerError)
    {
        try self.init(every: interval, edge: edge, name: name, scheduler: backend.scheduler, ownedByItsTimer: false)
    }

    init(every interval: Duration, edge: Edge, name: String?, scheduler: TimerScheduler, ownedByItsTimer: Bool) throws(TimerError) {
        self.intervalNanoseconds = try TimerSchedule.intervalNanoseconds(.duration(interval))
        if let name { try TimerRegistry.validate(name: name) }
        self.interval = interval
        self.edge = edge
        self.name = name
        self.reused = ReusedTimer(scheduler: scheduler, name: name, endsWhenIdle: ownedByItsTimer)
    }

    deinit { reused.timer?.cancel() }

    /// Runs `work` now, later or not at all, as `edge` says for this call's place in its window.
    /// - Throws: `TimerError` when the timer cannot be scheduled: the backend has shut down,
    ///   or another timer holds `name`. The work is then dropped.
    public func call(_ work: @escaping @Sendable () -> Void) throws(TimerError) {
        var leftovers = Leftovers()
        var failure: TimerError?
        mutex.lock()
        if windowEnd != 0 && !reused.isLive {
            // Its timer was cancelled from outside (by name, `cancelAll`): the window went with it.
            (leftovers.work, leftovers.moreWork) = (leadingWork, trailingWork)
            (leadingWork, trailingWork, windowEnd) = (nil, nil, 0)
        }
        do throws(TimerError) {
            if windowEnd == 0 {
                // This call opens a window.
                let now = reused.scheduler.now().nanoseconds
                let end = now.saturatingAdd(intervalNanoseconds)
                leftovers.timer = try arm(at: edge.runsLeading ? now : end)
                windowEnd = end
                if edge.runsLeading { leadingWork = work } else { trailingWork = work }
            } else if edge.runsTrailing {
                leftovers.work = trailingWork
                trailingWork = work
            } else {
                leftovers.work = work  // `.leading`, inside a window: dropped
            }
        } catch {
            failure = error
            leftovers.refusedWork = work
        }
        mutex.unlock()
        withExtendedLifetime(leftovers) {}
        if let failure { throw failure }
    }

    /// Like `call(_:)`, for async work: when it runs, `work` starts as a task on the backend's
    /// `TimerBackend/taskExecutor`, once the previous async run's task, if any, has returned:
    /// async runs never overlap (a slow one delays the next). (A closure with no `await` in
    /// it is sync work, `call(_:)`'s other form.) `cancel()` also cancels the latest run's task.
    public func call(_ work: @escaping @Sendable () async -> Void) throws(TimerError) {
        try call(asyncWork(work))
    }

    func asyncWork(_ work: @escaping @Sendable () async -> Void) -> @Sendable () -> Void {
        tasks.starter(of: work, for: reused.scheduler)
    }

    /// Whether work is waiting to run (not once its timer has been cancelled from outside).
    public var isPending: Bool {
        mutex.lock()
        defer { mutex.unlock() }
        return (leadingWork != nil || trailingWork != nil) && reused.isLive
    }

    /// Drops waiting work and closes the window: the next call opens a new one. The task of
    /// async work that has started is cancelled.
    public func cancel() {
        tasks.cancelLatest()
        var leftovers = Leftovers()
        mutex.lock()
        (leftovers.work, leftovers.moreWork) = (leadingWork, trailingWork)
        (leadingWork, trailingWork) = (nil, nil)
        windowEnd = 0
        leftovers.timer = reused.stop()
        mutex.unlock()
        withExtendedLifetime(leftovers) {}
    }

    /// Makes the timer due at `deadline` (`ReusedTimer`); called under `mutex`.
    private func arm(at deadline: UInt64) throws(TimerError) -> TimerHandle? {
        try reused.arm(at: deadline, owner: self)
    }

    func fire(_ tick: Tick) {
        var due: (@Sendable () -> Void)?
        var ended: TimerHandle?
        mutex.lock()
        if tick.scheduled.nanoseconds < reused.armedAt || windowEnd == 0 {
            // Stale (moved on, or cancelled while on its way): nothing to do now.
        } else if let leading = leadingWork {
            due = leading
            leadingWork = nil
            // The window runs from this run, not from the call that asked for it: a loop that
            // came late must not bring the next run nearer. Wake again when it closes: to run
            // trailing work, or to close it.
            windowEnd = max(windowEnd, reused.scheduler.now().nanoseconds.saturatingAdd(intervalNanoseconds))
            ended = try? arm(at: windowEnd)
        } else if let trailing = trailingWork {
            due = trailing
            trailingWork = nil
            if edge.runsLeading {
                // A trailing run opens a window: the next leading run is an interval away.
                windowEnd = reused.scheduler.now().nanoseconds.saturatingAdd(intervalNanoseconds)
                ended = try? arm(at: windowEnd)
            } else {
                windowEnd = 0
                ended = reused.becomeIdle()
            }
        } else {
            windowEnd = 0
            ended = reused.becomeIdle()
        }
        mutex.unlock()
        due?()
        withExtendedLifetime(ended) {}
    }
}

extension TimerBackend {
    /// Throttles by name: runs `work` at most once per `interval` for `name`, as `edge` says
    /// (see `Throttler`). The first call for a name creates its throttler with this
    /// `interval` and `edge`; they stand until it has nothing left to do, when its timer
    /// leaves the registry.
    ///
    /// ```swift
    /// try backend.throttle("scroll", every: .milliseconds(100), edge: .both) { layout() }
    /// ```
    /// - Throws: `TimerError` for a zero or negative `interval`, an empty or reserved `name`,
    ///   a name held by a timer that is not a throttler, or a backend that has shut down.
    public func throttle(
        _ name: String, every interval: Duration, edge: Throttler.Edge = .leading, _ work: @escaping @Sendable () -> Void
    ) throws(TimerError) {
        _ = try TimerSchedule.intervalNanoseconds(.duration(interval))
        try withHelper(named: name) { () throws(TimerError) -> Throttler in
            try Throttler(every: interval, edge: edge, name: name, scheduler: scheduler, ownedByItsTimer: true)
        } _: { (throttler: Throttler) throws(TimerError) in
            try throttler.call(work)
        }
    }

    /// `throttle(_:every:edge:_:)` for async work: each run starts as a task on this
    /// backend's `taskExecutor`, after the previous run's task under this name has returned.
    public func throttle(
        _ name: String, every interval: Duration, edge: Throttler.Edge = .leading, _ work: @escaping @Sendable () async -> Void
    ) throws(TimerError) {
        _ = try TimerSchedule.intervalNanoseconds(.duration(interval))
        try withHelper(named: name) { () throws(TimerError) -> Throttler in
            try Throttler(every: interval, edge: edge, name: name, scheduler: scheduler, ownedByItsTimer: true)
        } _: { (throttler: Throttler) throws(TimerError) in
            try throttler.call(throttler.asyncWork(work))
        }
    }
}
