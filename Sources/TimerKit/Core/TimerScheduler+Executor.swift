import Glibc

/// The loop as an executor (`TimerBackend.taskExecutor`): jobs run on the loop's thread after
/// each batch of handlers, so a task there that awaits a timer of this scheduler resumes
/// without a thread switch. Jobs that cannot run on the loop (it has shut down, or its
/// wake-up fails) go to the global executor: a task is never stranded.
extension TimerScheduler: TaskExecutor {
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        mutex.lock()
        guard !isShutDown, driver != nil else {
            mutex.unlock()
            globalConcurrentExecutor.enqueue(job)
            return
        }
        jobs.append(job)
        // On the loop inside `fireDueTimers` the job runs before that call returns.
        let stranded = isFiringThreadLocked ? [] : wakeForJobsLocked()
        mutex.unlock()
        for job in stranded { globalConcurrentExecutor.enqueue(job) }
    }

    /// Arms the driver to wake at once if jobs wait and it is not armed that early already.
    /// Returns the jobs to hand to the global executor when the driver refuses.
    func wakeForJobsLocked() -> [UnownedJob] {
        guard !jobs.isEmpty, let driver else { return [] }
        let now = clock.now().nanoseconds
        guard armedKey > now else { return [] }
        do throws(TimerError) {
            try driver.wake(at: MonotonicInstant(nanoseconds: now))
            armedKey = now
            return []
        } catch {
            defer { jobs = [] }
            return jobs
        }
    }
}
