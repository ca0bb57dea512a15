import Glibc

/// The loop as an executor (`TimerBackend.taskExecutor`): jobs run on the loop's thread after
/// each batch of handlers, so a task there that awaits a timer of this scheduler resumes
/// without a thread switch. Jobs that cannot run on the loop (it has shut down, or its
/// wake-up fails) go to the global executor: a task is never stranded.
extension TimerScheduler: TaskExecutor {
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        locked { after in
            guard !isShutDown, isAttached else {
                after.owed.strandedJobs.append(job)
                return
            }
            jobs.append(job)
            // On the loop inside `fireDueTimers` the job runs before that call returns.
            if !isFiringThreadLocked { wakeForJobsLocked(&after) }
        }
    }

    /// Arms the driver to wake at once if jobs wait and it is not armed that early already.
    /// If the driver refuses, the jobs go to the global executor.
    func wakeForJobsLocked(_ after: inout AfterUnlock) {
        guard !jobs.isEmpty, isAttached else { return }
        let now = clock.now().nanoseconds
        guard armedKey > now else { return }
        do throws(TimerError) { try wakeLocked(at: now) } catch {
            after.owed.strandedJobs.append(contentsOf: jobs)
            jobs.removeAll()
        }
    }

    /// The jobs queued so far, to run after this batch of handlers; the ones they queue wait for
    /// the next wake-up, so that a task that keeps yielding cannot hold the timers back.
    func takeJobsLocked() -> [UnownedJob] {
        guard !isShutDown, !jobs.isEmpty else { return [] }
        var batch: [UnownedJob] = []
        swap(&batch, &spareJobs)
        swap(&batch, &jobs)
        return batch
    }

    /// Runs `batch` on this thread (the loop's), outside the lock, and records the time they
    /// took (each job's own when slow ones are reported).
    func runJobs(_ taken: consuming [UnownedJob]) {
        var batch = taken
        guard !batch.isEmpty else { return }
        let timesEachJob = mutex.withLock { slowHandlerNanoseconds > 0 }
        let executor = asUnownedTaskExecutor()
        let began = clock.now().nanoseconds
        var finished = began
        var timings: [(began: UInt64, finished: UInt64)] = []
        for job in batch {
            job.runSynchronously(on: executor)
            if timesEachJob {
                let start = finished
                finished = clock.now().nanoseconds
                timings.append((start, finished))
            }
        }
        if !timesEachJob { finished = clock.now().nanoseconds }
        batch.removeAll(keepingCapacity: true)
        locked { _ in
            if timesEachJob {
                for timing in timings { recordJobLocked(began: timing.began, finished: timing.finished) }
                reportSlowCallsLocked()
            } else {
                stats.busyNanoseconds &+= finished &- began
            }
            if spareJobs.capacity < batch.capacity { swap(&batch, &spareJobs) }
        }
    }
}
