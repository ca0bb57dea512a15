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
    @inline(__always) public var hasEnded: Bool { self == .cancelled || self == .finished }
}
