import Glibc

/// Where a scheduler is in its shutdown: one value under its lock, which every call of
/// `shutdown()` and `fail(with:)` reads to decide what it does (`ShutdownRole`).
///
/// `running → draining → drained`. The first call drains: it ends every timer a slice at a
/// time, each slice under the lock for a moment only, and runs no user code meanwhile: what the
/// slices owe (end callbacks, `onEnd` actions, end waiters, handlers let go of, events) is
/// carried until the phase is `drained`, and runs after it. So a `shutdown()` made by that code,
/// or by any thread then, finds the shutdown done and returns; one made by another thread while
/// the slices run waits for `drained`, which no user code stands in the way of.
enum ShutdownPhase: UInt8 {
    case running
    /// Timers are ending, a slice at a time, on the scheduler's `drainingThread`.
    case draining
    /// Every timer has ended; what the drain owes runs (or has run) outside the lock.
    case drained
}

/// Shutting down, by the backend or because its loop failed: every timer of this scheduler
/// ends, and no handler of it runs once `shutdown()` returns. The work is done a slice at a
/// time, each under the lock for a moment only; the registry, which every backend shares, is
/// taken only to let the timers' names go.
extension TimerScheduler {
    /// Cancels every timer of this scheduler and refuses new ones, then waits until the
    /// loop is no longer running any of its handlers nor any of its own bookkeeping — unless
    /// called from that loop (then it returns at once, and the handler under way finishes
    /// after). Idempotent: a call made while another is under way returns once that one has
    /// ended every timer; one made from the code that shutdown runs (an end callback, an
    /// `onEnd` action, a `deinit` of what a handler captured) does not wait for it, the timers
    /// ended (off the loop, it still waits for a handler under way there). Backends call it
    /// first in their own `shutdown()`, then stop their loop.
    public func shutdown() {
        shutDown(failure: nil)
        mutex.lock()
        while firingDepth > 0 && !isFiringThreadLocked { waitLocked() }
        mutex.unlock()
    }

    /// Shuts the scheduler down because its loop cannot go on: `schedule` then throws
    /// `TimerError.loopFailed` with `cause`, and `failure` reports it. For backends whose
    /// loop stops on an error (an `epoll_wait` that fails, a `event_base_loop` that returns).
    /// The timers' callbacks hear `TimerEndReason.loopFailed(cause)`; one that calls
    /// `shutdown()` on the loop's thread finds the shutdown done and returns.
    public func fail(with cause: TimerError) {
        shutDown(failure: cause)
    }

    /// Queue entries a shutdown drops per turn of the lock (timers end a chunk of slots, 4,096,
    /// per turn).
    static let shutdownSlice = 4096

    /// What one call of `shutDown` does, by the phase it finds.
    private enum ShutdownRole {
        /// It found the scheduler running: it drains.
        case drainer
        /// Another thread drains: it waits for `drained`.
        case waiter
        /// The shutdown is done, or this thread is the one draining (it cannot wait for
        /// itself): it returns.
        case done
    }

    func shutDown(failure: TimerError?) {
        var unwatch = false
        var ownedDriver: Unmanaged<OwnedDriver>?
        var after = AfterUnlock()
        mutex.lock()
        let role: ShutdownRole
        switch shutdownPhase {
        case .running:
            role = .drainer
            shutdownPhase = .draining
            drainingThread = pthread_self()
            loopFailure = failure
            shutDownFlag.store(true, ordering: .relaxed)
            queues.beginDraining()
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
        case .draining:
            role = pthread_equal(drainingThread, pthread_self()) != 0 ? .done : .waiter
            while shutdownPhase == .draining, role == .waiter { waitLocked() }
        case .drained:
            role = .done
        }
        mutex.unlock()
        ownedDriver?.release()
        guard role == .drainer else {
            after.run()
            return
        }
        if unwatch { ClockWatcher.shared.unwatch(self) }
        drain(into: &after)
        after.run()
    }

    /// Ends every timer, a slice at a time, carrying what that owes in `after`, and sets the
    /// phase to `drained` in the last slice: the caller runs `after` once it has unlocked.
    private func drain(into after: inout AfterUnlock) {
        // Taken, not read: the hook often captures this scheduler, and one kept here would be a
        // cycle that outlives the shutdown (released outside the lock as `drain` returns).
        let betweenSlices = mutex.withLock {
            defer { betweenShutdownSlices = nil }
            return betweenShutdownSlices
        }
        // Nothing is queued once shutdown has begun: the queues empty a slice at a time.
        while mutex.withLock({ queuesHaveEntriesAfterDroppingSomeLocked() }) { betweenSlices?() }
        // Every timer is in the store (queued, suspended, firing or running a task): they end a
        // chunk of slots at a time.
        var ended = 0
        var chunk = 0
        var slots: [UInt32] = []
        while true {
            mutex.lock()
            guard chunk < store.chunks.count else { break }  // the lock is kept for the last step
            slots.removeAll(keepingCapacity: true)
            store.forEachOccupied(chunks: chunk..<chunk + 1) { slots.append($0) }
            for slot in slots where !store[slot].pointee.state.hasEnded {
                endLocked(slot, because: .shutDown, into: &after)
                ended += 1
            }
            settleLocked(&after)
            mutex.unlock()
            betweenSlices?()
            chunk += 1
        }
        shutdownPhase = .drained
        settleLocked(&after)  // after the phase: the threads waiting for it look again
        if let loopFailure { after.owed.events.append(.loopFailed(backend: backendName, cause: loopFailure)) }
        after.owed.events.append(.shutDown(backend: backendName, endedTimers: ended))
        // The observers go with the shutdown, after hearing of it: one that captured its
        // backend would otherwise keep it alive for ever.
        after.owed.eventObservers = eventObservers
        eventObservers = []
        // Every timer has ended: the link let go of this scheduler with the last of them, so
        // lookups and listings find nothing here, and nothing keeps it but its users.
        mutex.unlock()
    }

    /// Runs `body` between two slices of the next shutdown, outside the lock, as another
    /// thread's call may land there (tests). The shutdown lets go of it.
    package func runBetweenShutdownSlices(_ body: @escaping @Sendable () -> Void) {
        mutex.withLock { betweenShutdownSlices = body }
    }

    /// Drops up to a slice of queue entries; whether any are left.
    private func queuesHaveEntriesAfterDroppingSomeLocked() -> Bool {
        for clock in DeadlineClock.allCases where queues.read(clock, { !$0.heap.isEmpty }) {
            return queues.with(clock) { $0.removeSome(Self.shutdownSlice, in: store.table) } || !queues.isEmpty
        }
        return false
    }
}
