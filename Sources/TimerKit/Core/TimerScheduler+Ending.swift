/// The one place a timer ends — cancelled, finished, its task's last return, shut down — and
/// what waits for that: `whenEnded`'s actions, run once it has ended, left the registry and
/// gone idle. All under `mutex`; what is owed runs after it (`AfterUnlock`).
extension TimerScheduler {
    /// What an ended timer's handler becomes: one shared closure, so ending allocates nothing.
    static let endedHandler: @Sendable (Tick) -> Void = { _ in }

    /// Ends `timer` in `state` (`.cancelled` or `.finished`) because of `cause`, if it has not
    /// ended: its queue entry dies, it leaves the registry (under the registry's lock, nested
    /// in this one), and everything of the user's it held goes to `after` — its handler, its
    /// observers, the task it started (to be cancelled) — so that an ended timer holds nothing
    /// whose release runs user code, and its last reference may be dropped anywhere. Its end
    /// waiters are taken too if nothing of it runs any more; otherwise the call or task still
    /// running takes them when it returns.
    func endLocked(_ timer: TimerHandle, _ state: TimerState, because cause: EndCause, into after: inout AfterUnlock) {
        guard markEndedLocked(timer, state, because: cause, into: &after) else { return }
        after.keep(flushed: registry.remove(timer), from: registry)
        takeEndWaitersLocked(timer, into: &after)
    }

    /// `endLocked` for many timers at once (a shutdown's slice): they leave the registry in one
    /// turn of its lock. Returns how many it ended.
    func endLocked(_ timers: [TimerHandle], because cause: EndCause, into after: inout AfterUnlock) -> Int {
        var ended: [TimerHandle] = []
        ended.reserveCapacity(timers.count)
        for timer in timers where markEndedLocked(timer, .cancelled, because: cause, into: &after) { ended.append(timer) }
        after.keep(flushed: registry.remove(ended), from: registry)
        for timer in ended { takeEndWaitersLocked(timer, into: &after) }
        return ended.count
    }

    /// The part of ending that is the scheduler's own: false if `timer` had ended already.
    private func markEndedLocked(_ timer: TimerHandle, _ state: TimerState, because cause: EndCause, into after: inout AfterUnlock) -> Bool
    {
        guard !timer.state.hasEnded else { return false }
        timer.state = state
        timer.endCause = cause
        if cause != .completed && cause != .shutDown { stats.cancels += 1 }
        retireLocked(timer, &after)
        after.keep(handler: timer.handler)
        timer.handler = Self.endedHandler
        if let extras = timer.extras {
            if !extras.observers.isEmpty {
                after.owed.observers.append(contentsOf: extras.observers)
                extras.observers = []
            }
            if let task = extras.runningTask {
                after.owed.tasks.append(task)
                extras.runningTask = nil
            }
        }
        return true
    }

    /// Closes a critical section: the events it queued go to `after` with the observers to
    /// tell, and threads waiting for a call or a timer to end look again.
    @inline(__always)
    func settleLocked(_ after: inout AfterUnlock) {
        if !pendingEvents.isEmpty {
            after.owed.events.append(contentsOf: pendingEvents)
            pendingEvents.removeAll(keepingCapacity: true)
            after.owed.eventObservers = eventObservers
        }
        if waiters > 0 { firingDone.broadcast() }
        checkInvariantsLocked()
    }

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

    /// Whether `timer` has ended and nothing of it runs any more: no handler call, no task.
    func hasEndedAndIdleLocked(_ timer: TimerHandle) -> Bool {
        timer.state.hasEnded && timer.activeCalls == 0 && (timer.extras?.tasksRunning ?? 0) == 0
    }

    /// Moves the `whenEnded` actions of a timer that has ended and gone idle to `after`.
    func takeEndWaitersLocked(_ timer: TimerHandle, into after: inout AfterUnlock) {
        guard let extras = timer.extras, !extras.endWaiters.isEmpty, hasEndedAndIdleLocked(timer) else { return }
        after.owed.endWaiters.append(contentsOf: extras.endWaiters)
        extras.endWaiters = []
    }

    /// Runs `action` once `timer` has ended (cancelled, finished, or shut down with its
    /// backend), has left the registry, and no call of its handler, nor a task it started, is
    /// running: at once if that is so already. `action` runs outside the lock, on the thread that
    /// completed the condition; it must be quick (a continuation's resume). Returns a token for
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
        locked { after in
            guard let extras = timer.extras, let index = extras.endWaiters.firstIndex(where: { $0.token == token }) else { return }
            // Kept in the carrier only to be released there: it is not run.
            after.owed.droppedWaiters.append(extras.endWaiters.remove(at: index))
        }
    }
}
