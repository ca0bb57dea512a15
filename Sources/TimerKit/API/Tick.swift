/// One handler call: which tick it is and how late it runs.
public struct Tick: Sendable {
    /// The number of handler calls before this one (0 for the first).
    public let index: Int
    /// The deadline this call was due at: its grid point, plus this fire's jitter when the
    /// schedule has one (`TimerSchedule/every(_:firstAfter:count:jitter:)`).
    public let scheduled: MonotonicInstant
    /// When the handler was started, on the same clock: a reading of it taken after the timer
    /// came due and before the call (for the first call of a wake-up, the wake-up's reading; for
    /// the next, the end of the call before it while statistics time the calls, or a reading of
    /// its own).
    public let actual: MonotonicInstant
    /// Grid points this call was too late for, dropped under `.skip` and `.delay`
    /// (0 when on time, and always 0 under `.burst`, which delivers them).
    public let missed: Int
    /// The repeat interval in force when this tick fired (it reflects a `reschedule`); nil
    /// for one-shots. Without jitter, `scheduled + interval` is the next grid point.
    public let interval: Duration?
    /// The clock the timer's deadlines are on. `scheduled` and `actual` are on the monotonic
    /// clock whatever it is: the deadline converted as that clock stood at the fire.
    public let clock: DeadlineClock
    /// Whether the timer's clock stepped (`.wall`) or the machine was suspended
    /// (`.continuous`, `.wall`) since the timer was queued: a deadline the clock jumped past
    /// fires once, late, with this set. Always false for `.monotonic` timers.
    public let clockChanged: Bool
    /// The timer that fired: handlers use it to cancel or reschedule themselves.
    public let timer: TimerHandle

    /// How late the handler started: `actual - scheduled`.
    public var lateness: Duration { actual - scheduled }
}
