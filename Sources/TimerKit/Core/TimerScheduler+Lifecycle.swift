/// Shutting down, by the backend or because its loop failed: every timer of this scheduler
/// ends, and no handler of it runs once `shutdown()` returns. The work is done a slice at a
/// time, each under the lock for a moment only; the registry, which every backend shares, is
/// taken only to let the timers' names go.
extension TimerScheduler {
    /// Cancels every timer of this scheduler and refuses new ones, then waits until the
    /// loop is no longer running any of its handlers nor any of its own bookkeeping — unless
    /// called from that loop (then it returns at once, and the handler under way finishes
    /// after). Idempotent: a call made while another is under way returns once that one has
    /// ended every timer. Backends call it first in their own `shutdown()`, then stop their loop.
    public func shutdown() {
        shutDown(failure: nil)
        mutex.lock()
        while firingDepth > 0 && !isFiringThreadLocked { waitLocked() }
        mutex.unlock()
    }

    /// Shuts the scheduler down because its loop cannot go on: `schedule` then throws
    /// `TimerError.loopFailed` with `cause`, and `failure` reports it. For backends whose
    /// loop stops on an error (an `epoll_wait` that fails, a `event_base_loop` that returns).
    public func fail(with cause: TimerError) {
        shutDown(failure: cause)
    }

    /// Queue entries a shutdown drops per turn of the lock (timers end a chunk of slots, 4,096,
    /// per turn).
    static let shutdownSlice = 4096

    func shutDown(failure: TimerError?) {
        var unwatch = false
        var ownedDriver: Unmanaged<OwnedDriver>?
        let first = locked { (after: inout AfterUnlock) -> Bool in
            guard !isShutDown else { return false }
            isShutDown = true
            loopFailure = failure
            shutDownFlag.store(true, ordering: .relaxed)
            armedKey = .max
            // Nothing is armed from now on: an owned driver goes (released below, unlocked), so
            // that a scheduler its handles keep alive never touches the backend's closed descriptors.
            swap(&ownedDriver, &self.ownedDriver)
            hasOwnClockDriver = false
            armedOwnClockKeys = OwnClockKeys()
            unwatch = clocks.isWatched
            clocks.isWatched = false
            // Tasks that preferred the loop carry on without it.
            if !jobs.isEmpty { after.owed.strandedJobs.append(contentsOf: jobs) }
            jobs.removeAll()
            return true
        }
        ownedDriver?.release()
        guard first else {
            mutex.lock()
            while !hasEndedAllTimers && !isFiringThreadLocked { waitLocked() }
            mutex.unlock()
            return
        }
        if unwatch { ClockWatcher.shared.unwatch(self) }
        // Nothing is queued once shutdown has begun: the queues empty a slice at a time.
        while mutex.withLock({ queuesHaveEntriesAfterDroppingSomeLocked() }) {}
        // Every timer is in the store (queued, suspended, firing or running a task): they end a
        // chunk of slots at a time.
        var ended = 0
        var chunk = 0
        while mutex.withLock({ chunk < store.chunks.count }) {
            locked { after in
                var slots: [UInt32] = []
                store.forEachOccupied(chunks: chunk..<chunk + 1) { slots.append($0) }
                for slot in slots where !store[slot].pointee.state.hasEnded {
                    endLocked(slot, .cancelled, because: .shutDown, into: &after)
                    ended += 1
                }
            }
            chunk += 1
        }
        locked { after in
            hasEndedAllTimers = true
            if !hasReportedShutdown {
                hasReportedShutdown = true
                if let loopFailure { after.owed.events.append(.loopFailed(backend: backendName, cause: loopFailure)) }
                after.owed.events.append(.shutDown(backend: backendName, endedTimers: ended))
            }
            // The observers go with the shutdown, after hearing of it: one that captured its
            // backend would otherwise keep it alive for ever.
            if !eventObservers.isEmpty { after.owed.eventObservers = eventObservers }
            eventObservers = []
        }
        // Every timer has ended: lookups and listings have nothing more to find here.
        registry.unregister(self, chunks: mutex.withLock { store.chunks })
    }

    /// Drops up to a slice of queue entries; whether any are left.
    private func queuesHaveEntriesAfterDroppingSomeLocked() -> Bool {
        for clock in DeadlineClock.allCases where queues.read(clock, { !$0.heap.isEmpty }) {
            return queues.with(clock) { $0.removeSome(Self.shutdownSlice, in: store.table) } || !queues.isEmpty
        }
        return false
    }
}
