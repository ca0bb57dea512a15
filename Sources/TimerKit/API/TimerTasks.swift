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
    /// The tasks start on the global executor; on a `ManualBackend` they run on its
    /// `taskExecutor`, so that a test's `await advanceAndSettle(by:)` sees them finish.
    /// ``scheduleAsync(_:name:tolerance:executorPreference:operation:)`` starts them on an
    /// executor you choose.
    @discardableResult
    public func scheduleAsync(
        _ schedule: TimerSchedule, name: String? = nil, tolerance: Duration = .zero,
        operation: @escaping @Sendable @isolated(any) (Tick) async -> Void
    ) throws(TimerError) -> TimerHandle {
        try scheduleAsync(schedule, name: name, tolerance: tolerance, executorPreference: nil, operation: operation)
    }

    /// Schedules an `async` operation whose tasks start on `executorPreference`, as
    /// `Task(executorPreference:)` would start them. Otherwise as
    /// ``scheduleAsync(_:name:tolerance:operation:)``.
    ///
    /// ```swift
    /// try backend.scheduleAsync(.every(.seconds(1)), executorPreference: backend.taskExecutor) { tick in
    ///     await poll()   // on the backend's loop, between its handlers
    /// }
    /// ```
    ///
    /// Pass ``taskExecutor`` to run the tasks on the backend's loop, or an executor of your
    /// own (an event loop's, a thread's) to keep them off the global executor, whose threads
    /// other code may hold. An operation isolated to an actor still runs on that actor. nil
    /// starts them where ``scheduleAsync(_:name:tolerance:operation:)`` does.
    @discardableResult
    public func scheduleAsync(
        _ schedule: TimerSchedule, name: String? = nil, tolerance: Duration = .zero,
        executorPreference: (any TaskExecutor)?,
        operation: @escaping @Sendable @isolated(any) (Tick) async -> Void
    ) throws(TimerError) -> TimerHandle {
        let scheduler = self.scheduler
        return try scheduler.schedule(schedule, name: name, tolerance: tolerance, policy: .skip, target: nil, runsTasks: true) {
            tick in
            let run: @Sendable () async -> Void = {
                await operation(tick)
                scheduler.taskReturned(tick.timer.key)
            }
            let executor = executorPreference ?? scheduler.taskExecutor
            let task = executor.map { Task(executorPreference: $0, operation: run) } ?? Task(operation: run)
            scheduler.taskStarted(tick.timer.key, task)
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
            let end = OnceContinuation<Void>()
            let token = scheduler.whenEnded(key) { end.resolve() }
            do {
                try await end.wait()
            } catch {
                if let token { scheduler.removeEndWaiter(token, of: key) }
                throw CancellationError()
            }
            // Set when it ended, before the wait could finish.
            return endReason ?? .completed
        }
    }
}
