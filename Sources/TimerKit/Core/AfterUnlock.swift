/// What a critical section of a scheduler owes once it has unlocked: user code to run (end
/// waiters, event observers), tasks to cancel, jobs to hand to the global executor, and
/// references whose last release could run user code (ended timers' handlers and observers,
/// the driver loaded under the lock, which may be the backend itself). Filled under the lock,
/// run and dropped after it, as SwiftNIO's `runOneLoopTick` and tokio's
/// `process_at_sharded_time` do: the one shape every path of the scheduler uses for it.
///
/// A scheduler's own timers need no carrying: a live one is also held by the registry, and an
/// ended one holds nothing of the user's (`TimerScheduler.endLocked` takes it all here). But a
/// batch the registry flushed can hold other schedulers' last timers, whose release can end
/// those schedulers (whose `deinit` takes the registry's lock): it is carried too.
struct AfterUnlock: ~Copyable {
    /// The handler of the first timer that ended (most sections end one at most, and an inline
    /// slot costs no allocation), and of the others.
    var handler: (@Sendable (Tick) -> Void)?
    var handlers: [@Sendable (Tick) -> Void] = []
    var observers: [TimerObserver] = []
    var endWaiters: [EndWaiter] = []
    var tasks: [Task<Void, Never>] = []
    var events: [TimerBackendEvent] = []
    var eventObservers: [@Sendable (TimerBackendEvent) -> Void] = []
    /// Jobs the loop cannot run (it has shut down, or its wake-up failed).
    var strandedJobs: [UnownedJob] = []
    var driver: (any TimerDriver)?
    /// End waiters taken back unrun (their waiting task gave up).
    var droppedWaiters: [EndWaiter] = []
    /// Ended timers the registry let go of in a batch, and the registry, which reuses the
    /// batch's storage.
    var flushed: [TimerHandle] = []
    var flushedFrom: TimerRegistry?

    /// Whether it owes anything but releasing the driver: a fire that re-armed and ended no
    /// timer owes only that, which needs no second turn of the lock.
    var owesMoreThanReleasingTheDriver: Bool {
        handler != nil || !handlers.isEmpty || !observers.isEmpty || !endWaiters.isEmpty || !tasks.isEmpty
            || !events.isEmpty || !strandedJobs.isEmpty || !droppedWaiters.isEmpty || !flushed.isEmpty
    }

    mutating func keep(handler: @escaping @Sendable (Tick) -> Void) {
        if self.handler == nil { self.handler = handler } else { handlers.append(handler) }
    }

    @inline(__always)
    mutating func keep(flushed batch: consuming [TimerHandle], from registry: TimerRegistry) {
        guard batch.capacity > 0 else { return }
        if flushed.isEmpty {
            flushed = batch
            flushedFrom = registry
        } else {
            flushed.append(contentsOf: batch)
        }
    }

    /// Runs what was owed, in order: tasks cancelled, end waiters told, events delivered, jobs
    /// handed on; then lets go of everything held, keeping the buffers' storage for reuse (the
    /// fire path keeps one carrier, so that a fire allocates nothing in steady state).
    mutating func run() {
        for task in tasks { task.cancel() }
        for waiter in endWaiters { waiter.action() }
        for event in events { for observer in eventObservers { observer(event) } }
        for job in strandedJobs { globalConcurrentExecutor.enqueue(job) }
        if let registry = flushedFrom {
            flushedFrom = nil
            registry.recycle(&flushed)
        }
        handler = nil
        handlers.removeAll(keepingCapacity: true)
        observers.removeAll(keepingCapacity: true)
        endWaiters.removeAll(keepingCapacity: true)
        tasks.removeAll(keepingCapacity: true)
        events.removeAll(keepingCapacity: true)
        eventObservers.removeAll(keepingCapacity: true)
        strandedJobs.removeAll(keepingCapacity: true)
        droppedWaiters.removeAll(keepingCapacity: true)
        flushed.removeAll(keepingCapacity: true)
        driver = nil
    }
}
