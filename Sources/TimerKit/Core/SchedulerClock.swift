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

    /// The current time on `other`, as this clock reads it: the kernel's reading of that
    /// clock for `.monotonic`; for virtual and custom clocks, `monotonic` (their reading now)
    /// plus their offset, `fixed` for a custom clock.
    @inline(__always)
    func now(of other: DeadlineClock, monotonic: UInt64, fixed: ClockOffsets) -> UInt64 {
        switch self {
        case .monotonic: other == .monotonic ? monotonic : DeadlineClock.read(other)
        case let .virtual(clock): clock.offsets.own(monotonic, on: other)
        case .custom: fixed.own(monotonic, on: other)
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

/// How far the continuous and wall clocks are ahead of the monotonic one, in ns, signed: a
/// wall clock may read less than the time since boot (a board without a real-time clock before
/// NTP has set it, a clock stepped back to 1970). A timer's deadline stays on its own clock;
/// these only say when that is on the monotonic clock, through `monotonic(_:on:)` and
/// `own(_:on:)`, the one pair of conversions.
struct ClockOffsets: Equatable, Sendable {
    var continuous: Int64
    var wall: Int64

    static let zero = ClockOffsets(continuous: 0, wall: 0)

    /// The offsets of the continuous and wall clocks, read at `continuous` and `wall` while
    /// the monotonic clock read `reference`. The continuous clock is the monotonic one plus the
    /// time suspended, so it is never behind: a reading that puts it behind (by the reads' own
    /// time, when the reference reading came after it) counts as level.
    static func reading(continuous: UInt64, wall: UInt64, against reference: UInt64) -> ClockOffsets {
        ClockOffsets(continuous: max(0, difference(continuous, reference)), wall: difference(wall, reference))
    }

    /// `a - b`, clamped to what an `Int64` holds.
    static func difference(_ a: UInt64, _ b: UInt64) -> Int64 {
        a >= b ? Int64(clamping: a - b) : -Int64(clamping: b - a)
    }

    @inline(__always)
    subscript(clock: DeadlineClock) -> Int64 {
        switch clock {
        case .monotonic: 0
        case .continuous: continuous
        case .wall: wall
        }
    }

    /// `instant` on `clock`, on the monotonic clock: 0 when that is before boot, and "never"
    /// (`UInt64.max`, a date beyond what a deadline holds) stays never.
    @inline(__always)
    func monotonic(_ instant: UInt64, on clock: DeadlineClock) -> UInt64 {
        let offset = self[clock]
        if instant == .max || offset == 0 { return instant }
        return offset > 0 ? (instant > UInt64(offset) ? instant - UInt64(offset) : 0) : instant.saturatingAdd(offset.magnitude)
    }

    /// The monotonic instant `monotonic` on `clock` (saturating at both ends).
    @inline(__always)
    func own(_ monotonic: UInt64, on clock: DeadlineClock) -> UInt64 {
        let offset = self[clock]
        if offset == 0 { return monotonic }
        return offset > 0 ? monotonic.saturatingAdd(UInt64(offset)) : (monotonic > offset.magnitude ? monotonic - offset.magnitude : 0)
    }
}

/// What each clock read at one moment: a wake-up's view of time, so that every timer it
/// fires is judged due on its own clock against the same readings.
struct ClockReadings {
    let monotonic: UInt64
    let continuous: UInt64
    let wall: UInt64

    @inline(__always)
    subscript(clock: DeadlineClock) -> UInt64 {
        switch clock {
        case .monotonic: monotonic
        case .continuous: continuous
        case .wall: wall
        }
    }

    /// When on the monotonic clock `instant` on `clock` comes, for when to wake: by how far it
    /// lies ahead of that clock's reading, so that an instant not yet due there is never now or
    /// past here (a conversion through offsets could be, by the reads' spread, and wake the loop
    /// again and again). Every instant already due converts to now: to order due timers, use
    /// `dueOrder(_:on:)`.
    @inline(__always)
    func monotonic(_ instant: UInt64, on clock: DeadlineClock) -> UInt64 {
        if clock == .monotonic || instant == .max { return instant }
        let own = self[clock]
        return instant <= own ? monotonic : monotonic.saturatingAdd(instant - own)
    }

    /// Where `instant` on `clock` lies on the monotonic clock, for which due timer comes first:
    /// by how far it lies from that clock's reading, ahead or behind, with nothing clamped, so
    /// that of two overdue deadlines on different clocks the one due longer comes first. Wide
    /// and signed: a deadline may lie before the monotonic clock's start, or centuries ahead.
    @inline(__always)
    func dueOrder(_ instant: UInt64, on clock: DeadlineClock) -> Int128 {
        if clock == .monotonic { return Int128(instant) }
        return Int128(monotonic) + Int128(instant) - Int128(self[clock])
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

    /// Stored as bit patterns of signed offsets: a virtual wall clock may start before the
    /// monotonic one (`ManualBackend(wallClockStart:)` at 1970).
    var offsets: ClockOffsets {
        ClockOffsets(
            continuous: Int64(bitPattern: continuousOffset.load(ordering: .acquiring)),
            wall: Int64(bitPattern: wallOffset.load(ordering: .acquiring)))
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
