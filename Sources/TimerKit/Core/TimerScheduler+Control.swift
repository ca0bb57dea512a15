import Glibc

/// What callers do to a timer, from any thread, through its handle or its key: cancel,
/// suspend, resume, reschedule, add observers, read its state, wait for a call to end. Each
/// takes `mutex`, finds the timer's record, changes its state and its place in the queues, and
/// runs what it owes after unlocking.
extension TimerScheduler {
    // MARK: Finding a timer's record

    /// The record of the live timer `key` names; nil once it has ended.
    /// - Throws: `TimerError.invalidOption` for a key of another backend.
    @inline(__always)
    func recordLocked(_ key: TimerKey) throws(TimerError) -> UnsafeMutablePointer<TimerRecord>? {
        guard isOwnLocked(key) else {
            throw .invalidOption(name: "key", value: "\(key)", allowed: "a key the \(backendName) backend returned")
        }
        return ownRecordIfLiveLocked(key)
    }

    /// The record of the live timer `key` names; nil once it has ended, and for a key of another
    /// backend.
    @inline(__always)
    func liveRecordLocked(_ key: TimerKey) -> UnsafeMutablePointer<TimerRecord>? {
        isOwnLocked(key) ? ownRecordIfLiveLocked(key) : nil
    }

    @inline(__always)
    private func ownRecordIfLiveLocked(_ key: TimerKey) -> UnsafeMutablePointer<TimerRecord>? {
        // No owner test: a key names a slot its scheduler handed out at the key's generation,
        // which moves on when the slot is freed, and a live timer has its owner.
        let record = store[key.slot]
        guard record.pointee.generation == key.generation, !record.pointee.state.hasEnded else { return nil }
        return record
    }

    /// Whether `key` is one of this scheduler's. A key of this scheduler names a slot of its
    /// store: the key was made for a timer there, and a store keeps its chunks for its life.
    @inline(__always)
    func isOwnLocked(_ key: TimerKey) -> Bool { key.scheduler == serial }

    /// The record of the timer `key` names until its slot is given back: while it is live, and
    /// after its end while a call or task of it still runs; nil after that, and for a key of
    /// another scheduler.
    func liveOrBusyRecordLocked(_ key: TimerKey) -> UnsafeMutablePointer<TimerRecord>? {
        guard isOwnLocked(key) else { return nil }
        let record = store[key.slot]
        return record.pointee.generation == key.generation && record.pointee.owner != nil ? record : nil
    }

    /// The name of the timer in `slot`: the caller's, or one made from its id.
    func nameLocked(_ slot: UInt32, generation: UInt32) -> String {
        let record = store[slot]
        if record.pointee.generation == generation, record.pointee.owner != nil, let name = record.pointee.extras?.name { return name }
        return TimerRegistry.generatedName(store.id(of: slot, generation: generation))
    }

    /// What a call through the key of an ended timer throws: the key, the value that was wrong.
    /// (Its slot may hold another timer by now, so it names nothing more: the timer's name and
    /// end went to its callback.) The operations below take it as `endedError`, made under the
    /// lock; a handle passes its own, which names the timer and its end (`TimerHandle`).
    static func keyEnded(_ key: TimerKey) -> TimerError { .keyEnded(key) }

    // MARK: Reading

    /// The timer's id (see `TimerHandle.id`), made from its key.
    func id(of key: TimerKey) -> UInt64 { mutex.withLock { store.id(of: key.slot, generation: key.generation) } }

    func isActive(_ key: TimerKey) -> Bool {
        mutex.withLock { liveRecordLocked(key) != nil }
    }

    // MARK: Cancelling

    /// Ends the timer `key` names, if it is live: a caller's cancel. Nothing happens for an ended
    /// timer, nor for another scheduler's.
    func cancel(_ key: TimerKey) { cancelInline(key, because: .cancelled) }

    /// `cancel(_:)` for another cause: a target found released. Out of line: the fire path
    /// calls it only for a target gone.
    @inline(never)
    func cancel(_ key: TimerKey, because cause: EndCause) { cancelInline(key, because: cause) }

    @inline(__always)
    private func cancelInline(_ key: TimerKey, because cause: EndCause) {
        // Explicit lock and unlock, not `locked`: the cancel path allocates nothing.
        mutex.lock()
        guard let record = liveRecordLocked(key) else {
            // Nothing changed: nothing to settle.
            mutex.unlock()
            return
        }
        guard record.pointee.extras == nil, record.pointee.activeCalls == 0, let owner = record.pointee.owner.take() else {
            var after = AfterUnlock()
            endInlineLocked(key.slot, because: cause, into: &after)
            unlock(running: consume after)
            return
        }
        // A plain timer (no name, observer, target, task or count; no call running) — what a
        // server keeps by the million — ends here in full, as `endInlineLocked` would end it,
        // without the tests and the carrier's slot for what it does not have: the record's
        // reference to its owner moves out (no retain). After unlocking, a callback hears the
        // end and is let go of; a handle lets go of its handler.
        markEndedLeavingDriverLocked(key.slot, record, because: cause)
        let kind = record.pointee.callbackKind
        let fires = record.pointee.fires
        store.free(key.slot)
        if kind == 0 {
            let handle = unsafeDowncast(owner, to: TimerHandle.self)
            handle.endFacts = EndFacts(fires: fires, cause: cause, hasCustomName: false)
            unlockAfterPlainEnd()
            handle.letGoOfHandler()
        } else {
            unlockAfterPlainEnd()
            callbackKinds.ended(owner, kind: kind, key, reason: cause.endedReason(loopFailure: nil), fires: fires)
        }
    }

    /// Ends the critical section of a plain timer's cancel (`markEndedLeavingDriverLocked`):
    /// where that emptied the queues, with the driver disarmed; where it ended the last live
    /// timer, with the link let go of.
    @inline(__always)
    private func unlockAfterPlainEnd() {
        if queues.isEmpty || store.live == 0 {
            var after = AfterUnlock()
            disarmIfIdleLocked(&after)
            if store.live == 0 { letGoOfLinkLocked(&after) }
            unlock(running: consume after)
        } else {
            settleOwingNothingLocked()
            mutex.unlock()
        }
    }

    /// The debouncer or throttler that `timer` belongs to, and whether the timer is live; a
    /// strong reference to the helper made here is dropped by the caller, outside the lock.
    func helper(of timer: TimerKey) -> (helper: AnyObject?, isLive: Bool) {
        mutex.withLock {
            guard let record = liveRecordLocked(timer) else { return (nil, false) }
            return (record.pointee.extras?.helper, true)
        }
    }

    // MARK: Waiting for a call

    /// Returns once no call of `timer`'s handler is running, or at once when the caller is
    /// the thread running it (a handler waiting for itself would never return).
    func waitUntilIdle(_ timer: TimerKey) {
        mutex.lock()
        while let record = liveOrBusyRecordLocked(timer), record.pointee.activeCalls > 0, !isFiringThreadLocked { waitLocked() }
        mutex.unlock()
    }

    var isFiringThreadLocked: Bool { firingDepth > 0 && pthread_equal(firingThread, pthread_self()) != 0 }

    func waitLocked() {
        waiters += 1
        firingDone.wait(mutex)
        waiters -= 1
    }

    // MARK: Suspending, resuming, rescheduling

    func suspend(_ key: TimerKey, endedError: (TimerKey) -> TimerError = keyEnded) throws(TimerError) {
        try locked { (after: inout AfterUnlock) throws(TimerError) in
            guard try recordLocked(key) != nil else { throw endedError(key) }
            suspendLocked(key.slot, &after)
        }
    }

    private func suspendLocked(_ slot: UInt32, _ after: inout AfterUnlock) {
        let record = store[slot]
        guard record.pointee.state == .scheduled else { return }
        record.pointee.state = .suspended
        retireLocked(slot, &after)
    }

    func resume(_ key: TimerKey, endedError: (TimerKey) -> TimerError = keyEnded) throws(TimerError) {
        try locked { (after: inout AfterUnlock) throws(TimerError) in
            guard try recordLocked(key) != nil else { throw endedError(key) }
            try resumeLocked(key.slot, &after)
        }
    }

    private func resumeLocked(_ slot: UInt32, _ after: inout AfterUnlock) throws(TimerError) {
        if isShutDown { throw shutDownErrorLocked() }
        let record = store[slot]
        guard record.pointee.state == .suspended else { return }
        record.pointee.state = .scheduled
        // A handler that suspends and resumes its own timer is re-queued when it returns,
        // and a task timer when its task does.
        guard record.pointee.activeCalls == 0 && (record.pointee.extras?.tasksRunning ?? 0) == 0 else { return }
        do throws(TimerError) { try queueLocked(slot, &after) } catch {
            record.pointee.state = .suspended  // left as it was, so the caller may retry
            throw error
        }
    }

    func reschedule(_ key: TimerKey, _ schedule: TimerSchedule) throws(TimerError) {
        try reschedule(key, schedule, endedError: Self.keyEnded)
    }

    /// Inlined into a key's reschedule and a handle's, each with its `endedError`.
    @inline(__always)
    func reschedule(_ key: TimerKey, _ schedule: TimerSchedule, endedError: (TimerKey) -> TimerError) throws(TimerError) {
        guard let deadline = timeoutDeadline(schedule) else { return try rescheduleInFull(key, schedule, endedError: endedError) }
        mutex.lock()
        if let record = liveRecordLocked(key), !isShutDown, movedLaterInPlaceLocked(record, timeoutAt: deadline) {
            mutex.unlock()
            return
        }
        try rescheduleAndUnlock(key, timeoutAt: deadline, endedError: endedError)
    }

    /// The rest of a timeout's reschedule, entered with the lock held, where the timer did not
    /// move later in place: ended, foreign, moved earlier or not plain. Out of line, with the
    /// errors it may throw.
    @inline(never)
    private func rescheduleAndUnlock(
        _ key: TimerKey, timeoutAt deadline: UInt64, endedError: (TimerKey) -> TimerError
    ) throws(TimerError) {
        let record = try recordLockedOrUnlock(key)
        try rescheduleInFullAndUnlock(record, key, .timeout(at: deadline), calendar: nil, endedError: endedError)
    }

    @inline(never)
    private func rescheduleInFull(_ key: TimerKey, _ schedule: TimerSchedule, endedError: (TimerKey) -> TimerError) throws(TimerError) {
        let resolved = try resolveNow(schedule)
        mutex.lock()
        let record = try recordLockedOrUnlock(key)
        if let record, !isShutDown, movedLaterInPlaceLocked(record, resolved, calendar: schedule.calendarRule) {
            mutex.unlock()
            return
        }
        try rescheduleInFullAndUnlock(record, key, resolved, calendar: schedule.calendarRule, endedError: endedError)
    }

    /// `recordLocked(_:)`, unlocking before it throws.
    private func recordLockedOrUnlock(_ key: TimerKey) throws(TimerError) -> UnsafeMutablePointer<TimerRecord>? {
        do throws(TimerError) { return try recordLocked(key) } catch {
            mutex.unlock()
            throw error
        }
    }

    /// `movedLaterInPlaceLocked` for a timeout due at `deadline` (`timeoutDeadline`), which
    /// needs nothing resolved but its deadline.
    @inline(__always)
    private func movedLaterInPlaceLocked(_ record: UnsafeMutablePointer<TimerRecord>, timeoutAt deadline: UInt64) -> Bool {
        guard record.pointee.extras == nil, record.pointee.entrySequence != 0, record.pointee.state == .scheduled,
            record.pointee.clock == .monotonic, deadline >= record.pointee.deadline
        else { return false }
        record.pointee.deadline = deadline
        record.pointee.interval = 0
        record.pointee.setRemaining(1)
        nextSequence &+= 1
        record.pointee.orderSequence = nextSequence
        return true
    }

    /// The rest of a reschedule that `movedLaterInPlaceLocked` did not do, entered with the lock
    /// held (`record`: the timer's, nil once it has ended); unlocks, and tells the clock watcher
    /// of this scheduler if it must.
    @inline(never)
    private func rescheduleInFullAndUnlock(
        _ record: UnsafeMutablePointer<TimerRecord>?, _ key: TimerKey, _ resolved: TimerSchedule.Resolved,
        calendar calendarRule: CalendarRule?, endedError: (TimerKey) -> TimerError
    ) throws(TimerError) {
        var after = AfterUnlock()
        let watch: Bool
        do throws(TimerError) {
            guard record != nil else { throw endedError(key) }
            if isShutDown { throw shutDownErrorLocked() }
            watch = try rescheduleInFullLocked(key.slot, resolved, calendar: calendarRule, &after)
        } catch {
            unlock(running: consume after)
            throw error
        }
        unlock(running: consume after)
        if watch { startWatchingClocks() }
    }

    /// Gives the timer in `slot` the schedule `resolved` (resolved before locking: reading the
    /// clock needs no lock); returns whether the clock watcher must be told of this scheduler
    /// now. Out of line: the common case (`movedLaterInPlaceLocked`) never calls it.
    @inline(never)
    private func rescheduleInFullLocked(
        _ slot: UInt32, _ resolved: TimerSchedule.Resolved, calendar calendarRule: CalendarRule?, _ after: inout AfterUnlock
    ) throws(TimerError) -> Bool {
        let record = store[slot]
        var watch = false
        var previousKey: UInt64?
        if record.pointee.clock != resolved.clock {
            killEntryLocked(slot)  // its entry is in the old clock's queue
            record.pointee.clock = resolved.clock
            watch = needsClockWatcherLocked(for: resolved.clock)
        } else if record.pointee.entrySequence != 0 {
            previousKey = RepeatRule.latestFireTime(record.pointee)
        }
        record.pointee.deadline = resolved.firstDeadline
        record.pointee.interval = resolved.intervalNanoseconds
        let calendar = calendarRule != nil
        if resolved.jitterNanoseconds > 0 || calendar
            || TimerRecord.needsExtras(forRemaining: resolved.remaining, interval: resolved.intervalNanoseconds, calendar: calendar)
        {
            if record.pointee.extras == nil { record.pointee.extras = TimerExtras() }
        }
        if let extras = record.pointee.extras {
            extras.jitter = resolved.jitterNanoseconds
            extras.calendarRule = calendarRule
            drawJitterLocked(record)
        }
        record.pointee.setRemaining(resolved.remaining)
        if let extras = record.pointee.extras, extras.tasksRunning > 0 {
            // A task of it is running: the new schedule starts when the task returns.
            extras.rescheduledDuringTask = true
            killEntryLocked(slot)
        } else if record.pointee.state == .scheduled {
            // Inside its own handler too: the fire loop then sees it queued and leaves it be.
            do throws(TimerError) { try queueLocked(slot, previousKey: previousKey, &after) } catch {
                record.pointee.state = .suspended  // keeps the new schedule; resume() retries the arm
                throw error
            }
        }
        // A suspended timer has no entry: its place is found again on resume.
        return watch
    }

    /// The common reschedule, at a few instructions' cost: an idle timeout moved later on every
    /// read. A queued monotonic timer with nothing beyond a deadline (no extras: no tolerance,
    /// jitter, count or calendar, no task running) that stays monotonic and moves later keeps its queue
    /// entry, to be re-filed when it reaches the top (`queueLocked` does the same for a timer
    /// with more). Returns false, changing nothing, when that does not apply.
    @inline(__always)
    private func movedLaterInPlaceLocked(
        _ record: UnsafeMutablePointer<TimerRecord>, _ resolved: TimerSchedule.Resolved, calendar: CalendarRule?
    ) -> Bool {
        guard record.pointee.extras == nil, record.pointee.entrySequence != 0, record.pointee.state == .scheduled,
            resolved.clock == .monotonic, record.pointee.clock == .monotonic, resolved.jitterNanoseconds == 0, calendar == nil,
            resolved.firstDeadline >= record.pointee.deadline,
            !TimerRecord.needsExtras(forRemaining: resolved.remaining, interval: resolved.intervalNanoseconds, calendar: false)
        else { return false }
        record.pointee.deadline = resolved.firstDeadline
        record.pointee.interval = resolved.intervalNanoseconds
        record.pointee.setRemaining(resolved.remaining)
        nextSequence &+= 1
        record.pointee.orderSequence = nextSequence
        return true
    }

    func addObserver(_ observer: TimerObserver, to timer: TimerKey, endedError: (TimerKey) -> TimerError) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            guard let record = try recordLocked(timer) else { throw endedError(timer) }
            let extras = record.pointee.extras ?? TimerExtras()
            extras.observers.append(observer)
            record.pointee.extras = extras
        }
    }
}
