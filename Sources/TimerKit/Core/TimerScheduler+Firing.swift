import Glibc

/// The fire call: take due timers out under the lock, make each call outside it, and settle
/// what the call did under it again (the rule in `TimerScheduler`'s overview, kept here).
extension TimerScheduler {
    /// One call, prepared under the lock and made outside it. It holds its own references to
    /// everything the call uses (a concurrent cancel may drop the record's).
    struct Call {
        /// The timer's handle (its handler made the call), or its callback: not retained, since
        /// the record keeps it while a call runs (a slot gives its owner up only once no call of
        /// it runs, `freeIfIdleLocked`).
        let owner: Unmanaged<AnyObject>
        let handler: @Sendable (Tick) -> Void
        /// The kind of the callback `owner` is, for a timer scheduled with a key; 0 otherwise.
        let kind: UInt8
        let slot: UInt32
        let generation: UInt32
        let index: Int
        let scheduled: UInt64
        let actual: UInt64
        let missed: Int
        let interval: Duration?
        let clock: DeadlineClock
        let clockChanged: Bool
        /// The timer's own observers; nil when it has none (most timers: no reference to hold).
        let observers: [TimerObserver]?
        let target: WeakReference?
        /// The handle of a timer scheduled with a key, made when observers want ticks (which
        /// name a handle); nil otherwise. A handle's timer's handle is `owner`.
        let keyedHandle: TimerHandle?

        /// The handle a tick names: the owner of a handle's timer, or the one made for a
        /// timer scheduled with a key.
        var handle: TimerHandle? { kind == 0 ? unsafeDowncast(owner.takeUnretainedValue(), to: TimerHandle.self) : keyedHandle }
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
        let observed = registry.hasObservers
        var failure: TimerError?
        var fired = 0
        // The first call begins at the wake-up's reading: taken as it came due, a few steps
        // before, and one clock read fewer per wake-up.
        var previousCallEnded: UInt64? = readings.monotonic
        while fired < Self.maxFiresPerCall, !isShutDown, let slot = popDueLocked(readings) {
            fired += 1
            let call = beginCallLocked(slot, readings, at: previousCallEnded, observed: observed)
            let (began, due) = (call.actual, call.scheduled)
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
            do throws(TimerError) { try settleCallLocked(slot, call: called, began: began, due: due, finished: finished, &after) } catch {
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
        // With nothing owed but a release, the call ends here; otherwise it ends once
        // what it owes is done, so that `shutdown` does not return before.
        let owesMore = failure != nil || !jobs.isEmpty || after.owesMoreThanARelease
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

    /// Takes the next due, scheduled timer out of its queue: the earliest live first entry
    /// across the clocks' queues, due on its own clock. Dead entries met on the way are dropped,
    /// and entries of timers reset to a later deadline are re-filed.
    func popDueLocked(_ readings: ClockReadings) -> UInt32? {
        guard !queues.onlyMonotonic else {
            return queues.monotonic.popDue(now: readings.monotonic, horizon: Self.horizonNanoseconds, in: store.table)
        }
        var earliest: (clock: DeadlineClock, at: Int128, sequence: UInt64)?
        for clock in DeadlineClock.allCases {
            let head = queues.with(clock) { $0.liveTop(in: store.table) }
            guard let head, head.key < .max else { continue }
            let at = readings.dueOrder(head.key, on: clock)
            if let best = earliest, (best.at, best.sequence) < (at, head.sequence) { continue }
            earliest = (clock, at, head.sequence)
        }
        guard let earliest else { return nil }
        // Wall dates are never beyond what a deadline holds on their own clock: only "never" is.
        let horizon = earliest.clock == .wall ? UInt64.max : Self.horizonNanoseconds
        return queues.with(earliest.clock) { $0.popDue(now: readings[earliest.clock], horizon: horizon, in: store.table) }
    }

    /// Advances the timer in `slot` past this tick under the lock and returns the call to make.
    /// The call begins at `reading`, a clock reading taken after the timer came due (the
    /// wake-up's, or the previous call's end in a batch), or at a fresh reading.
    func beginCallLocked(_ slot: UInt32, _ readings: ClockReadings, at reading: UInt64?, observed: Bool) -> Call {
        let record = store[slot]
        let index = record.pointee.fires
        record.pointee.fires += 1
        record.pointee.countCall()
        let actual = reading ?? clock.now().nanoseconds
        let timerClock = record.pointee.clock
        // Its own clock's reading at `actual`: the wake-up's, moved on by the time since.
        let ownActual = timerClock == .monotonic ? actual : readings[timerClock].saturatingAdd(actual &- min(actual, readings.monotonic))
        let missed = RepeatRule.catchUp(&record.pointee, now: ownActual)
        // The deadline on the monotonic clock, as a tick reports it.
        let scheduled = clocks.reported.monotonic(RepeatRule.dueTime(record.pointee), on: timerClock)
        var clockChanged = false
        if timerClock != .monotonic {
            let steps = clocks.steps(of: timerClock)
            let fireStats = store.writableFireStats(slot)
            clockChanged = fireStats.pointee.clockSteps != steps
            fireStats.pointee.clockSteps = steps
        }
        if recordsStatistics && missed > 0 {
            store.writableFireStats(slot).pointee.missedTicks &+= UInt32(truncatingIfNeeded: missed)
            if record.pointee.policy == .skip { stats.skipped += missed } else { stats.delayed += missed }
        }
        let interval: Duration? = record.pointee.interval == 0 ? nil : .nanoseconds(Int64(clamping: record.pointee.interval))
        let extras = record.pointee.extras
        if record.pointee.interval > 0 {
            record.pointee.deadline = record.pointee.deadline.saturatingAdd(record.pointee.interval)
            drawJitterLocked(record)
        } else if record.pointee.remaining != 0, let rule = extras?.calendarRule {
            // The first date after this fire: a late fire (a suspend, a step) fires once.
            if let next = rule.next(after: max(record.pointee.deadline, ownActual)) {
                record.pointee.deadline = next
            } else {
                record.pointee.endCalls()
            }
        }
        record.pointee.activeCalls += 1
        if let extras, extras.runsTasks { extras.tasksRunning += 1 }
        let owner = record.pointee.unretainedOwner ?? Unmanaged.passUnretained(Self.endedHandlerOwner)
        let kind = record.pointee.callbackKind
        var keyedHandle: TimerHandle?
        var handler = Self.endedHandler
        let observers = extras.flatMap { $0.observers.isEmpty ? nil : $0.observers }
        if kind == 0 {
            handler = owner._withUnsafeGuaranteedRef { unsafeDowncast($0, to: TimerHandle.self).handler }
        } else if observed || observers != nil {
            keyedHandle = frontLocked(slot)
        }
        return Call(
            owner: owner, handler: handler, kind: kind,
            slot: slot, generation: record.pointee.generation, index: index, scheduled: scheduled, actual: actual,
            missed: missed, interval: interval, clock: timerClock, clockChanged: clockChanged,
            observers: observers, target: extras?.target, keyedHandle: keyedHandle)
    }

    /// Stands in for the owner of a record that has none (never: a queued timer has one).
    private static let endedHandlerOwner = EmptyOwner()
    private final class EmptyOwner: Sendable {}

    /// Settles a call that has returned (`called`: it ran, its target was not gone): records
    /// it, then the timer waits for its task, parks, ends, or is queued again. Throws when the
    /// driver refuses the re-queue's wake-up: the loop cannot go on.
    func settleCallLocked(
        _ slot: UInt32, call called: Bool, began: UInt64, due: UInt64, finished: UInt64?, _ after: inout AfterUnlock
    ) throws(TimerError) {
        let record = store[slot]
        record.pointee.activeCalls -= 1
        let extras = record.pointee.extras
        if !called {
            // The target was gone, so the handler never ran: the tick does not count.
            record.pointee.fires -= 1
            record.pointee.countCall(undo: true)
            if let extras, extras.runsTasks { extras.tasksRunning -= 1 }
        } else if let finished {
            recordCallLocked(slot, began: began, due: due, finished: finished)
        }
        if record.pointee.state.hasEnded {
            // Cancelled while it ran, or ended by its own call: its slot goes back once idle.
            freeIfIdleLocked(slot, &after)
        } else if extras?.runsTasks == true && called {
            // Its task decides what follows, when it returns (`taskReturned`).
        } else if isLastCallOverLocked(record) {
            if extras?.parksAfterLastCall == true {
                record.pointee.state = .suspended  // a debouncer's or throttler's timer waits for its next call
            } else {
                endLocked(slot, because: .completed, into: &after)
            }
        } else if record.pointee.state == .scheduled && record.pointee.entrySequence == 0 && !isShutDown {
            try queueLocked(slot, &after)
        }
        // Otherwise suspended while its handler ran, or the backend began shutting down: nothing
        // is queued; the shutdown ends it.
    }

    /// Whether the timer `record` holds has made its last call (a one-shot's, a count's last)
    /// and so finishes now, whatever that call did to it — suspended it included — unless it
    /// rescheduled it (which gives it calls again) or ended it.
    func isLastCallOverLocked(_ record: UnsafeMutablePointer<TimerRecord>) -> Bool {
        !record.pointee.state.hasEnded && record.pointee.remaining == 0 && record.pointee.entrySequence == 0
    }

    /// Makes one call, outside the lock, and says whether it did. Everything `call` holds is
    /// released when this returns, still outside the lock.
    func perform(_ call: consuming Call) -> Bool {
        guard let target = call.target else {
            invoke(call)
            return true
        }
        // The proxy's job, done at fire time: a target that is gone ends its timer. The
        // strong reference loaded here keeps the target alive for the call and is dropped
        // before the lock is taken again.
        guard let object = target.object else {
            cancel(TimerKey(slot: call.slot, generation: call.generation, scheduler: serial), because: .targetReleased)
            return false
        }
        withExtendedLifetime(object) { invoke(call) }
        return true
    }

    func invoke(_ call: borrowing Call) {
        // The flag first: most calls are observed by no one, and need no copy of the registry's.
        guard registry.hasObservers || call.observers != nil, let handle = call.handle else {
            makeCall(call)
            return
        }
        let registryObservers = registry.currentObservers()
        let tick = Tick(
            index: call.index, scheduled: MonotonicInstant(nanoseconds: call.scheduled), actual: MonotonicInstant(nanoseconds: call.actual),
            missed: call.missed, interval: call.interval, clock: call.clock, clockChanged: call.clockChanged, timer: handle)
        for observer in registryObservers { observer.willFire?(tick) }
        for observer in call.observers ?? [] { observer.willFire?(tick) }
        let began = clock.now()
        makeCall(call)
        let elapsed = clock.now() - began
        for observer in call.observers ?? [] { observer.didFire?(tick, elapsed) }
        for observer in registryObservers { observer.didFire?(tick, elapsed) }
    }

    @inline(__always)
    private func makeCall(_ call: borrowing Call) {
        call.owner._withUnsafeGuaranteedRef { owner in
            if call.kind != 0 {
                callbackKinds.fire(
                    owner, kind: call.kind,
                    TimerFire(
                        key: TimerKey(slot: call.slot, generation: call.generation, scheduler: serial), index: call.index,
                        scheduled: MonotonicInstant(nanoseconds: call.scheduled), actual: MonotonicInstant(nanoseconds: call.actual),
                        missed: call.missed, interval: call.interval, clock: call.clock, clockChanged: call.clockChanged))
            } else {
                call.handler(
                    Tick(
                        index: call.index, scheduled: MonotonicInstant(nanoseconds: call.scheduled),
                        actual: MonotonicInstant(nanoseconds: call.actual), missed: call.missed, interval: call.interval,
                        clock: call.clock, clockChanged: call.clockChanged, timer: unsafeDowncast(owner, to: TimerHandle.self)))
            }
        }
    }
}

extension ClockQueue {
    /// The first entry once dead ones are dropped and reset ones re-filed: the live entry that
    /// is earliest.
    @inline(__always)
    mutating func liveTop(in store: RecordTable) -> TimerQueue.Entry? {
        while let top = heap.top {
            let record = store[top.slot]
            if record.pointee.entrySequence != top.sequence {
                dropDeadTops(in: store)
            } else if record.pointee.orderSequence != top.sequence {
                // Reset later while it waited: it takes its new place now, in the order of its reset.
                heap.refileTop(key: RepeatRule.latestFireTime(record.pointee), sequence: record.pointee.orderSequence)
                record.pointee.entrySequence = record.pointee.orderSequence
            } else {
                return top
            }
        }
        return nil
    }

    /// Takes the live first entry out if it is due at `now` (this queue's clock): when its
    /// latest fire time has come, or its due time has and the loop is awake anyway (a timer with
    /// tolerance fires early in its window rather than cost a wake-up of its own). Keys at or
    /// past `horizon` never come, however far the clock moves.
    @inline(__always)
    mutating func popDue(now: UInt64, horizon: UInt64, in store: RecordTable) -> UInt32? {
        guard let top = liveTop(in: store), top.key < horizon else { return nil }
        let record = store[top.slot]
        guard top.key <= now || RepeatRule.dueTime(record.pointee) <= now else { return nil }
        // Its entry stays at the top, dead, while the call runs: a repeat's next tick takes its
        // place (`insert`), and anything else drops it as dead tops are dropped.
        record.pointee.entrySequence = 0
        entryLeftDeadAtTop(in: store)
        return top.slot
    }
}
