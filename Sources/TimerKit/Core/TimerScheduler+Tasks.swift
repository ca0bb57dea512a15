/// Timers whose handler starts a task (`scheduleAsync`): fixed-delay repeats re-queued when
/// the task returns.
extension TimerScheduler {
    /// Called by a task timer's handler, during its call: a task of it is starting.
    func taskStarted(_ timer: TimerKey, _ task: Task<Void, Never>) {
        locked { after in
            guard let record = liveOrBusyRecordLocked(timer), !record.pointee.state.hasEnded else {
                after.owed.tasks.append(task)
                return
            }
            // A task that has already returned is not kept (`taskReturned` ran first).
            if let extras = record.pointee.extras, extras.tasksRunning > 0 { extras.runningTask = task }
        }
    }

    /// Called when a task of `timer` has returned: a repeat is queued again a full interval
    /// later (fixed delay), a one-shot or a finished count ends the timer.
    func taskReturned(_ timer: TimerKey) {
        var failure: TimerError?
        locked { after in
            guard let record = liveOrBusyRecordLocked(timer), let extras = record.pointee.extras else { return }
            extras.tasksRunning -= 1
            extras.runningTask = nil
            let rescheduled = extras.rescheduledDuringTask
            extras.rescheduledDuringTask = false
            if record.pointee.state.hasEnded {
                freeIfIdleLocked(timer.slot, &after)
            } else if isShutDown {
                // Shutdown is about to end it.
            } else if isLastCallOverLocked(record) && !rescheduled {
                endLocked(timer.slot, because: .completed, into: &after)
            } else if record.pointee.state == .scheduled && record.pointee.entrySequence == 0 {
                if !rescheduled {
                    // A full interval from now, on the timer's own clock.
                    record.pointee.deadline =
                        now(of: record.pointee.clock, monotonic: clock.now().nanoseconds).saturatingAdd(record.pointee.interval)
                }
                do throws(TimerError) { try queueLocked(timer.slot, &after) } catch { failure = error }
            }
        }
        if let failure { shutDown(failure: failure) }
    }
}
