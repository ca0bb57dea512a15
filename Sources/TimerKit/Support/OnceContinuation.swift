/// A wait that ends exactly once: with the first result given to `resolve`, or with a result of
/// its own when the waiting task is cancelled first. A result that comes before the wait has
/// begun is kept for it. The one shape behind a sleep, `TimerHandle/ended`, a timeout's limit
/// and each tick a `TimerTicks` iterator waits for.
final class OnceContinuation<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `result` and `continuation` are touched only while holding `mutex`.
    private let mutex = FutexLock()
    private var result: Result<Value, any Error>?
    private var continuation: UnsafeContinuation<Value, any Error>?

    init() {}

    /// Ends the wait with `result`, unless it has ended; a waiting task resumes, outside the
    /// lock. Returns whether this call ended it.
    @discardableResult
    func resolve(_ result: Result<Value, any Error>) -> Bool {
        mutex.lock()
        guard self.result == nil else {
            mutex.unlock()
            return false
        }
        self.result = result
        let continuation = self.continuation
        self.continuation = nil
        mutex.unlock()
        continuation?.resume(with: result)
        return true
    }

    /// Whether it has ended.
    var isResolved: Bool { mutex.withLock { result != nil } }

    /// Waits for the result. If the task is cancelled first, the wait ends with `cancelled`,
    /// and then `onCancel` runs (on the cancelling thread, outside the lock).
    func wait(
        cancelled: Result<Value, any Error> = .failure(CancellationError()), onCancel: @Sendable () -> Void = {}
    ) async throws -> Value {
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Value, any Error>) in
                mutex.lock()
                if let result {
                    mutex.unlock()
                    continuation.resume(with: result)
                    return
                }
                self.continuation = continuation
                mutex.unlock()
            }
        } onCancel: {
            if resolve(cancelled) { onCancel() }
        }
    }
}

extension OnceContinuation where Value == Void {
    /// Ends the wait normally.
    @discardableResult
    func resolve() -> Bool { resolve(.success(())) }
}
