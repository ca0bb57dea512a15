import Glibc

/// What callers do to a timer, from any thread: cancel, suspend, resume, reschedule, add
/// observers, wait for a call to end. Each takes `mutex`, changes the timer's state and its
/// place in the queues, and runs what it owes after unlocking.
extension TimerScheduler {
    func cancel(_ timer: TimerHandle, because cause: EndCause) {
        // Explicit lock and unlock, not `locked`: the cancel path allocates nothing.
        var after = AfterUnlock()
        mutex.lock()
        endLocked(timer, .cancelled, because: cause, into: &after)
        settleLocked(&after)
        mutex.unlock()
        after.run()
    }

    /// The debouncer or throttler that `timer` belongs to, and whether the timer is live; a
    /// strong reference to the helper made here is dropped by the caller, outside the lock.
    func helper(of timer: TimerHandle) -> (helper: AnyObject?, isLive: Bool) {
        mutex.withLock { (timer.extras?.helper, !timer.state.hasEnded) }
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
        try locked { (after: inout AfterUnlock) throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            guard timer.state == .scheduled else { return }
            timer.state = .suspended
            retireLocked(timer, &after)
        }
    }

    func resume(_ timer: TimerHandle) throws(TimerError) {
        try locked { (after: inout AfterUnlock) throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            if isShutDown { throw shutDownErrorLocked() }
            guard timer.state == .suspended else { return }
            timer.state = .scheduled
            // A handler that suspends and resumes its own timer is re-queued when it returns,
            // and a task timer when its task does.
            guard timer.activeCalls == 0 && (timer.extras?.tasksRunning ?? 0) == 0 else { return }
            do throws(TimerError) { try queueLocked(timer, &after) } catch {
                timer.state = .suspended  // left as it was, so the caller may retry
                throw error
            }
        }
    }

    func reschedule(_ timer: TimerHandle, _ schedule: TimerSchedule) throws(TimerError) {
        var watch = false
        defer { if watch { ClockWatcher.shared.watch(self) } }
        try locked { (after: inout AfterUnlock) throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            if isShutDown { throw shutDownErrorLocked() }
            let resolved = try schedule.resolve(ownNow: now(of: schedule.clock, monotonic: clock.now().nanoseconds))
            var previousKey: UInt64?
            if timer.clock != resolved.clock {
                killEntryLocked(timer)  // its entry is in the old clock's queue
                timer.clock = resolved.clock
                watch = needsClockWatcherLocked(for: timer.clock)
            } else if timer.entrySequence != 0 {
                previousKey = RepeatRule.latestFireTime(timer)
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
                killEntryLocked(timer)
            } else if timer.state == .scheduled {
                // Inside its own handler too: the fire loop then sees it queued and leaves it be.
                do throws(TimerError) { try queueLocked(timer, previousKey: previousKey, &after) } catch {
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
