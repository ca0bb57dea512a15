import Foundation

/// When a timer fires. Build one with `.after`, `.at` or `.every`; values are checked
/// when the timer is scheduled, and bad ones are reported as `TimerError`s.
///
/// Deadlines are on the monotonic clock unless a schedule names another (`DeadlineClock`):
/// `.at(date:)` and `every(_:from:count:jitter:)` are on the wall clock, and `.after(_:on:)` and
/// `.every(_:on:firstAfter:count:jitter:)` take the clock to use.
public struct TimerSchedule: Sendable {
    enum Amount: Sendable {
        case duration(Duration)
        case seconds(Double)
    }

    enum Kind: Sendable {
        case after(Amount)
        case at(MonotonicInstant)
        case every(Amount, first: Amount?, count: Int?, jitter: Duration)
        /// `start` in ns on the schedule's clock.
        case everyFrom(Amount, start: UInt64, count: Int?, jitter: Duration)
        /// `deadline` in ns on the schedule's clock.
        case atOwn(UInt64)
        /// The dates of `calendarRule`.
        case calendar(count: Int?)
    }

    /// Plain data, so that reading and copying it (on every schedule and reset) calls no value
    /// witness: the one case with references, a calendar rule, keeps it in `calendarRule`.
    let kind: Kind
    /// The clock the deadlines are on.
    var clock: DeadlineClock = .monotonic
    /// The rule of a `.calendar` schedule; nil for every other kind.
    var calendarRule: CalendarRule? = nil

    /// Once, after `delay`.
    public static func after(_ delay: Duration) -> TimerSchedule { .init(kind: .after(.duration(delay))) }
    /// Once, after `seconds` (must be finite and not negative).
    public static func after(seconds: Double) -> TimerSchedule { .init(kind: .after(.seconds(seconds))) }
    /// Once, at a monotonic deadline (a deadline in the past fires at once).
    public static func at(_ deadline: MonotonicInstant) -> TimerSchedule { .init(kind: .at(deadline)) }
    /// Repeatedly on a drift-free grid: fire k is due at `start + firstAfter + k·interval`
    /// (`firstAfter` defaults to `interval`); `count` limits the number of handler calls.
    ///
    /// `jitter` spreads timers that would otherwise fire together (ten thousand clients
    /// polling every 30 s): each fire is due a random time between 0 and `jitter` after its
    /// grid point, drawn afresh for every fire, so the grid itself never drifts. It must be
    /// less than `interval`. `Tick/scheduled` is the jittered time; `ManualBackend/seedJitter(_:)`
    /// makes the draws repeatable.
    public static func every(
        _ interval: Duration, firstAfter: Duration? = nil, count: Int? = nil, jitter: Duration = .zero
    ) -> TimerSchedule {
        .init(kind: .every(.duration(interval), first: firstAfter.map { .duration($0) }, count: count, jitter: jitter))
    }
    /// Repeatedly on the grid `start + k·interval` (k ≥ 0); grid points already past are
    /// handled by the missed-tick policy. For aligning timers to an external clock, such
    /// as a display's vsync.
    /// `jitter` as in `every(_:firstAfter:count:jitter:)`.
    public static func every(
        _ interval: Duration, startingAt start: MonotonicInstant, count: Int? = nil, jitter: Duration = .zero
    ) -> TimerSchedule {
        .init(kind: .everyFrom(.duration(interval), start: start.nanoseconds, count: count, jitter: jitter))
    }
    /// Once, after `delay` on `clock`: on `.continuous`, time the machine spends suspended
    /// counts toward the delay; on `.wall`, the timer is due at the date `delay` from now,
    /// whatever steps the wall clock takes meanwhile.
    public static func after(_ delay: Duration, on clock: DeadlineClock) -> TimerSchedule {
        .init(kind: .after(.duration(delay)), clock: clock)
    }
    /// Once, at `date` on the wall clock (a date in the past fires at once). If the wall clock
    /// steps, the timer still fires at `date`: never before it.
    public static func at(date: Date) -> TimerSchedule {
        .init(kind: .atOwn(date.nanosecondsSince1970), clock: .wall)
    }
    /// `every(_:firstAfter:count:jitter:)` on `clock`.
    public static func every(
        _ interval: Duration, on clock: DeadlineClock, firstAfter: Duration? = nil, count: Int? = nil, jitter: Duration = .zero
    ) -> TimerSchedule {
        .init(kind: .every(.duration(interval), first: firstAfter.map { .duration($0) }, count: count, jitter: jitter), clock: clock)
    }
    /// Repeatedly on the wall-clock grid `start + k·interval` (k ≥ 0): every hour on the hour,
    /// say. Grid points already past, or jumped past by a step of the wall clock, are handled
    /// by the missed-tick policy. `jitter` as in `every(_:firstAfter:count:jitter:)`.
    public static func every(_ interval: Duration, from start: Date, count: Int? = nil, jitter: Duration = .zero) -> TimerSchedule {
        .init(kind: .everyFrom(.duration(interval), start: start.nanosecondsSince1970, count: count, jitter: jitter), clock: .wall)
    }

    /// Repeatedly at the dates `calendar` finds matching `components`, on the wall clock:
    /// `.calendar(matching: DateComponents(hour: 2, minute: 30), in: newYork)` fires every day
    /// at 02:30 New York time. `count` limits the number of handler calls.
    ///
    /// Daylight-saving changes: a time the change skips (02:30 on the day clocks spring
    /// forward) fires at the first moment after the gap (03:00); a time of day that occurs
    /// twice (01:30 on the day they fall back) fires at its first occurrence only when the
    /// components give the hour. An hourly schedule (minutes only) fires every hour that
    /// passes, the repeated one included. Dates that exist
    /// only in some years (February 29) fire in those years. A fire that comes late (the
    /// machine was suspended, the wall clock stepped past a date) fires once, and the next is
    /// the first matching date after it.
    ///
    /// Components no date matches (February 30) are refused with `TimerError.invalidOption`
    /// when the timer is scheduled.
    public static func calendar(matching components: DateComponents, in calendar: Calendar, count: Int? = nil) -> TimerSchedule {
        .init(kind: .calendar(count: count), clock: .wall, calendarRule: CalendarRule(components: components, calendar: calendar))
    }

    /// Every day at `hour`:`minute` in `timeZone`, on the wall clock: `calendar(matching:in:count:)`
    /// with a Gregorian calendar.
    public static func daily(at hour: Int, _ minute: Int = 0, in timeZone: TimeZone, count: Int? = nil) -> TimerSchedule {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        return .calendar(matching: DateComponents(hour: hour, minute: minute, second: 0), in: calendar, count: count)
    }

    /// `every(_:firstAfter:count:jitter:)` with intervals in seconds (and no jitter).
    public static func every(seconds interval: Double, firstAfter: Double? = nil, count: Int? = nil) -> TimerSchedule {
        .init(kind: .every(.seconds(interval), first: firstAfter.map { .seconds($0) }, count: count, jitter: .zero))
    }

    /// The checked, resolved form: first deadline, interval in ns (0 for one-shots), calls left
    /// (-1: unlimited), the most each fire may be jittered by in ns.
    struct Resolved {
        /// On `clock`.
        var firstDeadline: UInt64
        var intervalNanoseconds: UInt64
        var remaining: Int
        var jitterNanoseconds: UInt64 = 0
        var clock: DeadlineClock = .monotonic

        /// What a timeout (once, after a delay, on the monotonic clock) due at `deadline`
        /// resolves to.
        static func timeout(at deadline: UInt64) -> Resolved {
            Resolved(firstDeadline: deadline, intervalNanoseconds: 0, remaining: 1)
        }
    }

    /// Resolves the schedule at `now`, the reading of its own clock (`clock`).
    @inline(__always)
    func resolve(ownNow now: UInt64) throws(TimerError) -> Resolved {
        // A delay (a timeout, the commonest schedule) resolves here, without the general switch.
        if case let .after(.duration(delay)) = kind, !delay.isNegative {
            return Resolved(
                firstDeadline: now.saturatingAdd(UInt64(delay.saturatingNanoseconds)), intervalNanoseconds: 0, remaining: 1,
                clock: clock)
        }
        var resolved = try resolved(at: MonotonicInstant(nanoseconds: now))
        resolved.clock = clock
        return resolved
    }

    private func resolved(at now: MonotonicInstant) throws(TimerError) -> Resolved {
        switch kind {
        case let .after(amount):
            let delay = try Self.nanoseconds(amount, parameter: "delay")
            return Resolved(firstDeadline: now.nanoseconds.saturatingAdd(delay), intervalNanoseconds: 0, remaining: 1)
        case let .at(deadline):
            return Resolved(firstDeadline: deadline.nanoseconds, intervalNanoseconds: 0, remaining: 1)
        case let .atOwn(deadline):
            return Resolved(firstDeadline: deadline, intervalNanoseconds: 0, remaining: 1)
        case let .calendar(count):
            if let count, count < 1 { throw .invalidCount(count) }
            guard let rule = calendarRule, let first = rule.next(after: now.nanoseconds) else {
                throw .invalidOption(
                    name: "calendar components", value: "\(calendarRule.map { "\($0.components)" } ?? "none")",
                    allowed: "components that some later date matches")
            }
            return Resolved(firstDeadline: first, intervalNanoseconds: 0, remaining: count ?? -1)
        case let .every(amount, first, count, jitter):
            let interval = try Self.intervalNanoseconds(amount)
            let firstDelay =
                try first.map { amount throws(TimerError) in try Self.nanoseconds(amount, parameter: "firstAfter") } ?? interval
            if let count, count < 1 { throw .invalidCount(count) }
            return Resolved(
                firstDeadline: now.nanoseconds.saturatingAdd(firstDelay),
                intervalNanoseconds: interval, remaining: count ?? -1,
                jitterNanoseconds: try Self.jitterNanoseconds(jitter, interval: interval))
        case let .everyFrom(amount, start, count, jitter):
            let interval = try Self.intervalNanoseconds(amount)
            if let count, count < 1 { throw .invalidCount(count) }
            return Resolved(
                firstDeadline: start, intervalNanoseconds: interval, remaining: count ?? -1,
                jitterNanoseconds: try Self.jitterNanoseconds(jitter, interval: interval))
        }
    }

    /// A jitter in whole nanoseconds, refused if negative or not less than the interval (the
    /// fires of one timer must stay in order).
    static func jitterNanoseconds(_ jitter: Duration, interval: UInt64) throws(TimerError) -> UInt64 {
        let nanoseconds = try nanoseconds(.duration(jitter), parameter: "jitter")
        guard nanoseconds < interval else {
            throw .invalidOption(
                name: "jitter", value: "\(jitter)",
                allowed: "0 up to less than the interval (\(Duration.nanoseconds(Int64(clamping: interval))))")
        }
        return nanoseconds
    }

    /// A repeat interval in whole nanoseconds: zero and sub-nanosecond values are refused
    /// (each with its own error), since either would make the timer fire in a busy loop.
    static func intervalNanoseconds(_ amount: Amount) throws(TimerError) -> UInt64 {
        let interval = try nanoseconds(amount, parameter: "interval")
        guard interval == 0 else { return interval }
        switch amount {
        case let .duration(duration) where !duration.isNegative && !duration.isZero:
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
            if duration.isNegative { throw .negativeDuration(parameter: parameter, value: duration) }
            return UInt64(duration.saturatingNanoseconds)
        case let .seconds(seconds):
            return try checkedNanoseconds(seconds: seconds, parameter: parameter)
        }
    }
}
