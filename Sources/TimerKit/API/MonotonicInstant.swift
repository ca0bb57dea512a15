import Dispatch
import Glibc

/// A point on the CLOCK_MONOTONIC timeline, in nanoseconds.
///
/// Every backend reads this clock (timerfd, libevent with a monotonic base, Dispatch's
/// uptime clock and the run loop's timers all agree on it), so deadlines compare across
/// backends. The Manual backend uses the same type for its virtual time.
public struct MonotonicInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    /// Nanoseconds since an unspecified point (the kernel's boot, for CLOCK_MONOTONIC).
    public var nanoseconds: UInt64

    /// Wraps a raw nanosecond count.
    public init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    /// The far end of the timeline: a deadline that never comes.
    public static let distantFuture = MonotonicInstant(nanoseconds: UInt64.max)

    /// The last instant a timer can come due: 2^62 ns after the clock's origin (about 146
    /// years of uptime). Timers due at or after it stay scheduled but never fire, and no
    /// native timer is armed for them, which keeps "park it forever" deadlines
    /// (`.seconds(Int64.max)`, `.distantFuture`) away from native timers that read them as
    /// already past.
    public static let horizon = MonotonicInstant(nanoseconds: 1 << 62)

    /// The current CLOCK_MONOTONIC time.
    @inline(__always)
    public static func now() -> MonotonicInstant {
        MonotonicInstant(nanoseconds: readClock(CLOCK_MONOTONIC))
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    /// `self + duration`, saturating at both ends of the timeline instead of trapping.
    public static func + (lhs: Self, rhs: Duration) -> Self {
        let delta = rhs.saturatingNanoseconds
        if delta >= 0 { return Self(nanoseconds: lhs.nanoseconds.saturatingAdd(UInt64(delta))) }
        let back = UInt64(delta.magnitude)
        return Self(nanoseconds: lhs.nanoseconds >= back ? lhs.nanoseconds - back : 0)
    }

    /// The signed distance from `rhs` to `lhs`.
    public static func - (lhs: Self, rhs: Self) -> Duration {
        if lhs.nanoseconds >= rhs.nanoseconds {
            return .nanoseconds(Int64(clamping: lhs.nanoseconds - rhs.nanoseconds))
        }
        return .nanoseconds(-Int64(clamping: rhs.nanoseconds - lhs.nanoseconds))
    }

    public var description: String {
        self == .distantFuture ? "distantFuture" : "\(Double(nanoseconds) / 1e9)s"
    }
}

extension MonotonicInstant: InstantProtocol {
    /// `self + duration`, saturating at both ends of the timeline.
    public func advanced(by duration: Duration) -> MonotonicInstant { self + duration }

    /// The signed distance from `self` to `other`.
    public func duration(to other: MonotonicInstant) -> Duration { other - self }
}

// Conversions to the standard clocks. On Linux, `SuspendingClock` reads CLOCK_MONOTONIC, the
// clock TimerKit uses, so its instants convert exactly; `ContinuousClock` reads CLOCK_BOOTTIME,
// which runs ahead of CLOCK_MONOTONIC by the time the machine has spent suspended. Both
// instant types are `@frozen` structs holding one `Duration` since the clock's origin, so
// their value can be read and made without arithmetic against `now`.
extension MonotonicInstant {
    /// The same instant as `instant`: exact (both clocks are CLOCK_MONOTONIC on Linux).
    public init(_ instant: SuspendingClock.Instant) {
        self.init(sinceOrigin: unsafeBitCast(instant, to: Duration.self))
    }

    /// This instant on `SuspendingClock`: exact.
    public var suspendingClockInstant: SuspendingClock.Instant {
        unsafeBitCast(sinceOrigin, to: SuspendingClock.Instant.self)
    }

    /// The instant `instant` stands for on this clock, through the current offset between
    /// CLOCK_BOOTTIME and CLOCK_MONOTONIC: exact as long as the machine is not suspended
    /// between the two instants (a server's usual case: the offset is then constant).
    public init(_ instant: ContinuousClock.Instant) {
        self.init(sinceOrigin: unsafeBitCast(instant, to: Duration.self) - Self.bootTimeOffset())
    }

    /// This instant on `ContinuousClock`, through the current offset between the clocks.
    public var continuousClockInstant: ContinuousClock.Instant {
        unsafeBitCast(sinceOrigin + Self.bootTimeOffset(), to: ContinuousClock.Instant.self)
    }

    /// The same instant as `time`: exact (Dispatch's uptime clock is CLOCK_MONOTONIC on Linux).
    public init(_ time: DispatchTime) {
        self.init(nanoseconds: time.uptimeNanoseconds)
    }

    /// This instant as a `DispatchTime`: exact.
    public var dispatchTime: DispatchTime {
        self == .distantFuture ? .distantFuture : DispatchTime(uptimeNanoseconds: nanoseconds)
    }

    private init(sinceOrigin: Duration) {
        let nanoseconds = sinceOrigin.saturatingNanoseconds
        self.init(nanoseconds: nanoseconds > 0 ? UInt64(nanoseconds) : 0)
    }

    private var sinceOrigin: Duration { .nanoseconds(Int64(clamping: nanoseconds)) }

    /// CLOCK_BOOTTIME − CLOCK_MONOTONIC now: the time the machine has spent suspended, as a
    /// scheduler reads it (`SchedulerClock.offsets(fixed:)`).
    private static func bootTimeOffset() -> Duration {
        .nanoseconds(SchedulerClock.monotonic.offsets(fixed: .zero).continuous)
    }
}
