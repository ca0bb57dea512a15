import Glibc
import Synchronization

/// The clock a scheduler reads: CLOCK_MONOTONIC, or virtual time for tests.
@_spi(BackendImplementation) public enum SchedulerClock: Sendable {
    /// The kernel's CLOCK_MONOTONIC, which every real backend's wake-up also uses.
    case monotonic
    /// Time that moves only when a test moves it.
    case virtual(VirtualClock)
    /// Another clock's reading, for a backend on a loop that keeps time of its own (a test
    /// event loop's virtual time, say). It must never go back, and must be cheap: the
    /// scheduler reads it on every schedule and every fire.
    case custom(@Sendable () -> MonotonicInstant)

    /// The current time on this clock.
    @inline(__always)
    public func now() -> MonotonicInstant {
        switch self {
        case .monotonic: .now()
        case let .virtual(clock): clock.now
        case let .custom(read): read()
        }
    }

    /// How far the continuous and wall clocks are ahead of this one now; for a custom clock,
    /// `fixed` (the offsets when the scheduler began: its time is not the kernel's, so the two
    /// cannot be compared later).
    func offsets(fixed: ClockOffsets) -> ClockOffsets {
        preciseOffsets(fixed: fixed, within: .max) ?? fixed
    }

    /// `offsets(fixed:)` from a reading whose monotonic readings around it lay less than
    /// `within` ns apart, or nil when none of a few did (a thread that kept being preempted):
    /// such a reading cannot tell a step of the clock from the time the reads took.
    func preciseOffsets(fixed: ClockOffsets, within limit: UInt64) -> ClockOffsets? {
        switch self {
        case .monotonic:
            // The other two clocks are read between two monotonic readings and set against
            // their midpoint, so an offset errs by half the time the reads took. A thread
            // preempted in between (milliseconds on a busy machine) would look like a step of
            // the clock: such a reading is taken again, and the tightest of a few kept.
            var best: (spread: UInt64, offsets: ClockOffsets)?
            for _ in 0..<8 {
                let before = DeadlineClock.read(.monotonic)
                let wall = DeadlineClock.read(.wall)
                let continuous = DeadlineClock.read(.continuous)
                let after = DeadlineClock.read(.monotonic)
                let spread = after &- before
                let middle = before &+ spread / 2
                let offsets = ClockOffsets.reading(continuous: continuous, wall: wall, against: middle)
                if spread < 20_000 { return offsets }
                if spread < best?.spread ?? .max { best = (spread, offsets) }
            }
            guard let best, best.spread < limit else { return nil }
            return best.offsets
        case let .virtual(clock): return clock.offsets
        case .custom: return fixed
        }
    }
}

/// A settable clock for virtual-time backends. Read without a lock (an atomic load): the
/// scheduler reads it at least twice per fire. It also keeps a virtual wall clock and a
/// virtual continuous clock, as offsets from it that a suspend or a step moves.
@_spi(BackendImplementation) public final class VirtualClock: Sendable {
    private let nanoseconds: Atomic<UInt64>
    private let continuousOffset: Atomic<UInt64>
    private let wallOffset: Atomic<UInt64>

    /// A clock reading `start`, whose wall clock reads `wallStart` (ns since 1970) and whose
    /// continuous clock reads `start` too.
    public init(start: MonotonicInstant, wallStart: UInt64 = 0) {
        nanoseconds = Atomic(start.nanoseconds)
        continuousOffset = Atomic(0)
        wallOffset = Atomic(wallStart &- start.nanoseconds)
    }

    var offsets: ClockOffsets {
        ClockOffsets(continuous: continuousOffset.load(ordering: .acquiring), wall: wallOffset.load(ordering: .acquiring))
    }

    /// Steps the wall clock by `step` (either way).
    func stepWall(by step: Int64) {
        _ = wallOffset.wrappingAdd(UInt64(bitPattern: step), ordering: .acquiringAndReleasing)
    }

    /// A suspend of `nanoseconds`: the monotonic clock stands still while the continuous and
    /// wall clocks move on.
    func suspend(for nanoseconds: UInt64) {
        _ = continuousOffset.wrappingAdd(nanoseconds, ordering: .acquiringAndReleasing)
        _ = wallOffset.wrappingAdd(nanoseconds, ordering: .acquiringAndReleasing)
    }

    /// The current virtual time.
    public var now: MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds.load(ordering: .acquiring)) }

    /// Moves the clock to `instant` if that is later; it never goes back.
    public func move(to instant: MonotonicInstant) {
        // A compare-exchange loop: the library's atomic `max` compared these as signed
        // integers here (a move to `.distantFuture` did nothing), so it is not used.
        var current = nanoseconds.load(ordering: .relaxed)
        while current < instant.nanoseconds {
            let (exchanged, original) = nanoseconds.compareExchange(
                expected: current, desired: instant.nanoseconds, ordering: .acquiringAndReleasing)
            if exchanged { return }
            current = original
        }
    }
}
