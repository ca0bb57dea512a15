/// What `withTimeout(_:on:name:tolerance:operation:)` and
/// `withDeadline(_:on:name:tolerance:operation:)` throw when time runs out: the operation was
/// cancelled and has returned.
public struct TimeoutError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The name given to the timeout's timer; nil if it had a generated one.
    public let timerName: String?
    /// The backend whose clock the limit was measured on.
    public let backend: String
    /// The time the operation was given: the timeout, or from the call to its deadline.
    public let limit: Duration
    /// When time ran out, on the backend's clock.
    public let deadline: MonotonicInstant

    public var description: String {
        let timer = timerName.map { "timer '\($0)'" } ?? "the timeout"
        return "\(timer) on \(backend) ran out: the operation did not finish within \(limit)"
    }
}

/// Runs `operation`, and cancels it if it has not finished within `limit` on `backend`'s
/// clock: then throws `TimeoutError` once it has returned.
///
/// ```swift
/// let reply = try await withTimeout(.seconds(2), on: backend, name: "fetch") {
///     try await client.fetch(request)
/// }
/// ```
///
/// The limit is a one-shot timer on `backend`, registered as `name` while the operation runs
/// (a generated name if nil) and gone from the registry when this returns, whichever way it
/// returns. Cancelling the timer by name ends the wait for it: the operation is then left
/// to finish without a limit. On a `ManualBackend` the limit is virtual time, so a test
/// times an operation out by advancing the clock.
///
/// The operation runs as a child task; when time runs out it is cancelled, and this returns
/// once it has returned, so an operation that ignores cancellation holds it up (as with any
/// structured concurrency). Its own error is rethrown; cancelling the calling task cancels
/// both.
///
/// - Throws: `TimeoutError` when the limit passes first; the operation's error; `TimerError`
///   for a negative `limit`, a bad `name` or `tolerance`, or a backend that has shut down.
public func withTimeout<Value: Sendable>(
    _ limit: Duration, on backend: some TimerBackend, name: String? = nil, tolerance: Duration = .zero,
    operation: @escaping @Sendable () async throws -> Value
) async throws -> Value {
    if limit < .zero { throw TimerError.negativeDuration(parameter: "limit", value: limit) }
    let deadline = backend.now().advanced(by: limit)
    return try await race(operation, until: deadline, limit: limit, on: backend, name: name, tolerance: tolerance)
}

/// Runs `operation`, and cancels it if it has not finished by `deadline` on `backend`'s
/// clock: then throws `TimeoutError` once it has returned. A deadline already past cancels
/// the operation as soon as the backend's loop turns; cancellation is cooperative, so an
/// operation that finishes without suspending still returns its value. Otherwise as
/// `withTimeout(_:on:name:tolerance:operation:)`.
public func withDeadline<Value: Sendable>(
    _ deadline: MonotonicInstant, on backend: some TimerBackend, name: String? = nil, tolerance: Duration = .zero,
    operation: @escaping @Sendable () async throws -> Value
) async throws -> Value {
    let start = backend.now()
    let limit = deadline > start ? start.duration(to: deadline) : .zero
    return try await race(operation, until: deadline, limit: limit, on: backend, name: name, tolerance: tolerance)
}

private enum Outcome<Value: Sendable>: Sendable {
    case finished(Value)
    case timedOut
    /// The timeout's timer ended without firing (cancelled by name): no limit any more.
    case limitLifted
}

private func race<Value: Sendable>(
    _ operation: @escaping @Sendable () async throws -> Value, until deadline: MonotonicInstant, limit: Duration,
    on backend: some TimerBackend, name: String?, tolerance: Duration
) async throws -> Value {
    if tolerance < .zero { throw TimerError.negativeDuration(parameter: "tolerance", value: tolerance) }
    if let name { try TimerRegistry.validate(name: name) }
    let limitSignal = OnceContinuation<LimitOutcome>()
    // Scheduled before the operation starts: a backend that has shut down, or a name another
    // timer holds, is what this call throws, whether or not the operation would ever suspend.
    let timer = try backend.schedule(.at(deadline), name: name, tolerance: tolerance) { _ in limitSignal.resolve(.success(.reached)) }
    let scheduler = timer.scheduler
    scheduler.whenEnded(timer.key) {
        // Ended without firing (after a fire this changes nothing): cancelled by name lifts
        // the limit; a backend that shut down is the error its timers end with.
        limitSignal.resolve(.success(scheduler.shutDownError.map { .failed($0) } ?? .lifted))
    }
    do {
        let value = try await withThrowingTaskGroup(of: Outcome<Value>.self) { group in
            group.addTask { .finished(try await operation()) }
            group.addTask {
                // A cancelled wait: the race is over, so the limit no longer counts.
                switch (try? await limitSignal.wait(cancelled: .success(.lifted))) ?? .lifted {
                case .reached: return .timedOut
                case .lifted: return .limitLifted
                case let .failed(error): throw error
                }
            }
            defer { group.cancelAll() }
            while let outcome = try await group.next() {
                switch outcome {
                case let .finished(value):
                    return value
                case .timedOut:
                    group.cancelAll()
                    // The operation's own result no longer counts, but it must return first.
                    while (try? await group.next()) != nil {}
                    throw TimeoutError(timerName: name, backend: backend.name, limit: limit, deadline: deadline)
                case .limitLifted:
                    continue
                }
            }
            throw CancellationError()  // unreachable: the operation's child always reports
        }
        await endAndLeaveTheRegistry(timer)
        return value
    } catch {
        await endAndLeaveTheRegistry(timer)
        throw error
    }
}

/// Cancels `timer` (nothing, if it fired) and returns once it has ended, its handler has
/// returned and it has left the registry: a fired one-shot leaves it only after its handler.
private func endAndLeaveTheRegistry(_ timer: TimerHandle) async {
    timer.cancel()
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
        timer.scheduler.whenEnded(timer.key) { continuation.resume() }
    }
}

/// How a timeout's limit ended: its timer fired, ended without firing (cancelled by name), or
/// its backend shut down.
private enum LimitOutcome: Sendable {
    case reached
    case lifted
    case failed(TimerError)
}
