import Glibc

/// The fire call: take due timers out under the lock, make each handler call outside it, and
/// release what they held after it (the rule in `TimerScheduler`'s overview, kept here).
extension TimerScheduler {
    /// One handler call, prepared under the lock and made outside it. It holds its own
    /// references to everything the call uses (a concurrent cancel may drop the timer's).
    struct Call {
        let handler: @Sendable (Tick) -> Void
        let tick: Tick
        let observers: [TimerObserver]
        let target: WeakReference?
    }

    /// A timer the fire loop lets go of, released after the lock: the queue's reference to
    /// it and, for one that just finished, its handler. It leaves the registry then too.
    struct Released {
        let timer: TimerHandle
        var handler: (@Sendable (Tick) -> Void)? = nil
        var observers: [TimerObserver] = []
        var endWaiters: [EndWaiter] = []
        var leavesRegistry = false
    }

    /// The most handlers one `fireDueTimers` call runs (SwiftNIO runs at most 4096 scheduled
    /// tasks per loop tick for the same reason): with more due, it re-arms the driver for at
    /// once and returns, so the host loop serves its I/O between batches of a burst.
    package static let maxFiresPerCall = 4096

    /// Runs the handlers that are due, in deadline order (then scheduling order), at most
    /// 4096 of them, then re-arms the driver for the next one (at once, if more are due).
    /// Backends call this on their loop when woken.
    public func fireDueTimers() {
        mutex.lock()
        guard !isShutDown, driver != nil else {
            mutex.unlock()
            return
        }
        armedKey = .max  // the wake-up that brought us here is used up
        if firingDepth == 0 { firingThread = pthread_self() }
        firingDepth += 1
        if clockTimerCount > 0 { refreshClockOffsetsLocked() }
        let now = clock.now().nanoseconds
        var released: [Released] = []
        swap(&released, &spareReleased)
        var failure: TimerError?
        var fired = 0
        var previousCallEnded: MonotonicInstant?
        while fired < Self.maxFiresPerCall, !isShutDown, let timer = popDueLocked(now: now, into: &released) {
            fired += 1
            let call = beginCallLocked(timer, at: previousCallEnded)
            let began = call.tick.actual.nanoseconds
            let due = call.tick.scheduled.nanoseconds
            let timed = recordsStatistics
            mutex.unlock()
            // `consume`: without it a debug build keeps `call` (and the handler, tick and
            // target it holds) alive to the end of this scope, after the lock below.
            let called = perform(consume call)
            // Timing the handler costs no extra clock read: the reading that ends this call
            // is also the next call's start (`Tick.actual`), taken after it was due.
            let finished = timed ? clock.now() : nil
            previousCallEnded = finished
            mutex.lock()
            endCallLocked(timer, called: called)
            // Only a call that happened counts (one whose target was gone did not).
            if called, let finished {
                recordCallLocked(timer, late: began > due ? began - due : 0, began: began, finished: finished.nanoseconds)
            }
            if timer.extras?.runsTasks == true && called {
                // Its task decides what follows, when it returns (`taskReturned`). If it has
                // returned already, during this call, the timer may have ended with this call
                // the last thing running: then `ended` waits no longer.
                let endWaiters = takeEndWaitersLocked(timer)
                if !endWaiters.isEmpty { released.append(Released(timer: timer, endWaiters: endWaiters)) }
            } else if isLastCallOverLocked(timer) && timer.extras?.parksAfterLastCall == true {
                // A debouncer's or throttler's timer waits, suspended, for its next call.
                timer.state = .suspended
            } else if isLastCallOverLocked(timer) {
                timer.state = .finished
                timer.endCause = .completed
                if timer.clock != .monotonic { clockTimerCount -= 1 }
                let observers = dropObserversLocked(timer)
                // Counted as running until it has left the registry (after the lock): whoever
                // waits for its end (`whenEnded`, `ended`) then finds it gone from there too.
                timer.activeCalls += 1
                released.append(Released(timer: timer, handler: timer.handler, observers: observers, leavesRegistry: true))
                timer.handler = Self.endedHandler
            } else if timer.state == .scheduled && timer.entrySequence == 0 && !isShutDown {
                do throws(TimerError) { try queueLocked(timer) } catch {
                    failure = error
                    released.append(Released(timer: timer))
                    break
                }
            } else if timer.entrySequence == 0 {
                // Cancelled or suspended while its handler ran (the queue no longer holds it),
                // or the backend began shutting down meanwhile: nothing is queued, and the
                // driver is not woken, after shutdown has begun; the shutdown cancels it.
                released.append(Released(timer: timer, endWaiters: takeEndWaitersLocked(timer)))
            }
        }
        var stopped: (timers: [TimerHandle], jobs: [UnownedJob]) = ([], [])
        if !isShutDown && failure == nil {
            while let top = queue.top, isDeadLocked(top), let timer = queue.popTop() {
                deadInQueue -= 1
                released.append(Released(timer: timer))
            }
            do throws(TimerError) { try rearmLocked() } catch { failure = error }
        }
        if let failure { stopped = beginShutdownLocked(failure: failure) }
        // Jobs queued so far run after this batch of handlers; the ones they queue, at the
        // next wake-up, so that a task that keeps yielding cannot hold the timers back.
        var batch: [UnownedJob] = []
        if !isShutDown && !jobs.isEmpty {
            swap(&batch, &spareJobs)
            swap(&batch, &jobs)
        }
        let events = takeEventsLocked()
        let timesEachJob = !batch.isEmpty && slowHandlerNanoseconds > 0
        // Work left for after the lock keeps this call "firing" until it is done, so that
        // `shutdown` does not return while finished timers are still leaving the registry.
        let hasWrapUp = !released.isEmpty || failure != nil || !batch.isEmpty || !events.events.isEmpty
        if !hasWrapUp {
            swap(&released, &spareReleased)  // empty: nothing is released here
            endFiringLocked()
        }
        mutex.unlock()
        guard hasWrapUp else { return }
        for item in released where item.leavesRegistry { registry.remove(item.timer) }
        var leftRegistry: [EndWaiter] = []
        if released.contains(where: \.leavesRegistry) {
            mutex.lock()
            for item in released where item.leavesRegistry {
                item.timer.activeCalls -= 1
                leftRegistry.append(contentsOf: takeEndWaitersLocked(item.timer))
            }
            if waiters > 0 { firingDone.broadcast() }
            mutex.unlock()
        }
        for item in released { for waiter in item.endWaiters { waiter.action() } }
        for waiter in leftRegistry { waiter.action() }
        released.removeAll(keepingCapacity: true)
        deliver(events)
        if failure != nil { finishShutdown(stopped) }
        let ranJobs = !batch.isEmpty
        let jobsBegan = ranJobs ? clock.now().nanoseconds : 0
        var jobsFinished = jobsBegan
        if ranJobs {
            let executor = asUnownedTaskExecutor()
            for job in batch {
                job.runSynchronously(on: executor)
                // Each job is timed on its own only when slow ones are reported.
                if timesEachJob {
                    let began = jobsFinished
                    jobsFinished = clock.now().nanoseconds
                    mutex.withLock { recordJobLocked(began: began, finished: jobsFinished) }
                }
            }
            batch.removeAll(keepingCapacity: true)
            if !timesEachJob { jobsFinished = clock.now().nanoseconds }
        }
        mutex.lock()
        if ranJobs && !timesEachJob { stats.busyNanoseconds &+= jobsFinished &- jobsBegan }
        let jobEvents = takeEventsLocked()
        if spareReleased.capacity < released.capacity { swap(&released, &spareReleased) }
        if spareJobs.capacity < batch.capacity { swap(&batch, &spareJobs) }
        // Jobs queued while the batch ran (a task's next step) need a wake-up of their own.
        let stranded = wakeForJobsLocked()
        endFiringLocked()
        mutex.unlock()
        for job in stranded { globalConcurrentExecutor.enqueue(job) }
        deliver(jobEvents)
    }

    func endFiringLocked() {
        firingDepth -= 1
        if waiters > 0 { firingDone.broadcast() }
    }

    /// Pops the next due, scheduled timer; dead entries met on the way go to `released`, and
    /// entries of timers reset to a later deadline are re-filed at their new place.
    func popDueLocked(now: UInt64, into released: inout [Released]) -> TimerHandle? {
        while let top = queue.top, top.key < Self.horizonNanoseconds {
            let timer = top.element.takeUnretainedValue()
            if timer.entrySequence != top.sequence {
                deadInQueue -= 1
                if let timer = queue.popTop() { released.append(Released(timer: timer)) }
                continue
            }
            if timer.orderSequence != top.sequence {
                // Reset later while it waited: it takes its new place now, in the order of its reset.
                let key = keyLocked(timer)
                queue.refileTop(key: key, sequence: timer.orderSequence)
                timer.entrySequence = timer.orderSequence
                continue
            }
            if timer.clock != .monotonic {
                // Judged on its own clock, so that it never fires before its deadline there,
                // whatever its key said: a key made before the wall clock stepped back is early.
                let ownNow = now &+ dueOffsets[timer.clock]
                let ownDue = RepeatRule.dueTime(timer)
                guard RepeatRule.latestFireTime(timer) <= ownNow || ownDue <= ownNow else {
                    guard top.key <= now else { return nil }
                    // Filed again for when it is due by the clock as just read: not at once,
                    // which would wake the loop again and again until then.
                    let offset = dueOffsets[timer.clock]
                    queue.refileTop(key: max(ownDue >= offset ? ownDue - offset : 0, now &+ 1), sequence: top.sequence)
                    continue
                }
                timer.entrySequence = 0
                return queue.popTop()
            }
            guard top.key <= now || RepeatRule.dueTime(timer) <= now else { return nil }
            timer.entrySequence = 0
            return queue.popTop()
        }
        return nil
    }

    /// Advances `timer` past this tick under the lock and returns the call to make.
    /// The call begins at `reading`, a clock reading taken after the timer came due (the
    /// previous call's end, in a batch), or at a fresh reading.
    func beginCallLocked(_ timer: TimerHandle, at reading: MonotonicInstant? = nil) -> Call {
        let index = timer.fires
        timer.fires += 1
        if timer.remaining > 0 { timer.remaining -= 1 }
        let actual = reading ?? clock.now()
        let offset = clockOffsets[timer.clock]
        let ownActual = actual.nanoseconds &+ offset
        let missed = RepeatRule.catchUp(timer, now: ownActual)
        let ownScheduled = RepeatRule.dueTime(timer)
        // The deadline on the monotonic clock, as `Tick` reports it.
        let scheduled = ownScheduled >= offset ? ownScheduled - offset : 0
        let epoch = epochLocked(timer.clock)
        let clockChanged = timer.clockEpoch != epoch
        timer.clockEpoch = epoch
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
            index: index, scheduled: MonotonicInstant(nanoseconds: scheduled), actual: actual,
            missed: missed, interval: interval, clock: timer.clock, clockChanged: clockChanged, timer: timer)
        return Call(handler: timer.handler, tick: tick, observers: timer.extras?.observers ?? [], target: timer.target)
    }

    /// Whether `timer` has made its last call (a one-shot's, a count's last) and so finishes
    /// now, whatever that call did to it — suspended it included — unless it rescheduled it
    /// (which gives it calls again) or ended it.
    func isLastCallOverLocked(_ timer: TimerHandle) -> Bool {
        !timer.state.hasEnded && timer.remaining == 0 && timer.entrySequence == 0
    }

    func endCallLocked(_ timer: TimerHandle, called: Bool) {
        if !called {
            // The target was gone, so the handler never ran: the tick does not count.
            timer.fires -= 1
            if timer.remaining >= 0 { timer.remaining += 1 }
            if let extras = timer.extras, extras.runsTasks { extras.tasksRunning -= 1 }
        }
        timer.activeCalls -= 1
        if waiters > 0 { firingDone.broadcast() }
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
