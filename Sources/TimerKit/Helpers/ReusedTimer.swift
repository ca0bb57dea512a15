/// What a `ReusedTimer`'s handler calls: its debouncer or throttler.
protocol ReusedTimerOwner: AnyObject, Sendable {
    func fire(_ tick: Tick)
}

/// The one timer a `Debouncer` or `Throttler` moves from call to call, so that a burst of calls
/// costs no new timer: a later deadline only updates the timer (the queue re-files it when it
/// comes due), and after the last call of a burst the timer waits suspended for the next one.
/// Every method is called while holding the owner's lock; none of them runs user code.
struct ReusedTimer {
    let scheduler: TimerScheduler
    let name: String?
    /// Ends the timer when the owner goes idle, instead of keeping it suspended: for helpers
    /// found by name, which should not stay registered once they have nothing to do.
    let endsWhenIdle: Bool
    private(set) var timer: TimerHandle?
    /// The timer is suspended (or absent): the next `arm` resumes (or schedules) it.
    private(set) var isIdle = true
    /// The deadline of the latest `arm`. A call of the handler for an earlier one is stale:
    /// a later `arm` moved the timer on while that call was on its way.
    private(set) var armedAt: UInt64 = 0

    /// Whether the timer is there and has not been ended from outside (by name, `cancelAll`,
    /// a shutdown). Takes the scheduler's lock.
    var isLive: Bool { timer?.isActive ?? false }

    init(scheduler: TimerScheduler, name: String?, endsWhenIdle: Bool) {
        self.scheduler = scheduler
        self.name = name
        self.endsWhenIdle = endsWhenIdle
    }

    /// Makes the timer due at `deadline`: moves it, or schedules a new one whose handler calls
    /// `owner` (holding it if `endsWhenIdle`, weakly otherwise). Returns an ended timer for
    /// the caller to let go of after unlocking.
    mutating func arm<Owner: ReusedTimerOwner>(at deadline: UInt64, owner: Owner) throws(TimerError) -> TimerHandle? {
        if try move(to: deadline) { return nil }
        let handler: @Sendable (Tick) -> Void
        if endsWhenIdle {
            handler = { tick in owner.fire(tick) }
        } else {
            handler = { [weak owner] tick in owner?.fire(tick) }
        }
        return try install(at: deadline, owner: owner, handler: handler)
    }

    /// Makes the timer due at `deadline`: moves it, and resumes it if idle. False when there
    /// is no timer to move (none yet, or it was ended from outside: by name, `cancelAll`):
    /// then `install` schedules one.
    private mutating func move(to deadline: UInt64) throws(TimerError) -> Bool {
        guard let timer else { return false }
        do throws(TimerError) {
            try timer.reschedule(.at(MonotonicInstant(nanoseconds: deadline)))
            if isIdle { try timer.resume() }
        } catch {
            guard case .timerEnded = error else { throw error }
            return false
        }
        isIdle = false
        armedAt = deadline
        return true
    }

    /// Schedules a new timer due at `deadline`, running `handler`. Returns the ended timer it
    /// replaces, for the caller to let go of after unlocking.
    private mutating func install(
        at deadline: UInt64, owner: AnyObject, handler: @escaping @Sendable (Tick) -> Void
    ) throws(TimerError) -> TimerHandle? {
        let ended = timer
        timer = nil
        isIdle = true
        timer = try scheduler.schedule(
            .at(MonotonicInstant(nanoseconds: deadline)), name: name, tolerance: .zero, policy: .skip, target: nil,
            helper: owner, handler: handler)
        isIdle = false
        armedAt = deadline
        return ended
    }

    /// Nothing is left to do: the timer stays suspended after this call of its handler (the
    /// scheduler parks it), or ends if `endsWhenIdle`. Called from the handler.
    mutating func becomeIdle() -> TimerHandle? {
        isIdle = true
        guard endsWhenIdle, let ended = timer else { return nil }
        timer = nil
        ended.cancel()
        return ended
    }

    /// Stops a pending timer from firing (suspends it, or ends it if `endsWhenIdle`).
    mutating func stop() -> TimerHandle? {
        guard !isIdle, let timer else { return nil }
        isIdle = true
        if endsWhenIdle {
            self.timer = nil
            timer.cancel()
            return timer
        }
        do throws(TimerError) { try timer.suspend() } catch {
            // It has ended already (cancelled by name): the next `arm` schedules a new one.
        }
        return nil
    }
}

/// What a helper takes out under its lock and lets go of after unlocking: work that was
/// replaced or dropped (its captures' deinits may call TimerKit) and a timer that ended. Kept
/// in a struct for `withExtendedLifetime`: handed the closures themselves, its generic
/// parameter would wrap each in a thunk, three allocations per call when measured.
struct Leftovers {
    var work: (@Sendable () -> Void)?
    var moreWork: (@Sendable () -> Void)?
    /// A call's own work, when the call failed.
    var refusedWork: (@Sendable () -> Void)?
    var timer: TimerHandle?
}

extension TimerBackend {
    /// The live helper of type `Helper` registered on this backend as `name`, creating one
    /// with `make` if none is; a live timer of that name that is not such a helper is a
    /// `duplicateName` error. Then runs `call` on it. Two threads creating one at once: the
    /// second finds the first's. A helper whose timer ends meanwhile (cancelled by name,
    /// `cancelAll`) is as good as none: the call looks again, and makes one.
    func withHelper<Helper: AnyObject>(
        named name: String, make: () throws(TimerError) -> Helper, _ call: (Helper) throws(TimerError) -> Void
    ) throws(TimerError) {
        try TimerRegistry.validate(name: name)
        // Each turn fails only because another thread ended or registered the name meanwhile;
        // the bound keeps a pathological race from spinning for ever.
        for _ in 0..<100 {
            if let timer = registry.timer(named: name) {
                let (helper, isLive) = timer.scheduler.helper(of: timer.key)
                guard isLive else { continue }
                guard timer.scheduler === scheduler, let helper = helper as? Helper else { throw .duplicateName(name) }
                // If its timer ends meanwhile, the helper's next `arm` schedules a new one.
                return try call(helper)
            }
            do throws(TimerError) {
                return try call(try make())
            } catch {
                // Another thread registered the name first: use its helper.
                guard case .duplicateName = error else { throw error }
            }
        }
        throw .duplicateName(name)
    }
}

/// The tasks a helper starts for async work: each starts once the one before has returned, so
/// two runs of one helper never overlap.
final class SerialTasks: @unchecked Sendable {
    // @unchecked: `last` is read and written only while holding `mutex`.
    private let mutex = FutexLock()
    private var last: Task<Void, Never>?

    /// Starts `work` on `executor` after the previous task.
    func start(on executor: any TaskExecutor, _ work: @escaping @Sendable () async -> Void) {
        mutex.lock()
        let previous = last
        let task = Task(executorPreference: executor) {
            await previous?.value
            await work()
        }
        last = task
        mutex.unlock()
    }

    /// Sync work that starts `work` as the next task, on `scheduler`'s task executor (the
    /// backend's `taskExecutor`).
    func starter(of work: @escaping @Sendable () async -> Void, for scheduler: TimerScheduler) -> @Sendable () -> Void {
        let executor = scheduler.taskExecutor ?? scheduler
        return { [self] in start(on: executor, work) }
    }

    /// Cancels the latest task (and so the work it runs or waits to run).
    func cancelLatest() {
        mutex.lock()
        let latest = last
        mutex.unlock()
        latest?.cancel()  // outside the lock: cancellation handlers are user code
    }
}
