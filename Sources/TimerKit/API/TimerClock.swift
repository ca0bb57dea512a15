import Synchronization

/// A backend as a Swift `Clock`: code that takes `some Clock<Duration>` sleeps on the
/// backend's loop, with its latency and its tolerance, and visibly in its registry.
///
/// ```swift
/// func poll(every interval: Duration, on clock: some Clock<Duration>) async throws {
///     while true {
///         try await clock.sleep(for: interval)
///         await refresh()
///     }
/// }
///
/// try await poll(every: .seconds(5), on: EpollBackend().clock)
/// ```
///
/// Each sleep is a one-shot timer on the backend, registered under a generated name (or the
/// one given to `sleep(until:tolerance:name:)`) while it waits. It honours `tolerance` (which
/// `Task.sleep` ignores on Linux). Cancelling the task cancels the timer at once and throws
/// `CancellationError`, and so does cancelling the timer itself (by name, through the
/// registry). Sleeping on a backend that has shut down, or that shuts down during the sleep,
/// throws its `TimerError`. On a `ManualBackend` the clock is virtual: sleepers wake when a
/// test advances it.
public struct TimerClock: Clock {
    /// The backend the sleeps are timers of.
    public let backend: any TimerBackend

    /// A clock on `backend`.
    public init(_ backend: any TimerBackend) { self.backend = backend }

    /// The backend's current time (CLOCK_MONOTONIC; virtual for `ManualBackend`).
    public var now: MonotonicInstant { backend.now() }

    /// One nanosecond: every backend keeps deadlines in whole nanoseconds.
    public var minimumResolution: Duration { .nanoseconds(1) }

    /// Sleeps until `deadline` (at once if it has passed), waking up to `tolerance` late.
    public func sleep(until deadline: MonotonicInstant, tolerance: Duration? = nil) async throws {
        try await sleep(until: deadline, tolerance: tolerance, name: nil)
    }

    /// Sleeps until `deadline`, registered as `name` while it waits.
    /// - Throws: `CancellationError` when the task is cancelled (at once, the timer
    ///   cancelled); `TimerError` for a bad name or tolerance, or a backend that has shut down.
    public func sleep(until deadline: MonotonicInstant, tolerance: Duration? = nil, name: String?) async throws {
        try Task.checkCancellation()
        let fired = Fired()
        let timer = try backend.schedule(.at(deadline), name: name, tolerance: tolerance ?? .zero) { _ in fired.set() }
        let wake = OnceContinuation<Void>()
        // The sleep ends when its timer does, once the timer has left the registry: fired, or
        // ended without firing (cancelled by name, its backend shut down), which says why.
        let scheduler = timer.scheduler
        scheduler.whenEnded(timer.key) {
            wake.resolve(fired.isSet ? .success(()) : .failure(scheduler.shutDownError ?? CancellationError()))
        }
        try await wake.wait { timer.cancel() }
    }

    /// Sleeps for `duration`, registered as `name` while it waits.
    public func sleep(for duration: Duration, tolerance: Duration? = nil, name: String?) async throws {
        try await sleep(until: now.advanced(by: duration), tolerance: tolerance, name: name)
    }
}

extension TimerBackend {
    /// This backend as a `Clock`: see `TimerClock`.
    public var clock: TimerClock { TimerClock(self) }
}

/// Whether a sleep's timer fired: set by its handler, read when the timer has ended.
private final class Fired: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}
