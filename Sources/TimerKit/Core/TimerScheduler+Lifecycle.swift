/// Shutting down, by the backend or because its loop failed: every timer of this scheduler
/// ends together, and no handler of it runs once `shutdown()` returns.
extension TimerScheduler {
    /// Cancels every timer of this scheduler and refuses new ones, then waits until the
    /// loop is no longer running any of its handlers nor any of its own bookkeeping — unless
    /// called from that loop (then it returns at once, and the handler under way finishes
    /// after). Idempotent. Backends call it first in their own `shutdown()`, then stop their loop.
    public func shutdown() {
        let queued = mutex.withLock { beginShutdownLocked(failure: nil) }
        finishShutdown(queued)
        mutex.lock()
        while firingDepth > 0 && !isFiringThreadLocked { waitLocked() }
        mutex.unlock()
    }

    /// Shuts the scheduler down because its loop cannot go on: `schedule` then throws
    /// `TimerError.loopFailed` with `cause`, and `failure` reports it. For backends whose
    /// loop stops on an error (an `epoll_wait` that fails, a `event_base_loop` that returns).
    public func fail(with cause: TimerError) {
        let queued = mutex.withLock { beginShutdownLocked(failure: cause) }
        finishShutdown(queued)
    }

    /// Marks the scheduler shut down and empties the queue; returns the timers it held, to be
    /// cancelled (and released) after unlocking. Empty if it was already shut down.
    func beginShutdownLocked(failure: TimerError?) -> (timers: [TimerHandle], jobs: [UnownedJob]) {
        guard !isShutDown else { return ([], []) }
        isShutDown = true
        loopFailure = failure
        shutDownFlag.store(true, ordering: .relaxed)
        armedKey = .max
        deadInQueue = 0
        clockTimerCount = 0
        defer { jobs = [] }
        let queued = queue.removeAll()
        for timer in queued { timer.entrySequence = 0 }
        return (queued, jobs)
    }

    /// Ends every timer of this scheduler together: one pass under the registry's lock lists
    /// them (this scheduler's slots only), one under this lock cancels them, and one under the
    /// registry's lock takes them out; what they held is released after the locks.
    func finishShutdown(_ queued: (timers: [TimerHandle], jobs: [UnownedJob])) {
        // Tasks that preferred the loop carry on without it.
        for job in queued.jobs { globalConcurrentExecutor.enqueue(job) }
        // The queue's references are let go of after the locks. Every timer it held is in the
        // registry, as are the suspended, firing and task-running ones it does not hold; none
        // enters the queue once shutdown has begun.
        withExtendedLifetime(queued.timers) {
            let timers = registry.timers(in: registryShard)
            var ended: [TimerHandle] = []
            var released: [Released] = []
            var tasks: [Task<Void, Never>] = []
            ended.reserveCapacity(timers.count)
            mutex.lock()
            for timer in timers where !timer.state.hasEnded {
                timer.state = .cancelled
                timer.endCause = .shutDown
                released.append(
                    Released(
                        timer: timer, handler: timer.handler, observers: dropObserversLocked(timer),
                        endWaiters: takeEndWaitersLocked(timer)))
                timer.handler = Self.endedHandler
                if let task = timer.extras?.runningTask {
                    tasks.append(task)
                    timer.extras?.runningTask = nil
                }
                ended.append(timer)
            }
            var events: [TimerBackendEvent] = []
            if !hasReportedShutdown {
                hasReportedShutdown = true
                if let loopFailure { events.append(.loopFailed(backend: backendName, cause: loopFailure)) }
                events.append(.shutDown(backend: backendName, endedTimers: ended.count))
            }
            // The observers go with the shutdown (released below, after the locks): one that
            // captured its backend would otherwise keep it alive for ever.
            let observers = eventObservers
            eventObservers = []
            mutex.unlock()
            for task in tasks { task.cancel() }
            registry.remove(ended)
            for item in released { for waiter in item.endWaiters { waiter.action() } }
            withExtendedLifetime(released) {}
            deliver((events, observers))
        }
        // Ended timers waiting in the registry's removal batch hold this scheduler, which
        // holds the registry: let them go now, or a dropped registry would never be freed.
        registry.retire(registryShard)
    }
}
