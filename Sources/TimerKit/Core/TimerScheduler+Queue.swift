import Foundation
import Glibc

/// Where each timer waits: registering and queueing a timer, re-arming the driver, and
/// retiring the dead entries that cancels, suspends and earlier resets leave in the queue
/// (marked, then dropped at the top or swept a few at a time). Also the jitter each fire is
/// drawn. All under `mutex`.
extension TimerScheduler {
    /// Registers and queues a timer. `startSuspended` registers it suspended (a `ticks`
    /// sequence resumes it when its consumer asks); `runsTasks` marks a `scheduleAsync` timer.
    func schedule(
        _ schedule: TimerSchedule, name: String?, tolerance: Duration, policy: MissedTickPolicy,
        target: WeakReference?, startSuspended: Bool = false, runsTasks: Bool = false,
        helper: AnyObject? = nil, handler: @escaping @Sendable (Tick) -> Void
    ) throws(TimerError) -> TimerHandle {
        if tolerance < .zero { throw .negativeDuration(parameter: "tolerance", value: tolerance) }
        if let name { try TimerRegistry.validate(name: name) }
        if shutDownFlag.load(ordering: .relaxed) { throw mutex.withLock { shutDownErrorLocked() } }
        let resolved = try schedule.resolve(now: clock.now(), offsets: clock.offsets(fixed: fixedClockOffsets))
        var extras: TimerExtras?
        if tolerance > .zero || runsTasks || helper != nil || resolved.jitterNanoseconds > 0 || schedule.calendarRule != nil {
            let more = TimerExtras()
            more.calendarRule = schedule.calendarRule
            more.jitter = resolved.jitterNanoseconds
            more.tolerance = UInt64(tolerance.saturatingNanoseconds)
            more.runsTasks = runsTasks
            more.helper = helper
            more.parksAfterLastCall = helper != nil
            extras = more
        }
        let timer = try registry.register(name: name, in: registryShard) { id in
            TimerHandle(
                id: id, name: name, scheduler: self, resolved: resolved, policy: policy,
                extras: extras, target: target, handler: handler)
        }
        var refusal: TimerError?
        mutex.lock()
        if isShutDown {
            refusal = shutDownErrorLocked()
        } else if timer.state == .scheduled {  // a registry-wide cancel may have ended it already
            if timer.clock != .monotonic {
                // The offsets may be old: none was read while no timer on these clocks was live.
                refreshClockOffsetsLocked(reporting: clockTimerCount > 0)
                countClockTimerLocked(timer)
            }
            drawJitterLocked(timer)
            if startSuspended {
                timer.state = .suspended
            } else {
                do throws(TimerError) { try queueLocked(timer) } catch { refusal = error }
            }
        }
        mutex.unlock()
        if let refusal {
            timer.cancel()  // also takes it out of the registry
            throw refusal
        }
        watchClocks(for: resolved.clock)
        return timer
    }

    /// Puts a scheduled timer in deadline order and arms the driver if it is now the
    /// earliest. `previousKey` is the key it waited for until now, when it still has a live
    /// entry (a reschedule): a later key then leaves that entry where it is, to be re-filed
    /// when it reaches the top (an idle timeout moved on every read costs no sift). An
    /// earlier key gives it a new entry and the old one dies. If the driver refuses, the timer
    /// is left unqueued and the error is rethrown.
    func queueLocked(_ timer: TimerHandle, previousKey: UInt64? = nil) throws(TimerError) {
        let key = keyLocked(timer)
        timer.clockEpoch = epochLocked(timer.clock)
        nextSequence &+= 1
        timer.orderSequence = nextSequence
        if timer.entrySequence != 0 {
            if let previousKey, key >= previousKey { return }
            deadInQueue += 1
        }
        queue.insert(timer, key: key, sequence: nextSequence)
        timer.entrySequence = nextSequence
        // The earliest entry, not only a new earliest: after a refused wake-up the driver may
        // be armed later than an entry already queued (then it wakes once more than needed).
        let earliest = queue.topKey ?? key
        guard earliest < armedKey, earliest < Self.horizonNanoseconds, let driver else { return }
        do throws(TimerError) {
            try driver.wake(at: MonotonicInstant(nanoseconds: earliest))
            armedKey = earliest
        } catch {
            unqueueLocked(timer)
            throw error
        }
    }

    /// Whether `entry` no longer stands for its timer.
    @inline(__always)
    func isDeadLocked(_ entry: TimerQueue<TimerHandle>.Entry) -> Bool {
        entry.element._withUnsafeGuaranteedRef { $0.entrySequence != entry.sequence }
    }

    /// Arms the driver for the earliest key, or disarms it when nothing can come due.
    func rearmLocked() throws(TimerError) {
        let wanted = queue.topKey.flatMap { $0 < Self.horizonNanoseconds ? $0 : nil } ?? .max
        guard wanted != armedKey, let driver else { return }
        try driver.wake(at: wanted == .max ? .distantFuture : MonotonicInstant(nanoseconds: wanted))
        armedKey = wanted
    }

    /// Kills `timer`'s entry, if it has one: it leaves the queue later (at the top, or swept).
    @inline(__always)
    func unqueueLocked(_ timer: TimerHandle) {
        guard timer.entrySequence != 0 else { return }
        timer.entrySequence = 0
        deadInQueue += 1
    }

    /// Called when `timer` stops being scheduled. Its entry stays in the queue (touching the
    /// queue here would cost several cache misses per cancel with many timers) unless it is
    /// the earliest, or dead entries near the number of live ones: then a few are swept. Timers the
    /// queue lets go of go to `sweptTimers`, for the caller to release after unlocking
    /// (`takeSweptLocked`).
    func retireLocked(_ timer: TimerHandle) {
        let sequence = timer.entrySequence
        guard sequence != 0 else { return }
        unqueueLocked(timer)
        if queue.top?.sequence == sequence {
            dropDeadTopsLocked()
        } else {
            sweepDeadLocked()
        }
        // The native wake-up stays armed for the old earliest deadline: the loop wakes once,
        // finds nothing due and re-arms. Cheaper than a re-arm per cancel when timers are
        // cancelled in deadline order (timeouts). Only an empty queue disarms at once, and if
        // that fails the loop wakes once for nothing.
        // Jobs waiting for the loop keep their wake-up.
        if queue.isEmpty, armedKey != .max, jobs.isEmpty {
            armedKey = .max
            try? driver?.wake(at: .distantFuture)
        }
    }

    /// Once dead entries pass three quarters of the live ones, each new dead entry pays for
    /// sweeping up to two (looking at no more than 16 entries): dead entries then fall back
    /// faster than they come, so they never outnumber the live ones, and no call does more
    /// than a bounded bit. Below that, a cancel touches nothing but its own timer.
    func sweepDeadLocked() {
        guard deadInQueue * 4 > (queue.count - deadInQueue) * 3 else { return }
        deadInQueue -= queue.sweep(budget: 16, limit: 2, isDead: isDeadLocked, into: &sweptTimers)
    }

    /// Drops the dead entries at the top into `sweptTimers`, so the earliest entry is live.
    func dropDeadTopsLocked() {
        while let top = queue.top, isDeadLocked(top), let timer = queue.popTop() {
            deadInQueue -= 1
            sweptTimers.append(timer)
        }
    }

    /// The timers swept under the lock, handed to the caller to release after unlocking; the
    /// buffer comes back through `returnSwept` so that its storage is reused.
    @inline(__always)
    func takeSweptLocked() -> [TimerHandle] {
        guard !sweptTimers.isEmpty else { return [] }
        var taken: [TimerHandle] = []
        swap(&taken, &sweptTimers)
        return taken
    }

    /// Releases `swept` (outside the lock) and gives its storage back for the next sweep.
    func releaseSwept(_ swept: consuming [TimerHandle]) {
        guard swept.capacity > 0 else { return }
        swept.removeAll(keepingCapacity: true)
        mutex.lock()
        if sweptTimers.capacity < swept.capacity && sweptTimers.isEmpty { swap(&sweptTimers, &swept) }
        mutex.unlock()
    }

    /// Draws the jitter of `timer`'s next fire, if it has one.
    func drawJitterLocked(_ timer: TimerHandle) {
        guard let extras = timer.extras else { return }
        guard extras.jitter > 0 else {
            extras.jitterOffset = 0
            return
        }
        // SplitMix64: a few instructions per draw, and repeatable from a seed.
        jitterState &+= 0x9E37_79B9_7F4A_7C15
        var z = jitterState
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        extras.jitterOffset = z % (extras.jitter + 1)
    }

    /// Makes the jitter draws of this scheduler's timers repeatable from `seed`.
    func seedJitter(_ seed: UInt64) { mutex.withLock { jitterState = seed } }
}

/// Timers on the continuous and wall clocks: queued on the monotonic clock at their deadline
/// less their clock's offset, and keyed again when that offset changes (a step of the wall
/// clock, a suspend of the machine). All under `mutex`.
extension TimerScheduler {
    /// The queue key of `timer`: its latest fire time, on the monotonic clock.
    @inline(__always)
    func keyLocked(_ timer: TimerHandle) -> UInt64 {
        let own = RepeatRule.latestFireTime(timer)
        guard timer.clock != .monotonic else { return own }
        return monotonicLocked(own, on: timer.clock)
    }

    /// `instant` on `clock`, as the monotonic clock stands now (0 when it was before boot).
    @inline(__always)
    func monotonicLocked(_ instant: UInt64, on clock: DeadlineClock) -> UInt64 {
        let offset = clockOffsets[clock]
        // "Never" (a date beyond what a deadline holds) stays never, whatever the offset.
        if instant == .max { return instant }
        return instant >= offset ? instant - offset : 0
    }

    func epochLocked(_ clock: DeadlineClock) -> UInt32 {
        switch clock {
        case .monotonic: 0
        case .continuous: continuousEpoch
        case .wall: wallEpoch
        }
    }

    /// Counts a live timer on another clock; the first makes this scheduler one that the
    /// process's clock watcher tells of wall-clock steps and resumes.
    func countClockTimerLocked(_ timer: TimerHandle) {
        clockTimerCount += 1
        timer.clockEpoch = epochLocked(timer.clock)
    }

    /// Reads the clocks' offsets and keeps them. If either moved by more than the reads' own
    /// spread (a step of the wall clock, or a suspend) and `reporting` (timers on those clocks
    /// are live), keys that clock's timers again, counts the change and queues a
    /// `clockChanged` event: one for a suspend (the continuous clock's step, which the wall
    /// clock takes too), and one for what the wall clock stepped beyond it. Returns whether
    /// anything was re-keyed.
    ///
    /// The offsets timers are keyed and ticks reported with stay as they were through changes
    /// within the reads' spread (so that a grid's ticks stay exactly an interval apart); the
    /// fresh ones judge whether a timer is due (so that a small step back fires nothing early).
    @discardableResult
    func refreshClockOffsetsLocked(reporting: Bool = true) -> Bool {
        // A reading too loose to tell a step from the reads' own time changes nothing.
        guard let fresh = clock.preciseOffsets(fixed: fixedClockOffsets, within: Self.clockStepThreshold / 2) else { return false }
        dueOffsets = fresh
        guard reporting else {
            clockOffsets = fresh
            return false
        }
        // Virtual clocks read exactly: any change there is a change.
        let threshold: UInt64
        if case .virtual = clock { threshold = 0 } else { threshold = Self.clockStepThreshold }
        let continuousStep = Int64(bitPattern: fresh.continuous &- clockOffsets.continuous)
        let wallStep = Int64(bitPattern: fresh.wall &- clockOffsets.wall)
        let continuousMoved = continuousStep.magnitude > threshold
        let wallMoved = wallStep.magnitude > threshold
        guard continuousMoved || wallMoved else { return false }
        clockOffsets = fresh
        if continuousMoved {
            continuousEpoch &+= 1
            stats.clockChanges += 1
            pendingEvents.append(.clockChanged(backend: backendName, clock: .continuous, step: .nanoseconds(continuousStep)))
        }
        if wallMoved { wallEpoch &+= 1 }
        let wallOwnStep = wallStep &- (continuousMoved ? continuousStep : 0)
        if wallOwnStep.magnitude > threshold {
            stats.clockChanges += 1
            pendingEvents.append(.clockChanged(backend: backendName, clock: .wall, step: .nanoseconds(wallOwnStep)))
        }
        queue.rekey { entry in
            entry.element._withUnsafeGuaranteedRef { timer in
                guard timer.clock != .monotonic, timer.entrySequence == entry.sequence else { return nil }
                return keyLocked(timer)
            }
        }
        return true
    }

    /// Has the process's clock watcher tell this scheduler of wall-clock steps and resumes,
    /// once it has a timer on a clock they move (and reads the kernel's clocks).
    func watchClocks(for timerClock: DeadlineClock) {
        guard timerClock != .monotonic, case .monotonic = clock else { return }
        ClockWatcher.shared.watch(self)
    }

    /// The wall clock now, as this scheduler reads it.
    func wallClockNow() -> Date {
        let nanoseconds = clock.now().nanoseconds &+ clock.offsets(fixed: fixedClockOffsets).wall
        return Date(timeIntervalSince1970: Double(nanoseconds) / 1e9)
    }

    /// Steps smaller than this (ns) are the spread between two clock reads, not a change.
    static let clockStepThreshold: UInt64 = 200_000

    /// Checks whether the wall clock stepped or the machine was suspended, and if so keys the
    /// timers on those clocks again, re-arms the driver and tells the event observers. Called
    /// by the process's clock watcher, and by `ManualBackend` when its virtual clocks move.
    public func clockMayHaveChanged() {
        mutex.lock()
        guard !isShutDown, clockTimerCount > 0, refreshClockOffsetsLocked() else {
            mutex.unlock()
            return
        }
        // What came due fires at the loop's next wake-up, which this asks for.
        try? rearmLocked()
        let events = takeEventsLocked()
        mutex.unlock()
        deliver(events)
    }
}
