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
}

/// A settable clock for virtual-time backends. Read without a lock (an atomic load): the
/// scheduler reads it at least twice per fire.
@_spi(BackendImplementation) public final class VirtualClock: Sendable {
    private let nanoseconds: Atomic<UInt64>

    /// A clock reading `start`.
    public init(start: MonotonicInstant) { nanoseconds = Atomic(start.nanoseconds) }

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
