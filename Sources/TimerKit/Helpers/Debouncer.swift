/// Runs the last of a burst of calls, once the calls have stopped for a while: a search field
/// that queries when the typing stops, an autosave after the last edit.
///
/// ```swift
/// let autosave = try Debouncer(for: .milliseconds(300), name: "autosave", on: backend)
/// func textDidChange(_ text: String) {
///     try? autosave.call { save(text) }
/// }
/// ```
///
/// Each `call(_:)` replaces the work waiting to run and moves its deadline to `delay` from
/// now; when `delay` passes with no further call, the latest work runs once, on the backend's
/// loop, like a handler. Work never runs sooner than `delay` after the call that gave it.
///
/// A debouncer has one timer, reused from burst to burst: a call moves that timer's
/// deadline rather than scheduling a new one, so in a release build a burst of calls allocates
/// nothing in TimerKit after its first call (`make bench-check` counts it). While work waits,
/// the timer is in the registry as `name` (scheduled, with its deadline in `snapshot()`);
/// between bursts it is there suspended. Cancelling it by name, or through
/// `TimerRegistry/cancelAll()`, drops the waiting work, and the next call schedules a new timer.
/// Shutting the backend down drops it too, and later calls throw its `TimerError`. Releasing the
/// debouncer cancels its timer: work still waiting then never runs.
///
/// To debounce by name without keeping an object, see `TimerBackend/debounce(_:for:_:)`.
public final class Debouncer: ReusedTimerOwner, @unchecked Sendable {
    // @unchecked: `work` and `reused` are read and written only while holding `mutex`; the
    // other stored properties are immutable.

    /// How long the calls must stop for before the latest work runs.
    public let delay: Duration
    /// The name the debouncer's timer is registered under; nil registers it under a generated name.
    public let name: String?
    private let delayNanoseconds: UInt64
    private let mutex = FutexLock()
    private var work: (@Sendable () -> Void)?
    private var reused: ReusedTimer
    /// Runs async work (`call(_:)` with an async closure).
    private let tasks = SerialTasks()

    /// A debouncer on `backend`.
    /// - Throws: `TimerError` for a negative `delay`, or an empty or reserved `name`. A
    ///   duplicate name is reported by the first `call(_:)`, when the timer is registered.
    public convenience init(for delay: Duration, name: String? = nil, on backend: some TimerBackend) throws(TimerError) {
        try self.init(for: delay, name: name, scheduler: backend.scheduler, ownedByItsTimer: false)
    }

    init(for delay: Duration, name: String?, scheduler: TimerScheduler, ownedByItsTimer: Bool) throws(TimerError) {
        if delay < .zero { throw .negativeDuration(parameter: "delay", value: delay) }
        if let name { try TimerRegistry.validate(name: name) }
        self.delay = delay
        self.name = name
        self.delayNanoseconds = UInt64(delay.saturatingNanoseconds)
        self.reused = ReusedTimer(scheduler: scheduler, name: name, endsWhenIdle: ownedByItsTimer)
    }

    deinit {
        // Never under `mutex`: the last reference is a caller's, or a handler call's, both
        // taken outside it.
        reused.timer?.cancel()
    }

    /// Runs `work` on the backend's loop once `delay` has passed with no further call,
    /// unless a later call replaces it.
    /// - Throws: `TimerError` when the timer cannot be scheduled: the backend has shut down,
    ///   or another timer holds `name`. The work is then dropped.
    public func call(_ work: @escaping @Sendable () -> Void) throws(TimerError) {
        try call(after: delayNanoseconds, work)
    }

    /// Like `call(_:)`, for async work: when it is due, `work` starts as a task on the
    /// backend's `TimerBackend/taskExecutor` (its loop; Manual's test executor), once the task
    /// of the previous async run, if any, has returned: async runs never overlap. (A closure
    /// with no `await` in it is sync work, `call(_:)`'s other form.) `cancel()` also cancels
    /// the latest run's task.
    public func call(_ work: @escaping @Sendable () async -> Void) throws(TimerError) {
        try call(after: delayNanoseconds, asyncWork(work))
    }

    func asyncWork(_ work: @escaping @Sendable () async -> Void) -> @Sendable () -> Void {
        tasks.starter(of: work, for: reused.scheduler)
    }

    /// Whether work is waiting to run (not once its timer has been cancelled from outside).
    public var isPending: Bool {
        mutex.lock()
        defer { mutex.unlock() }
        return work != nil && reused.isLive
    }

    /// Drops the waiting work, if any: it does not run. The next call starts a new burst. The
    /// task of async work that has started is cancelled.
    public func cancel() {
        tasks.cancelLatest()
        var leftovers = Leftovers()
        mutex.lock()
        leftovers.work = work
        work = nil
        leftovers.timer = reused.stop()
        mutex.unlock()
        withExtendedLifetime(leftovers) {}
    }

    func call(after delay: UInt64, _ work: @escaping @Sendable () -> Void) throws(TimerError) {
        var leftovers = Leftovers()
        var failure: TimerError?
        mutex.lock()
        leftovers.work = self.work
        self.work = work
        let deadline = reused.scheduler.now().nanoseconds.saturatingAdd(delay)
        do throws(TimerError) {
            leftovers.timer = try arm(at: deadline)
        } catch {
            // With no timer to run it (the backend has shut down), no work waits.
            failure = error
            leftovers.refusedWork = self.work
            self.work = nil
        }
        mutex.unlock()
        // Released here, after unlocking: their captures' deinits may call TimerKit.
        withExtendedLifetime(leftovers) {}
        if let failure { throw failure }
    }

    private func arm(at deadline: UInt64) throws(TimerError) -> TimerHandle? {
        try reused.arm(at: deadline, owner: self)
    }

    func fire(_ tick: Tick) {
        mutex.lock()
        // A call came after this one was on its way: the timer is due again later.
        guard tick.scheduled.nanoseconds >= reused.armedAt else {
            mutex.unlock()
            return
        }
        let due = work
        work = nil
        let ended = reused.becomeIdle()
        mutex.unlock()
        due?()
        withExtendedLifetime(ended) {}
    }
}

extension TimerBackend {
    /// Debounces by name: runs `work` on this backend's loop once `delay` has passed with no
    /// further call of `debounce` for `name`; each call replaces the work waiting under that
    /// name and moves its deadline to `delay` from now.
    ///
    /// ```swift
    /// try backend.debounce("save", for: .milliseconds(300)) { save(document) }
    /// ```
    ///
    /// While work waits, a timer named `name` is in the registry (cancel it by name to drop
    /// the work); once the work has run, nothing is left registered. A burst of calls reuses
    /// that timer and, in a release build, allocates nothing in TimerKit after its first call
    /// (`make bench-check` counts it). Each call's `delay` applies to that call. See `Debouncer`
    /// for a debouncer kept as an object.
    /// - Throws: `TimerError` for a negative `delay`, an empty or reserved `name`, a name
    ///   held by a timer that is not a debouncer, or a backend that has shut down.
    public func debounce(_ name: String, for delay: Duration, _ work: @escaping @Sendable () -> Void) throws(TimerError) {
        try debounce(name, for: delay) { _ in work }
    }

    /// `debounce(_:for:_:)` for async work: when due, `work` starts as a task on this
    /// backend's `taskExecutor`, after the previous run's task under this name has returned.
    public func debounce(_ name: String, for delay: Duration, _ work: @escaping @Sendable () async -> Void) throws(TimerError) {
        try debounce(name, for: delay) { debouncer in debouncer.asyncWork(work) }
    }

    private func debounce(
        _ name: String, for delay: Duration, work: (Debouncer) -> @Sendable () -> Void
    ) throws(TimerError) {
        if delay < .zero { throw .negativeDuration(parameter: "delay", value: delay) }
        let nanoseconds = UInt64(delay.saturatingNanoseconds)
        try withHelper(named: name) { () throws(TimerError) -> Debouncer in
            try Debouncer(for: delay, name: name, scheduler: scheduler, ownedByItsTimer: true)
        } _: { (debouncer: Debouncer) throws(TimerError) in
            try debouncer.call(after: nanoseconds, work(debouncer))
        }
    }
}
