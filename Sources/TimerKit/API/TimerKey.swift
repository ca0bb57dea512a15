/// A timer scheduled with `TimerBackend/schedule(_:name:tolerance:missedTicks:calling:)`: a plain
/// value (no reference count) that names the timer to its backend. For code that keeps thousands
/// to millions of timers — an idle timeout per connection, a deadline per request — where a
/// `TimerHandle` per timer would cost an allocation each. In a release build, scheduling a timer
/// with no name, tolerance or count by key, moving it to a later deadline and cancelling it
/// allocate nothing (`make bench-check` counts the allocations of a timeout's schedule, reset
/// and cancel).
///
/// Cancel, reschedule, suspend and resume the timer through its backend:
/// `backend.cancel(key)`, `backend.reschedule(key, .after(.seconds(30)))`. Once the timer has
/// ended its key answers only that (`TimerBackend/isActive(_:)` is false); `reschedule`,
/// `suspend` and `resume` throw `TimerError/keyEnded(_:)` naming the key, and `cancel` does
/// nothing. Why it ended and how many calls it made come to its callback
/// (`TimerCallback/timerEnded(_:reason:fires:)`): its slot may hold another timer by the time
/// the key is used again, so the error names the key alone.
///
/// A key is good only with the backend that returned it. Another backend's timers are out of
/// its reach, even the one in the same slot with the same generation: given a key of another
/// backend, `TimerBackend/isActive(_:)` is false, `TimerBackend/cancel(_:)` does nothing, and
/// `TimerBackend/reschedule(_:_:)` (with a valid schedule), `TimerBackend/suspend(_:)` and
/// `TimerBackend/resume(_:)` throw `TimerError/invalidOption(name:value:allowed:)` with `name`
/// "key" and the key as `value`. None of them changes a timer of either backend.
public struct TimerKey: Hashable, Sendable, BitwiseCopyable, CustomStringConvertible {
    let slot: UInt32
    let generation: UInt32
    /// The backend's scheduler's serial number, so that another backend can refuse the key.
    let scheduler: UInt32

    public var description: String { "TimerKey(\(slot).\(generation) of backend #\(scheduler))" }
}

/// What a timer scheduled with a key calls: `timerFired(_:)` once per tick, on the backend's
/// loop, as a handler; `timerEnded(_:reason:fires:)` once, when it has ended.
///
/// A class, so that the backend keeps one reference to it per timer and allocates nothing for
/// it (in a release build, as `make bench-check` counts): one callback object may serve any
/// number of timers (it tells them apart by their keys), as a connection handler serves its
/// connection's idle timeout.
public protocol TimerCallback: AnyObject, Sendable {
    /// A tick of the timer `fire.key`. Runs on the backend's loop, serially with its other
    /// handlers, outside TimerKit's locks.
    func timerFired(_ fire: TimerFire)

    /// The timer `key` has ended — its last call made, cancelled, or its backend shut down — and
    /// no call of it runs any more. Runs outside TimerKit's locks, on the thread that ended it;
    /// the backend lets go of the callback after it. By default, nothing.
    func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int)
}

extension TimerCallback {
    public func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) {}
}

/// One call of a `TimerCallback`: which timer, which tick, and how late. `Tick`'s counterpart for
/// timers scheduled with a key.
public struct TimerFire: Sendable {
    /// The timer that fired.
    public let key: TimerKey
    /// The number of calls before this one (0 for the first).
    public let index: Int
    /// The deadline this call was due at (plus this fire's jitter, when the schedule has one).
    public let scheduled: MonotonicInstant
    /// When the call began, on the same clock (as `Tick/actual`).
    public let actual: MonotonicInstant
    /// Grid points this call was too late for (see `Tick/missed`).
    public let missed: Int
    /// The repeat interval in force; nil for one-shots.
    public let interval: Duration?
    /// The clock the timer's deadlines are on (`scheduled` and `actual` are on the monotonic
    /// clock whatever it is).
    public let clock: DeadlineClock
    /// Whether the timer's clock stepped since it was queued (see `Tick/clockChanged`).
    public let clockChanged: Bool

    /// How late the call began: `actual - scheduled`.
    public var lateness: Duration { actual - scheduled }
}

extension TimerBackend {
    /// Schedules a timer that calls `callback` (`TimerCallback/timerFired(_:)`) as `schedule`
    /// says, and returns its key, a plain value: in a release build, nothing is allocated for a
    /// timer with no name, tolerance or count (`make bench-check` counts it).
    /// Otherwise as `schedule(_:name:tolerance:missedTicks:handler:)`: the same registry (listed,
    /// found and cancelled by name), policies and errors.
    ///
    /// A schedule that throws for bad input, a cap or a shut-down backend adds no timer and
    /// calls nothing of `callback`. One that throws because the backend's driver refused to arm
    /// the new timer's wake-up has added it: that timer is ended first, and `callback` hears
    /// `TimerCallback/timerEnded(_:reason:fires:)` with `.cancelled` and 0 fires.
    ///
    /// ```swift
    /// final class Connection: TimerCallback {
    ///     func timerFired(_ fire: TimerFire) { close() }   // idle for 30 s
    /// }
    /// let idle = try backend.schedule(.after(.seconds(30)), calling: connection)
    /// // on each read:
    /// try backend.reschedule(idle, .after(.seconds(30)))
    /// ```
    @discardableResult
    public func schedule<Callback: TimerCallback>(
        _ schedule: TimerSchedule, name: String? = nil, tolerance: Duration = .zero, missedTicks: MissedTickPolicy = .skip,
        calling callback: Callback
    ) throws(TimerError) -> TimerKey {
        try self.schedule(schedule, name: name, tolerance: tolerance, missedTicks: missedTicks, calling: callback, of: Callback.self)
    }

    /// `schedule(_:name:tolerance:missedTicks:calling:)` past its one generic step (the
    /// callback's type): the rest is not generic over the callback, so that the scheduler's
    /// call is not made through a closure of a generic context.
    func schedule(
        _ schedule: TimerSchedule, name: String?, tolerance: Duration, missedTicks: MissedTickPolicy, calling callback: AnyObject,
        of type: any TimerCallback.Type
    ) throws(TimerError) -> TimerKey {
        try withScheduler { scheduler throws(TimerError) in
            try scheduler.schedule(schedule, name: name, tolerance: tolerance, policy: missedTicks, calling: callback, of: type)
        }
    }

    /// Cancels the timer `key` names. Idempotent: nothing happens if it has ended, nor for a
    /// key of another backend.
    public func cancel(_ key: TimerKey) { unretainedScheduler.withBorrowed { $0.cancel(key) } }

    /// Replaces the schedule of the timer `key` names (as `TimerHandle/reschedule(_:)`: a
    /// suspended timer stays suspended; a one-shot rescheduled while its call runs makes another
    /// call).
    /// - Throws: `TimerError/keyEnded(_:)` once it has ended; the schedule's errors;
    ///   `TimerError/invalidOption(name:value:allowed:)` for a key of another backend.
    public func reschedule(_ key: TimerKey, _ schedule: TimerSchedule) throws(TimerError) {
        try withScheduler { scheduler throws(TimerError) in try scheduler.reschedule(key, schedule) }
    }

    /// Suspends the timer `key` names (as `TimerHandle/suspend()`). A key of another backend
    /// throws `TimerError/invalidOption(name:value:allowed:)`.
    public func suspend(_ key: TimerKey) throws(TimerError) {
        try withScheduler { scheduler throws(TimerError) in try scheduler.suspend(key) }
    }

    /// Resumes the timer `key` names (as `TimerHandle/resume()`). A key of another backend
    /// throws `TimerError/invalidOption(name:value:allowed:)`.
    public func resume(_ key: TimerKey) throws(TimerError) {
        try withScheduler { scheduler throws(TimerError) in try scheduler.resume(key) }
    }

    /// Whether the timer `key` names is scheduled or suspended (false once it has ended, and
    /// for a key of another backend).
    public func isActive(_ key: TimerKey) -> Bool { unretainedScheduler.withBorrowed { $0.isActive(key) } }
}
