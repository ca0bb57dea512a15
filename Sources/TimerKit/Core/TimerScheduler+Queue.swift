import Glibc

/// Where each timer waits: registering and queueing a timer, the one place a queue entry dies,
/// and arming the driver for the earliest wake-up across the clocks' queues. Also the jitter
/// each fire is drawn. All under `mutex`.
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
        let resolved = try schedule.resolve(ownNow: now(of: schedule.clock, monotonic: clock.now().nanoseconds))
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
        var watch = false
        let refusal = locked { (after: inout AfterUnlock) -> TimerError? in
            if isShutDown {
                endLocked(timer, .cancelled, because: .cancelled, into: &after)
                return shutDownErrorLocked()
            }
            // A registry-wide cancel may have ended it already.
            guard timer.state == .scheduled else { return nil }
            watch = needsClockWatcherLocked(for: timer.clock)
            drawJitterLocked(timer)
            if startSuspended {
                timer.state = .suspended
                return nil
            }
            do throws(TimerError) { try queueLocked(timer, &after) } catch {
                endLocked(timer, .cancelled, because: .cancelled, into: &after)
                return error
            }
            return nil
        }
        if watch { ClockWatcher.shared.watch(self) }
        if let refusal { throw refusal }
        return timer
    }

    /// Puts a scheduled timer in deadline order in its clock's queue and arms the driver if it
    /// is now the earliest. `previousKey` is the key it waited for until now, when it still has
    /// a live entry in that queue (a reschedule on the same clock): a later key then leaves that
    /// entry where it is, to be re-filed when it reaches the top (an idle timeout moved on every
    /// read costs no sift). An earlier key gives it a new entry and the old one dies. If the
    /// driver refuses, the timer is left unqueued and the error is rethrown.
    func queueLocked(_ timer: TimerHandle, previousKey: UInt64? = nil, _ after: inout AfterUnlock) throws(TimerError) {
        let key = RepeatRule.latestFireTime(timer)
        timer.clockSteps = clocks.steps(of: timer.clock)
        nextSequence &+= 1
        timer.orderSequence = nextSequence
        if timer.entrySequence != 0 {
            if let previousKey, key >= previousKey { return }
            killEntryLocked(timer)
        }
        if timer.clock != .monotonic && queues.read(timer.clock, { $0.live == 0 }) {
            // The offsets may be old: none was read while no timer waited on this clock.
            refreshOffsetsLocked()
        }
        queues.with(timer.clock) { $0.insert(timer, key: key, sequence: nextSequence) }
        timer.entrySequence = nextSequence
        // The earliest wake-up, not only this timer's: after a refused wake-up the driver may be
        // armed later than an entry already queued (then it wakes once more than needed).
        let wanted = earliestWakeLocked(nil)
        guard wanted < armedKey else { return }
        do throws(TimerError) { try wakeLocked(at: wanted, &after) } catch {
            killEntryLocked(timer)
            throw error
        }
    }

    /// The one place a queue entry dies: `timer` stops waiting in its clock's queue (cancelled,
    /// ended, suspended, moved earlier or to another clock). The queue pays for the dead entry
    /// there (`ClockQueue.entryDied`), so dead entries stay bounded on every path.
    @inline(__always)
    func killEntryLocked(_ timer: TimerHandle) {
        let sequence = timer.entrySequence
        guard sequence != 0 else { return }
        timer.entrySequence = 0
        queues.with(timer.clock) { $0.entryDied(sequence: sequence) }
    }

    /// Called when `timer` stops being scheduled: its entry dies. The native wake-up stays
    /// armed for the old earliest deadline: the loop wakes once, finds nothing due and re-arms,
    /// which is cheaper than a re-arm per cancel when timers are cancelled in deadline order
    /// (timeouts). Only empty queues disarm at once (if that fails the loop wakes once for
    /// nothing); jobs waiting for the loop keep their wake-up.
    func retireLocked(_ timer: TimerHandle, _ after: inout AfterUnlock) {
        killEntryLocked(timer)
        if queues.isEmpty, armedKey != .max, jobs.isEmpty {
            try? wakeLocked(at: .max, &after)
        }
    }

    /// When the loop must wake next, on the monotonic clock: the earliest of the queues' first
    /// entries, each converted from its own clock through `readings` (a wake-up's), or through
    /// the offsets as last read when nil; `.max` when nothing can come due (no entry, or only
    /// ones past the horizon).
    func earliestWakeLocked(_ readings: ClockReadings?) -> UInt64 {
        var earliest = queues.monotonic.heap.topKey ?? .max
        if !queues.onlyMonotonic {
            if let key = queues.continuous.heap.topKey { earliest = min(earliest, monotonicLocked(key, on: .continuous, readings)) }
            if let key = queues.wall.heap.topKey { earliest = min(earliest, monotonicLocked(key, on: .wall, readings)) }
        }
        return earliest < Self.horizonNanoseconds ? earliest : .max
    }

    /// When `key` on `clock` comes on the monotonic clock.
    @inline(__always)
    func monotonicLocked(_ key: UInt64, on clock: DeadlineClock, _ readings: ClockReadings?) -> UInt64 {
        readings?.monotonic(key, on: clock) ?? clocks.offsets.monotonic(key, on: clock)
    }

    /// Arms the driver for the earliest wake-up, or disarms it when nothing can come due.
    func rearmLocked(_ readings: ClockReadings?, _ after: inout AfterUnlock) throws(TimerError) {
        let wanted = earliestWakeLocked(readings)
        guard wanted != armedKey else { return }
        try wakeLocked(at: wanted, &after)
    }

    /// Asks the driver to wake the loop at `key` (`.max`: disarms). The driver is loaded into
    /// `after`, so that if that strong reference is the backend's last, the backend goes after
    /// unlocking (its `deinit` shuts this scheduler down, which takes this lock).
    func wakeLocked(at key: UInt64, _ after: inout AfterUnlock) throws(TimerError) {
        if after.driver == nil { after.driver = driver }
        guard after.driver != nil else { return }
        try after.driver?.wake(at: key == .max ? .distantFuture : MonotonicInstant(nanoseconds: key))
        armedKey = key
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
