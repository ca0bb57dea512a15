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
///
/// What nearly every section carries (an ended timer's handler, the driver) is kept inline;
/// the rest waits in `Owed`, allocated only by a section that has some, so that a cancel or a
/// fire pays for no more than it uses.
struct AfterUnlock {
    /// The handler of the timer that ended here (most sections end one at most).
    var handler: (@Sendable (Tick) -> Void)?
    /// The driver, loaded strongly for a wake-up.
    var driver: (any TimerDriver)?
    /// Ended timers the registry let go of in a batch, and the registry, which reuses the
    /// batch's storage.
    private var flushed: [TimerHandle] = []
    private var flushedFrom: TimerRegistry?
    private var rest: Owed?

    /// The rarer things a section owes.
    final class Owed {
        var handlers: [@Sendable (Tick) -> Void] = []
        var observers: [TimerObserver] = []
        var endWaiters: [EndWaiter] = []
        var tasks: [Task<Void, Never>] = []
        var events: [TimerBackendEvent] = []
        var eventObservers: [@Sendable (TimerBackendEvent) -> Void] = []
        /// Jobs the loop cannot run (it has shut down, or its wake-up failed).
        var strandedJobs: [UnownedJob] = []
        /// End waiters taken back unrun (their waiting task gave up): only released.
        var droppedWaiters: [EndWaiter] = []
        /// More flushed batches, when a section flushed several.
        var flushed: [TimerHandle] = []
    }

    /// The rarer things, made on first use.
    var owed: Owed {
        mutating get {
            if let rest { return rest }
            let made = Owed()
            rest = made
            return made
        }
    }

    /// Whether it owes anything but releasing the driver: a fire that re-armed and ended no
    /// timer owes only that, which needs no second turn of the lock.
    var owesMoreThanReleasingTheDriver: Bool { handler != nil || flushedFrom != nil || rest != nil }

    mutating func keep(handler: @escaping @Sendable (Tick) -> Void) {
        if self.handler == nil { self.handler = handler } else { owed.handlers.append(handler) }
    }

    @inline(__always)
    mutating func keep(flushed batch: consuming [TimerHandle], from registry: TimerRegistry) {
        guard batch.capacity > 0 else { return }
        if flushedFrom == nil {
            flushed = batch
            flushedFrom = registry
        } else {
            owed.flushed.append(contentsOf: batch)
        }
    }

    /// Runs what was owed, in order: tasks cancelled, end waiters told, events delivered, jobs
    /// handed on; then lets go of everything held.
    mutating func run() {
        if let rest {
            for task in rest.tasks { task.cancel() }
            for waiter in rest.endWaiters { waiter.action() }
            for event in rest.events { for observer in rest.eventObservers { observer(event) } }
            for job in rest.strandedJobs { globalConcurrentExecutor.enqueue(job) }
        }
        if let flushedFrom { flushedFrom.recycle(&flushed) }
    }
}
