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
        let sleeper = Sleeper()
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                guard sleeper.wait(continuation) else { return }
                do throws(TimerError) {
                    let timer = try backend.schedule(.at(deadline), name: name, tolerance: tolerance ?? .zero) { _ in
                        sleeper.wake()
                    }
                    sleeper.sleeping(on: timer)
                    // A timer that ends without firing (cancelled by name, its backend shut
                    // down) must not leave the sleeper waiting forever.
                    timer.scheduler.whenEnded(timer) { [weak sleeper] in sleeper?.timerEnded(timer.scheduler) }
                } catch {
                    sleeper.fail(error)
                }
            }
        } onCancel: {
            sleeper.cancel()
        }
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

/// One sleep: its continuation, resumed exactly once — by the timer, by cancellation or by
/// a failure to schedule — and its timer, cancelled if the task is cancelled first.
private final class Sleeper: @unchecked Sendable {
    // @unchecked: every field is touched only while holding `mutex`.
    private let mutex = PThreadMutex()
    private var continuation: UnsafeContinuation<Void, any Error>?
    private var timer: TimerHandle?
    private var isCancelled = false

    /// Stores the continuation; false (and resumed) if the task was cancelled already.
    func wait(_ continuation: UnsafeContinuation<Void, any Error>) -> Bool {
        mutex.lock()
        guard !isCancelled else {
            mutex.unlock()
            continuation.resume(throwing: CancellationError())
            return false
        }
        self.continuation = continuation
        mutex.unlock()
        return true
    }

    func sleeping(on timer: TimerHandle) {
        mutex.lock()
        let cancelled = isCancelled
        if !cancelled { self.timer = timer }
        mutex.unlock()
        if cancelled { timer.cancel() }
    }

    /// The timer fired.
    func wake() { finish().continuation?.resume() }

    func fail(_ error: TimerError) { finish().continuation?.resume(throwing: error) }

    /// The timer ended; if it did not fire, the sleep ends with why.
    func timerEnded(_ scheduler: TimerScheduler) {
        guard let continuation = finish().continuation else { return }
        continuation.resume(throwing: scheduler.shutDownError ?? CancellationError())
    }

    func cancel() {
        let (continuation, timer) = finish(cancelling: true)
        timer?.cancel()
        continuation?.resume(throwing: CancellationError())
    }

    /// Takes what is pending out, under the lock; the caller resumes and releases it after.
    private func finish(cancelling: Bool = false) -> (continuation: UnsafeContinuation<Void, any Error>?, timer: TimerHandle?) {
        mutex.lock()
        defer { mutex.unlock() }
        if cancelling { isCancelled = true }
        defer { (continuation, timer) = (nil, nil) }
        return (continuation, timer)
    }
}
