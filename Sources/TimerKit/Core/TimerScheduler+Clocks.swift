import Foundation

/// What the continuous and wall clocks read against a scheduler's clock. Guarded by its lock.
struct ClockState {
    /// Their offsets as last read: when a deadline on them comes, on the monotonic clock.
    var offsets: ClockOffsets
    /// The offsets as of the last step reported. Ticks are converted with these, so that a
    /// grid's ticks stay exactly an interval apart through changes within the reads' spread;
    /// a reading that moves beyond `threshold` from them is a step.
    var reported: ClockOffsets
    /// A custom clock's offsets: its time is not the kernel's, so they are fixed when the
    /// scheduler starts (its wall and continuous clocks start at the system's readings then).
    let fixed: ClockOffsets
    /// Steps of each clock seen so far: a tick whose timer was queued before the latest one
    /// says so (`Tick.clockChanged`).
    var continuousSteps: UInt32 = 0
    var wallSteps: UInt32 = 0
    /// The process's clock watcher tells this scheduler of steps: from its first timer on
    /// those clocks until it shuts down.
    var isWatched = false
    /// Changes smaller than this (ns) are the spread between two reads, not a step. Virtual
    /// clocks read exactly, so any change there is one.
    let threshold: UInt64

    init(_ clock: SchedulerClock) {
        let start = clock.now().nanoseconds
        fixed = ClockOffsets.reading(continuous: DeadlineClock.read(.continuous), wall: DeadlineClock.read(.wall), against: start)
        if case .virtual = clock { threshold = 0 } else { threshold = TimerScheduler.clockStepThreshold }
        // A tight reading if one can be had: a loose one would look like a step at the next.
        offsets = clock.preciseOffsets(fixed: fixed, within: threshold / 2) ?? clock.offsets(fixed: fixed)
        reported = offsets
    }

    func steps(of clock: DeadlineClock) -> UInt32 {
        switch clock {
        case .monotonic: 0
        case .continuous: continuousSteps
        case .wall: wallSteps
        }
    }
}

/// The continuous and wall clocks: each has a queue of its own, keyed on its own clock, so a
/// step or a suspend changes no key. What they read decides whether their timers are due; their
/// offsets from the monotonic clock decide only when the one native wake-up comes. All under
/// `mutex`.
extension TimerScheduler {
    /// Steps smaller than this (ns) are the spread between two clock reads, not a change.
    static let clockStepThreshold: UInt64 = 200_000

    /// What `other` reads now, given the scheduler's clock read `monotonic`.
    @inline(__always)
    func now(of other: DeadlineClock, monotonic: UInt64) -> UInt64 {
        clock.now(of: other, monotonic: monotonic, fixed: clocks.fixed)
    }

    /// Every clock's reading for a wake-up. The continuous and wall clocks are read only while
    /// timers wait on them (and then their offsets too, so that a step is seen and reported).
    func readClocksLocked() -> ClockReadings {
        if !queues.onlyMonotonic { refreshOffsetsLocked() }
        return currentReadingsLocked()
    }

    /// Every clock's reading now, without looking for steps.
    func currentReadingsLocked() -> ClockReadings {
        let monotonic = clock.now().nanoseconds
        guard !queues.onlyMonotonic else { return ClockReadings(monotonic: monotonic, continuous: 0, wall: 0) }
        return ClockReadings(
            monotonic: monotonic, continuous: now(of: .continuous, monotonic: monotonic), wall: now(of: .wall, monotonic: monotonic))
    }

    /// Reads the clocks' offsets and keeps them. If either moved beyond the reads' spread since
    /// the last step (a step of the wall clock, a suspend), that is a step: ticks convert with
    /// the new offsets from now on, and if timers wait on those clocks, the change is counted and
    /// a `clockChanged` event queued: one for a suspend (the continuous clock's step, which the
    /// wall clock takes too) and one for what the wall clock stepped beyond it. Returns whether
    /// it reported a step.
    @discardableResult
    func refreshOffsetsLocked() -> Bool {
        // A reading too loose to tell a step from the reads' own time changes nothing.
        guard let fresh = clock.preciseOffsets(fixed: clocks.fixed, within: clocks.threshold / 2) else { return false }
        clocks.offsets = fresh
        let continuousStep = fresh.continuous &- clocks.reported.continuous
        let wallStep = fresh.wall &- clocks.reported.wall
        let continuousMoved = continuousStep.magnitude > clocks.threshold
        let wallMoved = wallStep.magnitude > clocks.threshold
        guard continuousMoved || wallMoved else { return false }
        clocks.reported = fresh
        // A step while no timer waits on those clocks changes no timer: no event.
        guard queues.continuous.live + queues.wall.live > 0 else { return false }
        if continuousMoved {
            clocks.continuousSteps &+= 1
            stats.clockChanges += 1
            pendingEvents.append(.clockChanged(backend: backendName, clock: .continuous, step: .nanoseconds(continuousStep)))
        }
        if wallMoved { clocks.wallSteps &+= 1 }
        let wallOwnStep = wallStep &- (continuousMoved ? continuousStep : 0)
        if wallOwnStep.magnitude > clocks.threshold {
            stats.clockChanges += 1
            pendingEvents.append(.clockChanged(backend: backendName, clock: .wall, step: .nanoseconds(wallOwnStep)))
        }
        return true
    }

    /// Checks whether the wall clock stepped or the machine was suspended, and if so re-arms the
    /// driver for the new earliest wake-up (O(1): no key changes) and tells the event observers.
    /// Called by the process's clock watcher, and by `ManualBackend` when its virtual clocks move.
    public func clockMayHaveChanged() {
        locked { after in
            guard !isShutDown, !queues.onlyMonotonic, refreshOffsetsLocked() else { return }
            // Asked again, the driver that keeps those clocks' deadlines itself looks at them
            // again (its reading of a clock may differ from the kernel's: a test's skew).
            if hasOwnClockDriver { armedOwnClockKeys = OwnClockKeys() }
            // What came due fires at the loop's next wake-up, which this asks for.
            try? rearmLocked(nil, &after)
        }
    }

    /// Whether the process's clock watcher must be told of this scheduler now: its first timer
    /// on a clock that steps (on the kernel's clocks only: virtual and custom ones are moved by
    /// their owners). Once per scheduler, until it shuts down.
    func needsClockWatcherLocked(for timerClock: DeadlineClock) -> Bool {
        guard timerClock != .monotonic, case .monotonic = clock, !clocks.isWatched, !isShutDown else { return false }
        clocks.isWatched = true
        return true
    }

    /// Tells the process's clock watcher of this scheduler, after `needsClockWatcherLocked` said
    /// so, outside the lock. A shutdown that began meanwhile may have let the watcher go of it
    /// before this call reached the watcher: then this lets go again. (If the watcher saw that
    /// shutdown's `unwatch` first, this call's `watch` comes after it, so the phase it reads
    /// next is the shutdown's; if not, that `unwatch` removes what this call added.)
    func startWatchingClocks() {
        ClockWatcher.shared.watch(self)
        if hasShutDown { ClockWatcher.shared.unwatch(self) }
    }

    /// The wall clock now, as this scheduler reads it.
    func wallClockNow() -> Date {
        let nanoseconds = mutex.withLock { now(of: .wall, monotonic: clock.now().nanoseconds) }
        return Date(nanosecondsSince1970: nanoseconds)
    }
}
