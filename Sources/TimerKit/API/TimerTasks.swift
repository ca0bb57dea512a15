extension TimerBackend {
    /// Schedules an `async` operation, which may be isolated to an actor:
    ///
    /// ```swift
    /// try backend.scheduleAsync(.every(.seconds(1)), name: "status") { @MainActor tick in
    ///     statusBar.show(await fetchStatus())
    /// }
    /// ```
    ///
    /// Each tick starts a task running `operation`. Repeats are **fixed-delay**: the next tick
    /// is due a full interval after the operation returns (as SwiftNIO's
    /// `scheduleRepeatedAsyncTask`), so two runs never overlap and a slow one delays the rest
    /// instead of piling them up. A count ends the timer after that many runs.
    ///
    /// Cancelling the timer cancels the running task (it sees `Task.isCancelled`) and starts
    /// no more. `try await timer.ended` waits until the timer has ended and its task has returned.
    /// `shutdown()` does not wait for a running task.
    ///
    /// On a `ManualBackend` the tasks run on its `taskExecutor`, so that a test's
    /// `await advanceAndSettle(by:)` sees them finish.
    @discardableResult
    public func scheduleAsync(
        _ schedule: TimerSchedule, name: String? = nil, tolerance: Duration = .zero,
        operation: @escaping @Sendable @isolated(any) (Tick) async -> Void
    ) throws(TimerError) -> TimerHandle {
        let scheduler = self.scheduler
        return try scheduler.schedule(schedule, name: name, tolerance: tolerance, policy: .skip, target: nil, runsTasks: true) {
            tick in
            let run: @Sendable () async -> Void = {
                await operation(tick)
                scheduler.taskReturned(tick.timer)
            }
            let task = scheduler.taskExecutor.map { Task(executorPreference: $0, operation: run) } ?? Task(operation: run)
            scheduler.taskStarted(tick.timer, task)
        }
    }
}

extension TimerHandle {
    /// Suspends until the timer has ended — cancelled, finished, or shut down with its backend
    /// — and no call of its handler, nor a task `scheduleAsync` started for it, is still running;
    /// then returns why it ended.
    /// The `async` counterpart of `cancelAndWait()`; it does not cancel the timer itself.
    ///
    /// - Throws: `CancellationError` as soon as the waiting task is cancelled (the timer is
    ///   left as it is), so a timeout around it, or a task group that cancels it, never hangs.
    public var ended: TimerEndReason {
        get async throws(CancellationError) {
            let wait = EndWait()
            do {
                try await withTaskCancellationHandler {
                    try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                        guard wait.begin(continuation) else { return }
                        let token = scheduler.whenEnded(self) { wait.finish(cancelled: false) }
                        if let token, wait.waiting(token: token) { scheduler.removeEndWaiter(token, of: self) }
                    }
                } onCancel: {
                    if let token = wait.finish(cancelled: true) { scheduler.removeEndWaiter(token, of: self) }
                }
            } catch {
                throw CancellationError()
            }
            // Set when it ended, before the wait could finish.
            return endReason ?? .completed
        }
    }
}

/// One `await ended`: its continuation, resumed exactly once — when the timer ends or when the
/// task is cancelled — and the token of its end waiter, taken back if the task gave up first.
private final class EndWait: @unchecked Sendable {
    // @unchecked: every field is touched only while holding `mutex`.
    private let mutex = PThreadMutex()
    private var continuation: UnsafeContinuation<Void, any Error>?
    private var token: UInt64?
    private var isCancelled = false

    /// Stores the continuation; false (and resumed) if the task was cancelled already.
    func begin(_ continuation: UnsafeContinuation<Void, any Error>) -> Bool {
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

    /// Records the end waiter's token. True when the task was cancelled meanwhile: then the
    /// caller takes the waiter back at once.
    func waiting(token: UInt64) -> Bool {
        mutex.withLock {
            if !isCancelled { self.token = token }
            return isCancelled
        }
    }

    /// Resumes the wait, normally or with `CancellationError`, if it has not been resumed yet.
    /// Returns the end waiter's token when a cancelled wait leaves one to take back.
    @discardableResult
    func finish(cancelled: Bool) -> UInt64? {
        mutex.lock()
        if cancelled { isCancelled = true }
        let continuation = self.continuation
        let token = cancelled ? self.token : nil
        self.continuation = nil
        self.token = nil
        mutex.unlock()
        if cancelled { continuation?.resume(throwing: CancellationError()) } else { continuation?.resume() }
        return token
    }
}
