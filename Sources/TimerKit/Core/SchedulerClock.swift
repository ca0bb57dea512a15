import Glibc

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

/// A settable clock for virtual-time backends.
@_spi(BackendImplementation) public final class VirtualClock: @unchecked Sendable {
    // @unchecked: `nanoseconds` is guarded by `mutex`.
    private let mutex = PThreadMutex()
    private var nanoseconds: UInt64

    /// A clock reading `start`.
    public init(start: MonotonicInstant) { nanoseconds = start.nanoseconds }

    /// The current virtual time.
    public var now: MonotonicInstant { mutex.withLock { MonotonicInstant(nanoseconds: nanoseconds) } }

    /// Moves the clock to `instant` if that is later; it never goes back.
    public func move(to instant: MonotonicInstant) {
        mutex.withLock { nanoseconds = max(nanoseconds, instant.nanoseconds) }
    }
}
