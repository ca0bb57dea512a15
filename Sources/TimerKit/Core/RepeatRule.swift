/// The arithmetic of repeats: where a timer's next tick falls, how late it may fire, and
/// what a late tick does to the grid. Pure functions of a timer's record, called by the
/// scheduler with its lock held.
enum RepeatRule {
    private static let horizonNanoseconds = MonotonicInstant.horizon.nanoseconds
    private static let delayThresholdNanoseconds: UInt64 = 5_000_000

    /// The latest time `timer` may fire: its heap key. A repeating timer's tolerance is
    /// capped at half its interval (as Core Foundation does), so a lone timer, which fires at
    /// the end of its window, never misses a tick because of it. A deadline below the
    /// horizon keeps its key below it, whatever the tolerance.
    @inline(__always)
    static func latestFireTime(_ timer: borrowing TimerRecord) -> UInt64 {
        guard let extras = timer.extras, extras.tolerance > 0 || extras.jitterOffset > 0 else { return timer.deadline }
        let allowed = timer.interval > 0 ? min(extras.tolerance, timer.interval / 2) : extras.tolerance
        let latest = timer.deadline.saturatingAdd(extras.jitterOffset).saturatingAdd(allowed)
        return timer.deadline < horizonNanoseconds ? min(latest, horizonNanoseconds - 1) : latest
    }

    /// When `timer`'s next fire is due: its grid point, plus this fire's jitter.
    @inline(__always)
    static func dueTime(_ timer: borrowing TimerRecord) -> UInt64 {
        guard let offset = timer.extras?.jitterOffset, offset > 0 else { return timer.deadline }
        return timer.deadline.saturatingAdd(offset)
    }

    /// Applies a repeating timer's missed-tick policy as it fires at `now`, and returns how
    /// many grid points it missed. Done at fire time, it treats every cause alike: a stalled
    /// loop, a handler that overran, a timer resumed after a pause.
    static func catchUp(_ timer: inout TimerRecord, now: UInt64) -> Int {
        let due = dueTime(timer)
        guard timer.interval > 0, timer.policy != .burst, now > due else { return 0 }
        let late = now - due
        let behind = late / timer.interval
        switch timer.policy {
        case .skip:
            // Fire the latest grid point that is due; the earlier ones are dropped.
            guard behind > 0 else { return 0 }
            timer.deadline = timer.deadline.saturatingAdd(behind.saturatingMultiply(timer.interval))
        case .delay:
            // Restart the grid from now, unless the lateness is mere jitter.
            guard late >= min(timer.interval, delayThresholdNanoseconds) else { return 0 }
            timer.deadline = now - min(due - timer.deadline, now)  // this fire's grid point: due now
        case .burst:
            return 0
        }
        return Int(clamping: behind)
    }
}
