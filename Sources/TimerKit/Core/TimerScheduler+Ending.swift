/// Where a timer ends — cancelled, finished, its task's last return, shut down — and
/// what waits for that: `whenEnded`'s actions and a callback's `timerEnded`, run once it has
/// ended, left the registry and gone idle, when its slot is given back. All under `mutex`;
/// what is owed runs after it (`AfterUnlock`).
extension TimerScheduler {
    /// What an ended timer's handler becomes: one shared closure, so ending allocates nothing.
    static let endedHandler: @Sendable (Tick) -> Void = { _ in }

    /// Ends the timer in `slot` because of `cause`, if it has not ended (its final state is the
    /// cause's, `EndCause.endedState`): its queue entry dies, it leaves the registry (its name, under the
    /// registry's lock nested in this one), its handle learns the end, and everything of the
    /// user's it held goes to `after` — its handler, its observers, the task it started (to be
    /// cancelled) — so that what stays in the store holds nothing whose release runs user code.
    /// Its slot is given back once nothing of it runs any more: now, or when the call or task
    /// still running returns.
    func endLocked(_ slot: UInt32, because cause: EndCause, into after: inout AfterUnlock) {
        endInlineLocked(slot, because: cause, into: &after)
    }

    /// `endLocked`, inlined into the paths that cancel one timer (a key's and a handle's cancel),
    /// which save the call's cost.
    @inline(__always)
    func endInlineLocked(_ slot: UInt32, because cause: EndCause, into after: inout AfterUnlock) {
        let record = store[slot]
        guard !record.pointee.state.hasEnded else { return }
        markEndedLocked(slot, record, because: cause, &after)
        let extras = record.pointee.extras
        if let name = extras?.name { registry.release(name, scheduler: self, slot: slot) }
        if record.pointee.callbackKind == 0, let handle = record.pointee.owner {
            let handle = unsafeDowncast(handle, to: TimerHandle.self)
            after.keep(endedHandle: handle)
            handle.learnEnd(of: record, name: extras?.name)
        } else if let handle = extras?.handle {
            handle.learnEnd(of: record, name: extras?.name)
        }
        if let extras {
            if !extras.observers.isEmpty {
                after.owed.observers.append(contentsOf: extras.observers)
                extras.observers = []
            }
            if let task = extras.runningTask {
                after.owed.tasks.append(task)
                extras.runningTask = nil
            }
        }
        freeIfIdleLocked(slot, &after)
    }

    /// The first steps of every end: the live timer in `slot` (`record`) takes its cause (and
    /// with it its final state), its queue entry dies, and it stops counting as live.
    @inline(__always)
    func markEndedLocked(
        _ slot: UInt32, _ record: UnsafeMutablePointer<TimerRecord>, because cause: EndCause, _ after: inout AfterUnlock
    ) {
        markEndedLeavingDriverLocked(slot, record, because: cause)
        disarmIfIdleLocked(&after)
        if store.live == 0 { letGoOfLinkLocked(&after) }
    }

    /// The last live timer has ended: the link lets go of this scheduler (`SchedulerLink`), and
    /// the reference goes after unlocking, where it may be the last.
    @inline(never)
    func letGoOfLinkLocked(_ after: inout AfterUnlock) {
        if let held = link.letGo() { after.keep(releasing: held) }
    }

    /// `markEndedLocked` but for the driver, which the caller disarms if the queues emptied
    /// (`disarmIfIdleLocked`), and the link, which the caller lets go of if no timer is live
    /// (`letGoOfLinkLocked`): a cancel that leaves timers queued then owes nothing after
    /// unlocking.
    @inline(__always)
    func markEndedLeavingDriverLocked(_ slot: UInt32, _ record: UnsafeMutablePointer<TimerRecord>, because cause: EndCause) {
        record.pointee.end(because: cause)
        if cause != .completed && cause != .shutDown { stats.cancels += 1 }
        killEntryLocked(slot)
        store.live -= 1
        registry.discharge()
    }

    /// Closes a critical section that ended a timer with no call running and owes nothing after
    /// unlocking (no event queued, nothing of the user's let go of): threads
    /// waiting for an end look again.
    @inline(__always)
    func settleOwingNothingLocked() {
        assert(pendingEvents.isEmpty, "TimerScheduler: events left pending by a critical section")
        if waiters > 0 { firingDone.broadcast() }
        checkInvariantsLocked()
    }

    /// Gives the slot of an ended timer back once nothing of it runs any more (no call, no
    /// task): its end waiters run, and a callback hears `timerEnded`, after unlocking.
    @inline(__always)
    func freeIfIdleLocked(_ slot: UInt32, _ after: inout AfterUnlock) {
        let record = store[slot]
        guard record.pointee.state.hasEnded, record.pointee.activeCalls == 0, (record.pointee.extras?.tasksRunning ?? 0) == 0 else {
            return
        }
        if let extras = record.pointee.extras, !extras.endWaiters.isEmpty {
            after.owed.endWaiters.append(contentsOf: extras.endWaiters)
            extras.endWaiters = []
        }
        if record.pointee.callbackKind != 0, let callback = record.pointee.owner.take() {
            // The callback is the user's: it is told, and let go of, after unlocking.
            if record.pointee.endCause == .shutDown, let loopFailure { after.owed.loopFailure = loopFailure }
            after.keep(
                ended: AfterUnlock.EndedCallback(
                    callback: Unmanaged.passRetained(callback), kinds: Unmanaged.passUnretained(callbackKinds),
                    key: TimerKey(slot: slot, generation: record.pointee.generation, scheduler: serial),
                    kind: record.pointee.callbackKind, cause: record.pointee.endCause, fires: record.pointee.fires))
        }
        // Its handle's final count: a last call whose target had gone was taken back.
        if record.pointee.callbackKind == 0, let owner = record.pointee.owner {
            unsafeDowncast(owner, to: TimerHandle.self).settleFinalCount(record)
        } else if let handle = record.pointee.extras?.handle {
            handle.settleFinalCount(record)
        }
        store.free(slot)
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

    /// Why a timer ended, from its cause; nil while it is live.
    func endReasonLocked(_ cause: EndCause) -> TimerEndReason? { cause.reason(loopFailure: loopFailure) }

    /// Runs `action` once `timer` has ended (cancelled, finished, or shut down with its
    /// backend), has left the registry, and no call of its handler, nor a task it started, is
    /// running: at once if that is so already. `action` runs outside the lock, on the thread that
    /// completed the condition; it must be quick (a continuation's resume). Returns a token for
    /// `removeEndWaiter(_:of:)`, or nil when `action` has run already.
    @discardableResult
    func whenEnded(_ timer: TimerKey, _ action: @escaping @Sendable () -> Void) -> UInt64? {
        mutex.lock()
        guard let record = liveOrBusyRecordLocked(timer) else {
            // Its slot has been given back: it has ended, and nothing of it runs.
            mutex.unlock()
            action()
            return nil
        }
        let extras = record.pointee.extras ?? TimerExtras()
        nextWaiterToken &+= 1
        let token = nextWaiterToken
        extras.endWaiters.append(EndWaiter(token: token, action: action))
        record.pointee.extras = extras
        mutex.unlock()
        return token
    }

    /// Takes back the action `whenEnded` returned `token` for, if it has not run (a waiter
    /// that gave up: its task was cancelled). It is released after unlocking.
    func removeEndWaiter(_ token: UInt64, of timer: TimerKey) {
        locked { after in
            guard let extras = liveOrBusyRecordLocked(timer)?.pointee.extras,
                let index = extras.endWaiters.firstIndex(where: { $0.token == token })
            else { return }
            // Kept in the carrier only to be released there: it is not run.
            after.owed.droppedWaiters.append(extras.endWaiters.remove(at: index))
        }
    }
}
