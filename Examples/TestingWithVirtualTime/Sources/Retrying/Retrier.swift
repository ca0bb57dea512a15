import TimerKit

/// Runs an operation until it succeeds, up to `attempts` times: each attempt gets `timeout` (on
/// the backend's clock) and is cancelled past it, and a failed attempt waits `firstDelay`, then
/// twice that, and so on, before the next. It takes any `TimerBackend`: the app passes a real one,
/// its tests a `ManualBackend`, whose clock moves only when the test moves it.
public struct Retrier<Backend: TimerBackend>: Sendable {
    /// The last attempt's failure, once every attempt has failed.
    public struct GaveUp: Error {
        /// How many attempts were made.
        public let attempts: Int
        /// What the last one threw (a `TimeoutError` if it ran out of time).
        public let lastError: any Error
    }

    public let backend: Backend
    public let attempts: Int
    public let firstDelay: Duration
    public let timeout: Duration

    /// - Precondition: `attempts` is at least 1; `firstDelay` and `timeout` are not negative.
    public init(backend: Backend, attempts: Int, firstDelay: Duration, timeout: Duration) {
        precondition(attempts >= 1 && firstDelay >= .zero && timeout >= .zero, "attempts >= 1, delays >= 0")
        self.backend = backend
        self.attempts = attempts
        self.firstDelay = firstDelay
        self.timeout = timeout
    }

    /// The operation's value from the first attempt that returns one in time.
    /// - Throws: `GaveUp` once every attempt has failed; `CancellationError` if the calling task
    ///   is cancelled while it waits between attempts.
    public func run<Value: Sendable>(_ operation: @escaping @Sendable () async throws -> Value) async throws -> Value {
        var delay = firstDelay
        for attempt in 1...attempts {
            do {
                return try await withTimeout(timeout, on: backend, name: nil, operation: operation)
            } catch {
                if Task.isCancelled { throw CancellationError() }
                guard attempt < attempts else { throw GaveUp(attempts: attempt, lastError: error) }
            }
            // A sleep on the backend's clock: virtual time on a ManualBackend.
            try await backend.clock.sleep(for: delay)
            delay *= 2
        }
        preconditionFailure("the loop returns or throws on its last attempt")
    }
}
