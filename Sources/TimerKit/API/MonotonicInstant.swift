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
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return MonotonicInstant(nanoseconds: UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec))
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
