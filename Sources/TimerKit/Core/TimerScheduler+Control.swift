import Glibc

/// What callers do to a timer, from any thread: cancel, suspend, resume, reschedule, add
/// observers, wait for its end or be told of it. Each takes `mutex`, changes the timer's state
/// and its place in the queue, and lets go of what the timer held after unlocking.
extension TimerScheduler {
    /// Carries a closure into `withExtendedLifetime` by address: passed bare, the generic
    /// parameter boxes the closure (one heap allocation per cancel, measured).
    struct HandlerLifetime {
        let handler: @Sendable (Tick) -> Void
    }

    /// What an ended timer's handler becomes: one shared closure, so ending allocates nothing.
    static let endedHandler: @Sendable (Tick) -> Void = { _ in }

    /// Why `timer` ended, or nil while it is live.
    func endReasonLocked(_ timer: TimerHandle) -> TimerEndReason? {
        switch timer.endCause {
        case .live: nil
        case .completed: .completed
        case .cancelled: .cancelled
        case .cancelledByName: .cancelledByName
        case .cancelledByCancelAll: .cancelledByCancelAll
        case .targetReleased: .targetReleased
        case .shutDown: loopFailure.map { .loopFailed($0) } ?? .backendShutDown
        }
    }

    func cancel(_ timer: TimerHandle, because cause: EndCause) {
        // Explicit lock/unlock rather than a closure returning (handler, dropped): that
        // plumbing cost two heap allocations per cancel (seen with a malloc breakpoint).
        mutex.lock()
        guard !timer.state.hasEnded else {
            mutex.unlock()
            return
        }
        timer.state = .cancelled
        timer.endCause = cause
        stats.cancels += 1
        if timer.clock != .monotonic { clockTimerCount -= 1 }
        retireLocked(timer)
        let swept = takeSweptLocked()
        // Drop the handler now: a closure that captured its own handle would otherwise keep
        // the timer alive forever. It is released after the lock, because its captures'
        // deinits may call back into TimerKit.
        let handler = HandlerLifetime(handler: timer.handler)
        timer.handler = Self.endedHandler
        let observers = dropObserversLocked(timer)
        let endWaiters = takeEndWaitersLocked(timer)
        let task = timer.extras?.runningTask
        timer.extras?.runningTask = nil
        mutex.unlock()
        withExtendedLifetime(handler) {}
        withExtendedLifetime(observers) {}
        releaseSwept(swept)
        task?.cancel()
        registry.remove(timer)
        for waiter in endWaiters { waiter.action() }
    }

    /// Whether `timer` has ended and nothing of it runs any more: no handler call, no task.
    func hasEndedAndIdleLocked(_ timer: TimerHandle) -> Bool {
        timer.state.hasEnded && timer.activeCalls == 0 && (timer.extras?.tasksRunning ?? 0) == 0
    }

    /// The `whenEnded` actions of a timer that has ended and gone idle, to run after unlocking.
    func takeEndWaitersLocked(_ timer: TimerHandle) -> [EndWaiter] {
        guard let extras = timer.extras, !extras.endWaiters.isEmpty, hasEndedAndIdleLocked(timer) else { return [] }
        defer { extras.endWaiters = [] }
        return extras.endWaiters
    }

    /// Runs `action` once `timer` has ended (cancelled, finished, or shut down with its
    /// backend) and no call of its handler, nor a task it started, is running: at once if that
    /// is so already. `action` runs outside the lock, on the thread that completed the
    /// condition; it must be quick (a continuation's resume). Returns a token for
    /// `removeEndWaiter(_:of:)`, or nil when `action` has run already.
    @discardableResult
    func whenEnded(_ timer: TimerHandle, _ action: @escaping @Sendable () -> Void) -> UInt64? {
        mutex.lock()
        guard !hasEndedAndIdleLocked(timer) else {
            mutex.unlock()
            action()
            return nil
        }
        let extras = timer.extras ?? TimerExtras()
        nextWaiterToken &+= 1
        let token = nextWaiterToken
        extras.endWaiters.append(EndWaiter(token: token, action: action))
        timer.extras = extras
        mutex.unlock()
        return token
    }

    /// Takes back the action `whenEnded` returned `token` for, if it has not run (a waiter
    /// that gave up: its task was cancelled). It is released after unlocking.
    func removeEndWaiter(_ token: UInt64, of timer: TimerHandle) {
        mutex.lock()
        var removed: [EndWaiter] = []
        if let extras = timer.extras, let index = extras.endWaiters.firstIndex(where: { $0.token == token }) {
            removed.append(extras.endWaiters.remove(at: index))
        }
        mutex.unlock()
        withExtendedLifetime(removed) {}
    }

    /// An ended timer never fires again: its observers go too (released by the caller after
    /// unlocking), so that a handle kept somewhere no longer keeps their captures alive.
    func dropObserversLocked(_ timer: TimerHandle) -> [TimerObserver] {
        guard let extras = timer.extras, !extras.observers.isEmpty else { return [] }
        defer { extras.observers = [] }
        return extras.observers
    }

    /// The debouncer or throttler that `timer` belongs to, if any.
    func helper(of timer: TimerHandle) -> AnyObject? {
        mutex.withLock { timer.extras?.helper }
    }

    /// Returns once no call of `timer`'s handler is running, or at once when the caller is
    /// the thread running it (a handler waiting for itself would never return).
    func waitUntilIdle(_ timer: TimerHandle) {
        mutex.lock()
        while timer.activeCalls > 0 && !isFiringThreadLocked { waitLocked() }
        mutex.unlock()
    }

    var isFiringThreadLocked: Bool { firingDepth > 0 && pthread_equal(firingThread, pthread_self()) != 0 }

    func waitLocked() {
        waiters += 1
        firingDone.wait(mutex)
        waiters -= 1
    }

    func suspend(_ timer: TimerHandle) throws(TimerError) {
        let swept = try mutex.withLock { () throws(TimerError) -> [TimerHandle] in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            guard timer.state == .scheduled else { return [] }
            timer.state = .suspended
            retireLocked(timer)
            return takeSweptLocked()
        }
        releaseSwept(swept)
    }

    func resume(_ timer: TimerHandle) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            if isShutDown { throw shutDownErrorLocked() }
            guard timer.state == .suspended else { return }
            timer.state = .scheduled
            // A handler that suspends and resumes its own timer is re-queued when it returns,
            // and a task timer when its task does.
            guard timer.activeCalls == 0 && (timer.extras?.tasksRunning ?? 0) == 0 else { return }
            do throws(TimerError) { try queueLocked(timer) } catch {
                timer.state = .suspended  // left as it was, so the caller may retry
                throw error
            }
        }
    }

    func reschedule(_ timer: TimerHandle, _ schedule: TimerSchedule) throws(TimerError) {
        defer { watchClocks(for: schedule.clock) }
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            if isShutDown { throw shutDownErrorLocked() }
            if schedule.clock != .monotonic || timer.clock != .monotonic { refreshClockOffsetsLocked(reporting: clockTimerCount > 0) }
            let resolved = try schedule.resolve(now: clock.now(), offsets: clockOffsets)
            let previousKey = timer.entrySequence != 0 ? keyLocked(timer) : nil
            if timer.clock != resolved.clock {
                if timer.clock != .monotonic { clockTimerCount -= 1 }
                timer.clock = resolved.clock
                if timer.clock != .monotonic { countClockTimerLocked(timer) }
            }
            timer.deadline = resolved.firstDeadline
            timer.interval = resolved.intervalNanoseconds
            timer.remaining = resolved.remaining
            if resolved.jitterNanoseconds > 0 || timer.extras?.jitter ?? 0 > 0 {
                let extras = timer.extras ?? TimerExtras()
                extras.jitter = resolved.jitterNanoseconds
                timer.extras = extras
                drawJitterLocked(timer)
            }
            if schedule.calendarRule != nil || timer.extras?.calendarRule != nil {
                let extras = timer.extras ?? TimerExtras()
                extras.calendarRule = schedule.calendarRule
                timer.extras = extras
            }
            if let extras = timer.extras, extras.tasksRunning > 0 {
                // A task of it is running: the new schedule starts when the task returns.
                extras.rescheduledDuringTask = true
                unqueueLocked(timer)
            } else if timer.state == .scheduled {
                // Inside its own handler too: the fire loop then sees it queued and leaves it be.
                do throws(TimerError) { try queueLocked(timer, previousKey: previousKey) } catch {
                    timer.state = .suspended  // keeps the new schedule; resume() retries the arm
                    throw error
                }
            }
            // A suspended timer has no entry: its place is found again on resume.
        }
    }

    func addObserver(_ observer: TimerObserver, to timer: TimerHandle) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            let extras = timer.extras ?? TimerExtras()
            extras.observers.append(observer)
            timer.extras = extras
        }
    }
}
