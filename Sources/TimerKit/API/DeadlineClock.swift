import Glibc
import Synchronization

/// The clock a timer's deadlines are on.
///
/// | clock | counts | a suspend of the machine | a step of the wall clock |
/// |---|---|---|---|
/// | `monotonic` | time since boot, stopped while suspended (`CLOCK_MONOTONIC`) | does not count: deadlines move later by it | no effect |
/// | `continuous` | time since boot, suspended time included (`CLOCK_BOOTTIME`, as Swift's `ContinuousClock`) | counts: what came due fires once on resume | no effect |
/// | `wall` | the calendar time of `Date` (`CLOCK_REALTIME`) | counts, as for `continuous` | deadlines keep their date: one the step jumped past fires once, late; none fires early |
public enum DeadlineClock: String, Sendable, CaseIterable, Hashable, CustomStringConvertible {
    /// Time since boot that stops while the machine is suspended; never steps. The default.
    case monotonic
    /// Time since boot that counts time spent suspended; never steps.
    case continuous
    /// The wall clock: dates. An administrator or NTP may step it.
    case wall

    public var description: String { rawValue }

    /// The kernel's reading of this clock, in nanoseconds since its origin.
    package static func read(_ clock: DeadlineClock) -> UInt64 {
        switch clock {
        case .monotonic: readClock(CLOCK_MONOTONIC)
        case .continuous: readClock(CLOCK_BOOTTIME)
        case .wall: readClock(CLOCK_REALTIME) &+ UInt64(bitPattern: wallSkewForTests.load(ordering: .relaxed))
        }
    }

    /// Added to every reading of the wall clock: a test's stand-in for a step of the host's
    /// clock, which a test must never make. Set only in a child process of a test.
    package static let wallSkewForTests = Atomic<Int64>(0)
}
