import Glibc

/// The fire call: take due timers out under the lock, make each handler call outside it, and
/// settle what the call did under it again (the rule in `TimerScheduler`'s overview, kept here).
extension TimerScheduler {
    /// One handler call, prepared under the lock and made outside it. It holds its own
    /// references to everything the call uses (a concurrent cancel may drop the timer's).
    struct Call {
        let handler: @Sendable (Tick) -> Void
        let tick: Tick
        let observers: [TimerObserver]
        let target: WeakReference?
    }

    /// The most handlers one `fireDueTimers` call runs (SwiftNIO runs at most 4096 scheduled
    /// tasks per loop tick for the same reason): with more due, it re-arms the driver for at
    /// once and returns, so the host loop serves its I/O between batches of a burst.
    package static let maxFiresPerCall = 4096

    /// Runs the handlers that are due, in deadline order (then scheduling order), at most
    /// 4096 of them, then re-arms the driver for the next one (at once, if more are due), and
    /// runs the jobs of tasks waiting for the loop. Backends call this on their loop when woken.
    public func fireDueTimers() {
        mutex.lock()
        guard !isShutDown, isAttached else {
            mutex.unlock()
            return
        }
        armedKey = .max  // the wake-up that brought us here is used up
        if firingDepth == 0 { firingThread = pthread_self() }
        firingDepth += 1
        var after = AfterUnlock()
        let readings = readClocksLocked()
        var failure: TimerError?
        var fired = 0
        var previousCallEnded: UInt64?
        while fired < Self.maxFiresPerCall, !isShutDown, let timer = popDueLocked(readings) {
            fired += 1
            let call = beginCallLocked(timer, readings, at: previousCallEnded)
            let (began, due) = (call.tick.actual.nanoseconds, call.tick.scheduled.nanoseconds)
            let timed = recordsStatistics
            mutex.unlock()
            // `consume`: without it a debug build keeps `call` (and the handler, tick and
            // target it holds) alive to the end of this scope, after the lock below.
            let called = perform(consume call)
            // Timing the handler costs no extra clock read: the reading that ends this call
            // is also the next call's start (`Tick.actual`), taken after it was due.
            let finished = timed ? clock.now().nanoseconds : nil
            previousCallEnded = finished
            mutex.lock()
            if called, let finished { recordCallLocked(timer, began: began, due: due, finished: finished) }
            do throws(TimerError) { try settleCallLocked(timer, called: called, &after) } catch {
                failure = error
                break
            }
        }
        if !isShutDown && failure == nil {
            // The wake-up's readings would do for the monotonic queue; the other clocks may have
            // stepped while the handlers ran (a handler may step a virtual one).
            let now = queues.onlyMonotonic ? readings : currentReadingsLocked()
            do throws(TimerError) { try rearmLocked(now, &after) } catch { failure = error }
        }
        reportSlowCallsLocked()
        let jobs = takeJobsLocked()
        settleLocked(&after)
        // With nothing owed but letting the driver go, the call ends here; otherwise it ends once
        // what it owes is done, so that `shutdown` does not return before.
        let owesMore = failure != nil || !jobs.isEmpty || after.owesMoreThanReleasingTheDriver
        if !owesMore { endFiringLocked() }
        mutex.unlock()
        after.run()
        guard owesMore else { return }
        if let failure { shutDown(failure: failure) }
        runJobs(jobs)
        locked { after in
            // Jobs queued since the batch was taken (a task that an end waiter above or a job
            // resumed) were queued on the loop's own thread, which asked for no wake-up then.
            wakeForJobsLocked(&after)
            endFiringLocked()
        }
    }

    func endFiringLocked() {
        firingDepth -= 1
        if waiters > 0 { firingDone.broadcast() }
    }

    /// Pops the next due, scheduled timer, with the queue's reference to it: the earliest
    /// live first entry across the clocks' queues, due on its own clock. Dead entries met on the
    /// way are dropped, and entries of timers reset to a later deadline are re-filed.
    func popDueLocked(_ readings: ClockReadings) -> TimerHandle? {
        guard !queues.onlyMonotonic else { return queues.monotonic.popDue(now: readings.monotonic, horizon: Self.horizonNanoseconds) }
        var earliest: (clock: DeadlineClock, at: UInt64, sequence: UInt64)?
        for clock in DeadlineClock.allCases {
            let head = queues.with(clock) { $0.liveTop() }
            guard let head, head.key < .max else { continue }
            let at = readings.monotonic(head.key, on: clock)
            if let best = earliest, (best.at, best.sequence) < (at, head.sequence) { continue }
            earliest = (clock, at, head.sequence)
        }
        guard let earliest else { return nil }
        // Wall dates are never beyond what a deadline holds on their own clock: only "never" is.
        let horizon = earliest.clock == .wall ? UInt64.max : Self.horizonNanoseconds
        return queues.with(earliest.clock) { $0.popDue(now: readings[earliest.clock], horizon: horizon) }
    }

    /// Advances `timer` past this tick under the lock and returns the call to make. The call
    /// begins at `reading`, a clock reading taken after the timer came due (the previous call's
    /// end, in a batch), or at a fresh reading.
    func beginCallLocked(_ timer: TimerHandle, _ readings: ClockReadings, at reading: UInt64?) -> Call {
        let index = timer.fires
        timer.fires += 1
        if timer.remaining > 0 { timer.remaining -= 1 }
        let actual = reading ?? clock.now().nanoseconds
        // Its own clock's reading at `actual`: the wake-up's, moved on by the time since.
        let ownActual =
            timer.clock == .monotonic ? actual : readings[timer.clock].saturatingAdd(actual &- min(actual, readings.monotonic))
        let missed = RepeatRule.catchUp(timer, now: ownActual)
        // The deadline on the monotonic clock, as `Tick` reports it.
        let scheduled = clocks.reported.monotonic(RepeatRule.dueTime(timer), on: timer.clock)
        let steps = clocks.steps(of: timer.clock)
        let clockChanged = timer.clockSteps != steps
        timer.clockSteps = steps
        if recordsStatistics && missed > 0 {
            timer.missedTicks += missed
            if timer.policy == .skip { stats.skipped += missed } else { stats.delayed += missed }
        }
        let interval: Duration? = timer.interval == 0 ? nil : .nanoseconds(Int64(clamping: timer.interval))
        if timer.interval > 0 {
            timer.deadline = timer.deadline.saturatingAdd(timer.interval)
            drawJitterLocked(timer)
        } else if timer.remaining != 0, let rule = timer.extras?.calendarRule {
            // The first date after this fire: a late fire (a suspend, a step) fires once.
            if let next = rule.next(after: max(timer.deadline, ownActual)) { timer.deadline = next } else { timer.remaining = 0 }
        }
        timer.activeCalls += 1
        if let extras = timer.extras, extras.runsTasks { extras.tasksRunning += 1 }
        let tick = Tick(
            index: index, scheduled: MonotonicInstant(nanoseconds: scheduled), actual: MonotonicInstant(nanoseconds: actual),
            missed: missed, interval: interval, clock: timer.clock, clockChanged: clockChanged, timer: timer)
        return Call(handler: timer.handler, tick: tick, observers: timer.extras?.observers ?? [], target: timer.target)
    }

    /// Settles a call that has returned (`called`: its handler ran, its target was not gone):
    /// the timer waits for its task, parks, ends, or is queued again. Throws
    /// when the driver refuses the re-queue's wake-up: the loop cannot go on.
    func settleCallLocked(_ timer: TimerHandle, called: Bool, _ after: inout AfterUnlock) throws(TimerError) {
        timer.activeCalls -= 1
        if !called {
            // The target was gone, so the handler never ran: the tick does not count.
            timer.fires -= 1
            if timer.remaining >= 0 { timer.remaining += 1 }
            if let extras = timer.extras, extras.runsTasks { extras.tasksRunning -= 1 }
        }
        if timer.extras?.runsTasks == true && called {
            // Its task decides what follows, when it returns (`taskReturned`). If it has returned
            // already, during this call, the timer may have ended with this call the last thing
            // running: then its end waiters wait no longer.
            takeEndWaitersLocked(timer, into: &after)
        } else if isLastCallOverLocked(timer) && timer.extras?.parksAfterLastCall == true {
            timer.state = .suspended  // a debouncer's or throttler's timer waits for its next call
        } else if isLastCallOverLocked(timer) {
            endLocked(timer, .finished, because: .completed, into: &after)
        } else if timer.state == .scheduled && timer.entrySequence == 0 && !isShutDown {
            try queueLocked(timer, &after)
        } else {
            // Cancelled or suspended while its handler ran (the queue no longer holds it), or
            // the backend began shutting down meanwhile: nothing is queued; if it has ended, its
            // end waiters run now that the call is over.
            takeEndWaitersLocked(timer, into: &after)
        }
    }

    /// Whether `timer` has made its last call (a one-shot's, a count's last) and so finishes
    /// now, whatever that call did to it — suspended it included — unless it rescheduled it
    /// (which gives it calls again) or ended it.
    func isLastCallOverLocked(_ timer: TimerHandle) -> Bool {
        !timer.state.hasEnded && timer.remaining == 0 && timer.entrySequence == 0
    }

    /// Makes one handler call, outside the lock, and says whether it did. Everything `call`
    /// holds is released when this returns, still outside the lock.
    func perform(_ call: consuming Call) -> Bool {
        guard let target = call.target else {
            invoke(call)
            return true
        }
        // The proxy's job, done at fire time: a target that is gone ends its timer. The
        // strong reference loaded here keeps the target alive for the call and is dropped
        // before the lock is taken again.
        guard let object = target.object else {
            call.tick.timer.cancel(because: .targetReleased)
            return false
        }
        withExtendedLifetime(object) { invoke(call) }
        return true
    }

    func invoke(_ call: borrowing Call) {
        let registryObservers = registry.currentObservers()
        if registryObservers.isEmpty && call.observers.isEmpty {
            call.handler(call.tick)
            return
        }
        for observer in registryObservers { observer.willFire?(call.tick) }
        for observer in call.observers { observer.willFire?(call.tick) }
        let began = clock.now()
        call.handler(call.tick)
        let elapsed = clock.now() - began
        for observer in call.observers { observer.didFire?(call.tick, elapsed) }
        for observer in registryObservers { observer.didFire?(call.tick, elapsed) }
    }
}

extension ClockQueue {
    /// The first entry once dead ones are dropped and reset ones re-filed: the live entry that
    /// is earliest.
    mutating func liveTop() -> TimerQueue<TimerHandle>.Entry? {
        while let top = heap.top {
            let timer = top.element.takeUnretainedValue()
            if timer.entrySequence != top.sequence {
                dropDeadTops()
            } else if timer.orderSequence != top.sequence {
                // Reset later while it waited: it takes its new place now, in the order of its reset.
                heap.refileTop(key: RepeatRule.latestFireTime(timer), sequence: timer.orderSequence)
                timer.entrySequence = timer.orderSequence
            } else {
                return top
            }
        }
        return nil
    }

    /// Pops the live first entry if it is due at `now` (this queue's clock): when its latest
    /// fire time has come, or its due time has and the loop is awake anyway (a timer with
    /// tolerance fires early in its window rather than cost a wake-up of its own). Keys at or
    /// past `horizon` never come, however far the clock moves.
    mutating func popDue(now: UInt64, horizon: UInt64) -> TimerHandle? {
        guard let top = liveTop(), top.key < horizon else { return nil }
        let timer = top.element.takeUnretainedValue()
        guard top.key <= now || RepeatRule.dueTime(timer) <= now else { return nil }
        timer.entrySequence = 0
        return popLiveTop()
    }
}
