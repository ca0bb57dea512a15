/// What happens to the ticks of a repeating timer that came due while its handler (or the
/// machine) was busy. Modelled on Tokio's `MissedTickBehavior`.
public enum MissedTickPolicy: UInt8, Sendable, CaseIterable {
    /// Fire once now, then continue at the next grid point after now (NSTimer, CADisplayLink).
    case skip
    /// Fire every missed tick, back to back, until the timer is on time again.
    case burst
    /// Fixed delay after a late tick: when a tick fires late by at least `delayThreshold`
    /// (5 ms, or the interval if that is shorter; Tokio uses the same 5 ms), the grid
    /// restarts from that fire, so the next tick comes a full interval later and every later
    /// tick shifts by the delay. Smaller lateness (ordinary wake-up jitter) keeps the grid, so
    /// a timer that is merely a little late does not drift.
    case delay

    /// The lateness from which `.delay` restarts the grid: 5 ms, or the interval if shorter.
    /// (At an interval or more late a grid point has been missed, so it always restarts.)
    public static func delayThreshold(interval: Duration) -> Duration { min(interval, .milliseconds(5)) }
}

/// A timer's place in its life. `scheduled ⇄ suspended → cancelled`; one-shots and
/// counted repeats end `finished`.
public enum TimerState: UInt8, Sendable, CustomStringConvertible {
    /// Armed: it fires when due.
    case scheduled
    /// Kept but silent until resumed.
    case suspended
    /// Ended by `cancel()`, its target's death or a backend shutdown.
    case cancelled
    /// Fired its last tick.
    case finished

    public var description: String {
        switch self {
        case .scheduled: "scheduled"
        case .suspended: "suspended"
        case .cancelled: "cancelled"
        case .finished: "finished"
        }
    }

    /// Whether the timer has ended (cancelled or finished).
    public var hasEnded: Bool { self == .cancelled || self == .finished }
}

/// One handler call: which tick it is and how late it runs.
public struct Tick: Sendable {
    /// The number of handler calls before this one (0 for the first).
    public let index: Int
    /// The grid deadline this call was due at.
    public let scheduled: MonotonicInstant
    /// When the handler was started, on the same clock.
    public let actual: MonotonicInstant
    /// Grid points this call was too late for, dropped under `.skip` and `.delay`
    /// (0 when on time, and always 0 under `.burst`, which delivers them).
    public let missed: Int
    /// The repeat interval in force when this tick fired (it reflects a `reschedule`); nil
    /// for one-shots. `scheduled + interval` is the next grid point.
    public let interval: Duration?
    /// The timer that fired: handlers use it to cancel or reschedule themselves.
    public let timer: TimerHandle

    /// How late the handler started: `actual - scheduled`.
    public var lateness: Duration { actual - scheduled }
}

/// When a timer fires. Build one with `.after`, `.at` or `.every`; values are checked
/// when the timer is scheduled, and bad ones are reported as `TimerError`s.
public struct TimerSchedule: Sendable {
    enum Amount: Sendable {
        case duration(Duration)
        case seconds(Double)
    }

    enum Kind: Sendable {
        case after(Amount)
        case at(MonotonicInstant)
        case every(Amount, first: Amount?, count: Int?)
        case everyFrom(Amount, start: MonotonicInstant, count: Int?)
    }

    let kind: Kind

    /// Once, after `delay`.
    public static func after(_ delay: Duration) -> TimerSchedule { .init(kind: .after(.duration(delay))) }
    /// Once, after `seconds` (must be finite and not negative).
    public static func after(seconds: Double) -> TimerSchedule { .init(kind: .after(.seconds(seconds))) }
    /// Once, at a monotonic deadline (a deadline in the past fires at once).
    public static func at(_ deadline: MonotonicInstant) -> TimerSchedule { .init(kind: .at(deadline)) }
    /// Repeatedly on a drift-free grid: fire k is due at `start + firstAfter + k·interval`
    /// (`firstAfter` defaults to `interval`); `count` limits the number of handler calls.
    public static func every(_ interval: Duration, firstAfter: Duration? = nil, count: Int? = nil) -> TimerSchedule {
        .init(kind: .every(.duration(interval), first: firstAfter.map { .duration($0) }, count: count))
    }
    /// Repeatedly on the grid `start + k·interval` (k ≥ 0); grid points already past are
    /// handled by the missed-tick policy. For aligning timers to an external clock, such
    /// as a display's vsync.
    public static func every(_ interval: Duration, startingAt start: MonotonicInstant, count: Int? = nil) -> TimerSchedule {
        .init(kind: .everyFrom(.duration(interval), start: start, count: count))
    }
    /// `every(_:firstAfter:count:)` with intervals in seconds.
    public static func every(seconds interval: Double, firstAfter: Double? = nil, count: Int? = nil) -> TimerSchedule {
        .init(kind: .every(.seconds(interval), first: firstAfter.map { .seconds($0) }, count: count))
    }

    /// The checked, resolved form: first deadline, interval in ns (0 for one-shots), calls left (-1: unlimited).
    struct Resolved {
        var firstDeadline: UInt64
        var intervalNanoseconds: UInt64
        var remaining: Int
    }

    func resolve(now: MonotonicInstant) throws(TimerError) -> Resolved {
        switch kind {
        case let .after(amount):
            let delay = try Self.nanoseconds(amount, parameter: "delay")
            return Resolved(firstDeadline: now.nanoseconds.saturatingAdd(delay), intervalNanoseconds: 0, remaining: 1)
        case let .at(deadline):
            return Resolved(firstDeadline: deadline.nanoseconds, intervalNanoseconds: 0, remaining: 1)
        case let .every(amount, first, count):
            let interval = try Self.intervalNanoseconds(amount)
            let firstDelay = try first.map { amount throws(TimerError) in try Self.nanoseconds(amount, parameter: "firstAfter") } ?? interval
            if let count, count < 1 { throw .invalidCount(count) }
            return Resolved(firstDeadline: now.nanoseconds.saturatingAdd(firstDelay),
                            intervalNanoseconds: interval, remaining: count ?? -1)
        case let .everyFrom(amount, start, count):
            let interval = try Self.intervalNanoseconds(amount)
            if let count, count < 1 { throw .invalidCount(count) }
            return Resolved(firstDeadline: start.nanoseconds, intervalNanoseconds: interval, remaining: count ?? -1)
        }
    }

    /// A repeat interval in whole nanoseconds: zero and sub-nanosecond values are refused
    /// (each with its own error), since either would make the timer fire in a busy loop.
    static func intervalNanoseconds(_ amount: Amount) throws(TimerError) -> UInt64 {
        let interval = try nanoseconds(amount, parameter: "interval")
        guard interval == 0 else { return interval }
        switch amount {
        case let .duration(duration) where duration > .zero:
            throw .intervalBelowOneNanosecond(parameter: "interval", seconds: Double(duration.components.attoseconds) / 1e18)
        case let .seconds(seconds) where seconds > 0:
            throw .intervalBelowOneNanosecond(parameter: "interval", seconds: seconds)
        default:
            throw .zeroInterval(parameter: "interval")
        }
    }

    static func nanoseconds(_ amount: Amount, parameter: String) throws(TimerError) -> UInt64 {
        switch amount {
        case let .duration(duration):
            if duration < .zero { throw .negativeDuration(parameter: parameter, value: duration) }
            return UInt64(duration.saturatingNanoseconds)
        case let .seconds(seconds):
            return try checkedNanoseconds(seconds: seconds, parameter: parameter)
        }
    }
}

/// Converts seconds to nanoseconds, rejecting NaN, infinity and negatives; saturates huge values.
package func checkedNanoseconds(seconds: Double, parameter: String) throws(TimerError) -> UInt64 {
    guard seconds.isFinite else { throw .nonFiniteSeconds(parameter: parameter, value: seconds) }
    if seconds < 0 { throw .negativeDuration(parameter: parameter, value: .nanoseconds(Int64(clamping: Int(max(seconds * 1e9, -9e18))))) }
    let ns = seconds * 1e9
    return ns >= 1.8e19 ? .max : UInt64(ns)
}

/// Hooks run around every handler call: for a single timer or a whole registry.
/// Use them to record lateness, trace, or count, without touching the handlers (the
/// seeds' AOP proxy).
public struct TimerObserver: Sendable {
    /// Runs on the backend's loop just before the handler.
    public var willFire: (@Sendable (Tick) -> Void)?
    /// Runs on the backend's loop just after the handler, with how long it ran.
    public var didFire: (@Sendable (Tick, Duration) -> Void)?

    /// Creates an observer from its two optional hooks.
    public init(willFire: (@Sendable (Tick) -> Void)? = nil, didFire: (@Sendable (Tick, Duration) -> Void)? = nil) {
        self.willFire = willFire
        self.didFire = didFire
    }
}

/// A point-in-time view of one registered timer.
public struct TimerSnapshot: Sendable, CustomStringConvertible {
    /// The registered name.
    public let name: String
    /// The backend's name ("dispatch", "epoll", ...).
    public let backend: String
    /// The timer's state when the snapshot was taken.
    public let state: TimerState
    /// Handler calls so far.
    public let fires: Int
    /// When it will next fire; nil when suspended or ended.
    public let nextDeadline: MonotonicInstant?
    /// The repeat interval; nil for one-shots.
    public let interval: Duration?

    public var description: String {
        "\(name) [\(backend)] \(state) fires=\(fires) next=\(nextDeadline.map(\.description) ?? "-")"
    }
}
