/// The state of a wait that ends once: opened, joined by the waiting task's continuation, and
/// settled by the first result. A result that comes between the opening and the joining is kept
/// for the continuation to take at once. A plain value, so that an object that waits again and
/// again (a `TimerTicks` stream, once per tick) keeps one and allocates nothing per wait; its
/// owner guards it with a lock of its own and resumes the continuation it hands back after
/// unlocking.
struct OnceWait<Value: Sendable, Failure: Error> {
    private enum State {
        case idle
        case opened
        case joined(UnsafeContinuation<Value, Failure>)
        case settled(Result<Value, Failure>)
    }
    private var state: State

    /// A wait opened already (`opened: true`), or none yet.
    init(opened: Bool) { state = opened ? .opened : .idle }

    /// Whether no wait is open: none began, or the last one ended.
    var isIdle: Bool {
        if case .idle = state { return true }
        return false
    }

    /// Opens a wait: only while idle.
    mutating func open() { state = .opened }

    /// The continuation joins the open wait. Returns the result to resume it with at once when
    /// the wait was settled before it joined (the wait is then over); nil when it waits.
    mutating func join(_ continuation: UnsafeContinuation<Value, Failure>) -> Result<Value, Failure>? {
        if case .settled(let result) = state {
            state = .idle
            return result
        }
        state = .joined(continuation)
        return nil
    }

    /// Ends the open wait with `result`; nil, changing nothing, when no wait is open or it has
    /// been settled. Otherwise the continuation to resume with `result` after unlocking, if one
    /// had joined (`.some(nil)` when none had: it takes the result as it joins).
    mutating func settle(_ result: Result<Value, Failure>) -> UnsafeContinuation<Value, Failure>?? {
        switch state {
        case .opened:
            state = .settled(result)
            return .some(nil)
        case .joined(let continuation):
            state = .idle
            return .some(continuation)
        case .idle, .settled:
            return nil
        }
    }
}

/// A wait that ends exactly once: with the first result given to `resolve`, or with a result of
/// its own when the waiting task is cancelled first. A result that comes before the wait has
/// begun is kept for it. The one shape behind a sleep, `TimerHandle/ended` and a timeout's
/// limit; a `TimerTicks` stream keeps its `OnceWait` in itself.
final class OnceContinuation<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `wait` is touched only while holding `mutex`.
    private let mutex = FutexLock()
    private var wait = OnceWait<Value, any Error>(opened: true)

    init() {}

    /// Ends the wait with `result`, unless it has ended; a waiting task resumes, outside the
    /// lock. Returns whether this call ended it.
    @discardableResult
    func resolve(_ result: Result<Value, any Error>) -> Bool {
        mutex.lock()
        let settled = wait.settle(result)
        mutex.unlock()
        guard let settled else { return false }
        settled?.resume(with: result)
        return true
    }

    /// Waits for the result. If the task is cancelled first, the wait ends with `cancelled`,
    /// and then `onCancel` runs (on the cancelling thread, outside the lock).
    func wait(
        cancelled: Result<Value, any Error> = .failure(CancellationError()), onCancel: @Sendable () -> Void = {}
    ) async throws -> Value {
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Value, any Error>) in
                mutex.lock()
                let early = wait.join(continuation)
                mutex.unlock()
                if let early { continuation.resume(with: early) }
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
