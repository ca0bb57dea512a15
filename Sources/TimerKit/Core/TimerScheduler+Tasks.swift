/// Timers whose handler starts a task (`scheduleAsync`): fixed-delay repeats re-queued when
/// the task returns.
extension TimerScheduler {
    /// Called by a task timer's handler, during its call: a task of it is starting.
    func taskStarted(_ timer: TimerHandle, _ task: Task<Void, Never>) {
        mutex.lock()
        let ended = timer.state.hasEnded
        // A task that has already returned is not kept (`taskReturned` ran first).
        if !ended, let extras = timer.extras, extras.tasksRunning > 0 { extras.runningTask = task }
        mutex.unlock()
        if ended { task.cancel() }
    }

    /// Called when a task of `timer` has returned: a repeat is queued again a full interval
    /// later (fixed delay), a one-shot or a finished count ends the timer.
    func taskReturned(_ timer: TimerHandle) {
        mutex.lock()
        guard let extras = timer.extras else {
            mutex.unlock()
            return
        }
        extras.tasksRunning -= 1
        extras.runningTask = nil
        var finishedHandler: HandlerLifetime?
        var observers: [TimerObserver] = []
        var failure: TimerError?
        if isShutDown {
            // Shutdown has ended it, or is about to.
        } else if isLastCallOverLocked(timer) && !extras.rescheduledDuringTask {
            timer.state = .finished
            timer.endCause = .completed
            if timer.clock != .monotonic { clockTimerCount -= 1 }
            finishedHandler = HandlerLifetime(handler: timer.handler)
            timer.handler = Self.endedHandler
            observers = dropObserversLocked(timer)
            // Counted as running until it has left the registry, as in the fire path.
            timer.activeCalls += 1
        } else if timer.state == .scheduled && timer.entrySequence == 0 {
            if !extras.rescheduledDuringTask {
                // A full interval from now, on the timer's own clock.
                timer.deadline = (clock.now().nanoseconds &+ clockOffsets[timer.clock]).saturatingAdd(timer.interval)
            }
            do throws(TimerError) { try queueLocked(timer) } catch { failure = error }
        }
        extras.rescheduledDuringTask = false
        let endWaiters = takeEndWaitersLocked(timer)
        let stopped = failure.map { beginShutdownLocked(failure: $0) } ?? ([], [])
        mutex.unlock()
        withExtendedLifetime(finishedHandler) {}
        withExtendedLifetime(observers) {}
        var leftRegistry: [EndWaiter] = []
        if finishedHandler != nil {
            registry.remove(timer)
            mutex.lock()
            timer.activeCalls -= 1
            leftRegistry = takeEndWaitersLocked(timer)
            if waiters > 0 { firingDone.broadcast() }
            mutex.unlock()
        }
        if failure != nil { finishShutdown(stopped) }
        for waiter in endWaiters + leftRegistry { waiter.action() }
    }
}
