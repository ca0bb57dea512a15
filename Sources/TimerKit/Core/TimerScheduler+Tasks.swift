/// Timers whose handler starts a task (`scheduleAsync`): fixed-delay repeats re-queued when
/// the task returns.
extension TimerScheduler {
    /// Called by a task timer's handler, during its call: a task of it is starting.
    func taskStarted(_ timer: TimerHandle, _ task: Task<Void, Never>) {
        locked { after in
            if timer.state.hasEnded {
                after.owed.tasks.append(task)
            } else if let extras = timer.extras, extras.tasksRunning > 0 {
                // A task that has already returned is not kept (`taskReturned` ran first).
                extras.runningTask = task
            }
        }
    }

    /// Called when a task of `timer` has returned: a repeat is queued again a full interval
    /// later (fixed delay), a one-shot or a finished count ends the timer.
    func taskReturned(_ timer: TimerHandle) {
        var failure: TimerError?
        locked { after in
            guard let extras = timer.extras else { return }
            extras.tasksRunning -= 1
            extras.runningTask = nil
            if isShutDown {
                // Shutdown has ended it, or is about to.
            } else if isLastCallOverLocked(timer) && !extras.rescheduledDuringTask {
                endLocked(timer, .finished, because: .completed, into: &after)
            } else if timer.state == .scheduled && timer.entrySequence == 0 {
                if !extras.rescheduledDuringTask {
                    // A full interval from now, on the timer's own clock.
                    timer.deadline = now(of: timer.clock, monotonic: clock.now().nanoseconds).saturatingAdd(timer.interval)
                }
                do throws(TimerError) { try queueLocked(timer, &after) } catch { failure = error }
            }
            extras.rescheduledDuringTask = false
            takeEndWaitersLocked(timer, into: &after)
        }
        if let failure { shutDown(failure: failure) }
    }
}
