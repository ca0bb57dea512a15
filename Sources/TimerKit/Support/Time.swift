import Foundation
import Glibc

// Time as TimerKit keeps it: nanoseconds in a UInt64, since a clock's origin (the kernel's
// clocks) or since 1970 (the wall clock, and dates). The conversions from and to the kernel's,
// Foundation's and the standard library's forms are here; the offsets between the clocks are
// `ClockOffsets` (SchedulerClock.swift).

/// What the kernel's `clock` reads now, in nanoseconds since its origin.
@inline(__always)
package func readClock(_ clock: clockid_t) -> UInt64 {
    var reading = timespec()
    clock_gettime(clock, &reading)
    return reading.nanoseconds
}

/// `nanoseconds` in seconds and nanoseconds, as the kernel takes a time: an absolute time for a
/// timer, or a wait.
package func kernelTime(nanoseconds: UInt64) -> timespec {
    timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
}

/// The wait from `now` until `deadline`, none once it has passed: what `epoll_pwait2` takes.
package func kernelWait(until deadline: UInt64, now: UInt64) -> timespec {
    kernelTime(nanoseconds: deadline > now ? deadline - now : 0)
}

extension timespec {
    /// In nanoseconds; a reading before the origin (which no clock TimerKit reads gives) is 0.
    @inline(__always)
    var nanoseconds: UInt64 { UInt64(max(0, tv_sec)) &* 1_000_000_000 &+ UInt64(max(0, tv_nsec)) }
}

extension Date {
    /// The date `nanoseconds` after 1970 began.
    init(nanosecondsSince1970 nanoseconds: UInt64) {
        self.init(timeIntervalSince1970: Double(nanoseconds) / 1e9)
    }

    /// Nanoseconds since 1970; 0 for dates before it, saturating far after.
    var nanosecondsSince1970: UInt64 {
        let nanoseconds = timeIntervalSince1970 * 1e9
        guard nanoseconds > 0 else { return 0 }
        return nanoseconds >= 1.8e19 ? UInt64.max : UInt64(nanoseconds)
    }
}

extension UInt64 {
    @inline(__always)
    package func saturatingAdd(_ other: UInt64) -> UInt64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? .max : sum
    }

    @inline(__always)
    package func saturatingMultiply(_ other: UInt64) -> UInt64 {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        return overflow ? .max : product
    }
}

extension Duration {
    /// Whole nanoseconds (rounded toward zero), clamped to `Int64` (about ±292 years) instead of
    /// trapping. One 128-by-64-bit division instruction: `attoseconds / 1_000_000_000` calls the
    /// runtime's Int128 division (about 80 instructions, on every schedule), and `components`
    /// costs more.
    @inline(__always)
    package var saturatingNanoseconds: Int64 {
        let attoseconds = self.attoseconds
        let magnitude = attoseconds.magnitude
        let high = UInt64(truncatingIfNeeded: magnitude >> 64)
        guard high < 1_000_000_000 else { return attoseconds < 0 ? .min : .max }
        let nanoseconds = UInt64(1_000_000_000).dividingFullWidth((high, UInt64(truncatingIfNeeded: magnitude))).quotient
        return attoseconds < 0 ? Int64(clamping: -Int128(nanoseconds)) : Int64(clamping: nanoseconds)
    }

    /// Whether it is below zero, without a call into the runtime (as `<` makes).
    @inline(__always)
    package var isNegative: Bool { attoseconds < 0 }

    /// Whether it is zero, without a call into the runtime (as `== .zero` makes).
    @inline(__always)
    package var isZero: Bool { attoseconds == 0 }

    /// The duration in (fractional) microseconds, for reports.
    package var microseconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) * 1e6 + Double(attoseconds) / 1e12
    }
}

/// Converts seconds to nanoseconds, rejecting NaN, infinity and negatives; saturates huge values.
package func checkedNanoseconds(seconds: Double, parameter: String) throws(TimerError) -> UInt64 {
    guard seconds.isFinite else { throw .nonFiniteSeconds(parameter: parameter, value: seconds) }
    if seconds < 0 { throw .negativeDuration(parameter: parameter, value: .nanoseconds(Int64(clamping: Int(max(seconds * 1e9, -9e18))))) }
    let ns = seconds * 1e9
    return ns >= 1.8e19 ? .max : UInt64(ns)
}
