/// What a critical section of a scheduler owes once it has unlocked: user code to run (end
/// waiters, event observers, callbacks' `timerEnded`), tasks to cancel, jobs to hand to the
/// global executor, and references whose last release could run user code (ended timers'
/// handlers and observers, a scheduler its link let go of).
/// Filled under the lock, run and dropped after it, as SwiftNIO's `runOneLoopTick` and tokio's
/// `process_at_sharded_time` do: the one shape every path of the scheduler uses for it.
///
/// What stays in the store when a timer ends holds nothing of the user's
/// (`TimerScheduler.endLocked` takes it all here), so the store may let it go under the lock.
///
/// Every section makes one, so it costs nothing it does not carry: its references are held as
/// unmanaged +1 references, so that it is trivially destroyed (a struct of optional references
/// released each on every section's way out, nil or not, cost ~140 instructions per
/// operation), and `run()`, which every section calls once it has unlocked, gives them back.
/// What nearly every section carries (an ended timer's handle, an ended callback, a release) is
/// inline; the rest waits in `Owed`, allocated only by a section that has some.
struct AfterUnlock: ~Copyable {
    /// The handle of a timer that ended here, whose handler is let go of after unlocking.
    private var endedHandle: Unmanaged<TimerHandle>?
    /// A reference whose release may run a `deinit`, let go of after unlocking: a scheduler's
    /// link's reference to it (`keep(releasing:)`). A second one waits in `Owed.released`.
    private var released: Unmanaged<AnyObject>?
    /// A callback to tell that its timer has ended (and then let go of).
    private var ended: EndedCallback?
    private var rest: Unmanaged<Owed>?

    init() {}

    /// The rarer things a section owes.
    final class Owed {
        var handles: [TimerHandle] = []
        var observers: [TimerObserver] = []
        var endWaiters: [EndWaiter] = []
        var tasks: [Task<Void, Never>] = []
        var events: [TimerBackendEvent] = []
        var eventObservers: [@Sendable (TimerBackendEvent) -> Void] = []
        /// Jobs the loop cannot run (it has shut down, or its wake-up failed).
        var strandedJobs: [UnownedJob] = []
        /// End waiters taken back unrun (their waiting task gave up): only released.
        var droppedWaiters: [EndWaiter] = []
        var ended: [EndedCallback] = []
        /// References let go of after unlocking where the inline slot was taken.
        var released: [AnyObject] = []
        /// The scheduler's loop failure, for the reason of callbacks ended by the shutdown it
        /// caused.
        var loopFailure: TimerError?
    }

    /// A callback's `timerEnded`, prepared under the lock: plain fields (the reason is made from
    /// the cause after unlocking) and the callback, held +1.
    struct EndedCallback {
        let callback: Unmanaged<AnyObject>
        /// Not retained: a carrier runs inside a method of the scheduler that owns `kinds`.
        let kinds: Unmanaged<CallbackKinds>
        let key: TimerKey
        let kind: UInt8
        let cause: EndCause
        let fires: Int
    }

    /// The rarer things, made on first use.
    var owed: Owed {
        mutating get {
            if let rest { return rest.takeUnretainedValue() }
            let made = Owed()
            rest = Unmanaged.passRetained(made)
            return made
        }
    }

    /// Whether it owes anything but a release (a scheduler's link's reference): a fire that
    /// re-armed and ended no timer owes at most that, which needs no second turn of the lock.
    var owesMoreThanARelease: Bool { endedHandle != nil || rest != nil || ended != nil }

    /// Keeps `handle`, whose timer has ended, until after unlocking: `run()` lets go of its
    /// handler there.
    mutating func keep(endedHandle handle: TimerHandle) {
        if endedHandle == nil { endedHandle = Unmanaged.passRetained(handle) } else { owed.handles.append(handle) }
    }

    /// Takes `callback` (+1, the record's reference) to tell, after unlocking, that its timer
    /// has ended.
    @inline(__always)
    mutating func keep(ended callback: EndedCallback) {
        if ended == nil { ended = callback } else { owed.ended.append(callback) }
    }

    /// Keeps `object` until after unlocking, where its release may be the last (a scheduler its
    /// link let go of).
    mutating func keep(releasing object: AnyObject) {
        if released == nil { released = Unmanaged.passRetained(object) } else { owed.released.append(object) }
    }

    /// Runs what was owed, in order: ended callbacks told, tasks cancelled, end waiters told,
    /// events delivered, jobs handed on; then lets go of everything held.
    @inline(__always)
    consuming func run() {
        if released == nil && rest == nil {
            // Most sections owe nothing, or (a cancel) one timer's end: its callback told, or
            // its handle's handler let go of.
            let ended = self.ended
            let endedHandle = self.endedHandle
            discard self
            if let ended { Self.tell(ended, loopFailure: nil) }
            endedHandle?.takeRetainedValue().letGoOfHandler()
            return
        }
        runOwed()
    }

    private consuming func runOwed() {
        let rest = self.rest?.takeRetainedValue()
        if let ended { Self.tell(ended, loopFailure: rest?.loopFailure) }
        if let rest {
            for callback in rest.ended { Self.tell(callback, loopFailure: rest.loopFailure) }
            for task in rest.tasks { task.cancel() }
            for waiter in rest.endWaiters { waiter.action() }
            for event in rest.events { for observer in rest.eventObservers { observer(event) } }
            for job in rest.strandedJobs { globalConcurrentExecutor.enqueue(job) }
            for handle in rest.handles { handle.letGoOfHandler() }
        }
        endedHandle?.takeRetainedValue().letGoOfHandler()
        released?.release()
        discard self
    }

    private static func tell(_ ended: EndedCallback, loopFailure: TimerError?) {
        // Borrowed, not loaded: a load of either reference would retain and release it again.
        ended.kinds._withUnsafeGuaranteedRef { kinds in
            ended.callback._withUnsafeGuaranteedRef { callback in
                kinds.ended(
                    callback, kind: ended.kind, ended.key, reason: ended.cause.endedReason(loopFailure: loopFailure),
                    fires: ended.fires)
            }
        }
        ended.callback.release()
    }

    deinit {
        // Every section runs its carrier; one dropped unrun (never) would only release.
        assertionFailure("AfterUnlock dropped without run()")
        rest?.release()
        ended?.callback.release()
        endedHandle?.release()
        released?.release()
    }
}
