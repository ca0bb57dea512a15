import Glibc
import Synchronization

/// The core of every backend: a queue of deadlines, the timer state machine,
/// drift-free repeat arithmetic and the missed-tick policy.
///
/// Part of the surface for backend implementors (`@_spi(BackendImplementation) import
/// TimerKit`; see the "Writing a backend" article): backends create one, `attach` their
/// driver, and call `fireDueTimers()` on their loop when woken. Handlers of one scheduler
/// run serially on that loop. Users of backends never see it.
///
/// ## The rule that keeps it from hanging
///
/// No user code runs while `mutex` is held, and neither does the release of anything user
/// code owns: handler closures and their captures, targets, observers, ticks, and timer
/// handles (whose last release frees the closures they hold). The fire path takes a due
/// timer out under the lock, copies what the call needs, unlocks, makes the call, and lets
/// those copies go before it locks again; timers and closures the lock-holding code lets go
/// of are collected and released after unlocking (as SwiftNIO's `runOneLoopTick` and
/// tokio's `process_at_sharded_time` do). A debug build's mutex is error-checking, so a
/// breach that re-enters the lock crashes with a message instead of hanging.
@_spi(BackendImplementation) public final class TimerScheduler: @unchecked Sendable {
    // @unchecked: every mutable stored property is guarded by `mutex`; `shutDownFlag` is atomic.

    /// The backend's short name ("dispatch", "epoll", "manual", ...).
    public let backendName: String
    /// The registry every timer of this scheduler is registered in.
    public let registry: TimerRegistry
    /// The clock deadlines are read on.
    public let clock: SchedulerClock
    /// Where tasks started for this scheduler's timers run (`scheduleAsync`), if not on the
    /// global executor: a `ManualBackend`'s, so that tests can wait for them.
    public let taskExecutor: (any TaskExecutor)?

    let mutex = PThreadMutex()
    /// The registry slots this scheduler's timers occupy (guarded by the registry's lock).
    let registryShard: RegistryShard
    /// Broadcast when a handler call or a `fireDueTimers` call ends, to `cancelAndWait` and
    /// `shutdown` callers waiting for one.
    private let firingDone = PThreadCondition()
    // The properties below are only touched while holding `mutex`, which already makes
    // every access exclusive; `@exclusivity(unchecked)` drops the runtime's redundant
    // per-access bookkeeping (about a fifth of the schedule/cancel cost when measured).
    @exclusivity(unchecked) private var queue = TimerQueue<TimerHandle>()
    @exclusivity(unchecked) private weak var driver: (any TimerDriver)?
    /// The key the driver is armed for; `.max` when it is not armed.
    @exclusivity(unchecked) private var armedKey: UInt64 = .max
    /// Queue entries that no longer stand for their timer (it was cancelled, suspended, or
    /// moved earlier). Cancel only marks: a dead entry leaves when it reaches the top, or is
    /// swept a few at a time once they near the number of live ones (`sweepDeadLocked`),
    /// so no operation pays for a pass over the whole queue.
    @exclusivity(unchecked) private var deadInQueue = 0
    /// Timers whose dead entries left the queue under the lock: released after it, by the
    /// operation that swept them. Kept between operations so that sweeping allocates nothing.
    @exclusivity(unchecked) private var sweptTimers: [TimerHandle] = []
    @exclusivity(unchecked) private var nextSequence: UInt64 = 0
    /// Draws the jitter of timers scheduled with one (SplitMix64); seeded at random unless a
    /// test seeds it (`seedJitter`).
    @exclusivity(unchecked) private var jitterState = UInt64.random(in: .min ... .max)
    @exclusivity(unchecked) private var isShutDown = false
    @exclusivity(unchecked) private var loopFailure: TimerError?
    /// Mirrors `isShutDown` for the lock-free check at the top of `schedule`.
    private let shutDownFlag = Atomic<Bool>(false)
    /// `fireDueTimers` calls under way (more than one only when a handler runs its loop
    /// nested): `shutdown` waits until it is 0.
    @exclusivity(unchecked) private var firingDepth = 0
    /// The thread running `fireDueTimers`, valid while `firingDepth > 0`.
    @exclusivity(unchecked) private var firingThread = pthread_t()
    @exclusivity(unchecked) private var waiters = 0
    @exclusivity(unchecked) private var nextWaiterToken: UInt64 = 0
    /// Jobs of tasks that prefer this scheduler as their executor (`TimerBackend.taskExecutor`),
    /// waiting to run on the loop after its next batch of handlers.
    @exclusivity(unchecked) private var jobs: [UnownedJob] = []
    /// Empty buffers the fire loop reuses, so that a fire allocates nothing in steady state:
    /// a batch of jobs (it swaps places with `jobs`) and a list of timers to let go of. Taken
    /// under the lock by the outermost `fireDueTimers` and put back, empty, under the lock.
    @exclusivity(unchecked) private var spareJobs: [UnownedJob] = []
    @exclusivity(unchecked) private var spareReleased: [Released] = []

    private static let horizonNanoseconds = MonotonicInstant.horizon.nanoseconds

    /// Creates a scheduler for the backend named `backendName`, registering into `registry`,
    /// reading deadlines on `clock`, and starting timers' tasks on `taskExecutor` (nil: the
    /// global executor).
    public init(backendName: String, registry: TimerRegistry, clock: SchedulerClock = .monotonic, taskExecutor: (any TaskExecutor)? = nil) {
        self.backendName = backendName
        self.registryShard = RegistryShard(backendName: backendName)
        self.registry = registry
        self.clock = clock
        self.taskExecutor = taskExecutor
    }

    deinit { registry.retire(registryShard) }

    /// Connects the backend's driver. The scheduler holds it weakly (the backend owns the scheduler).
    public func attach(_ driver: any TimerDriver) {
        mutex.withLock { self.driver = driver }
    }

    /// The scheduler's current time.
    @inline(__always)
    public func now() -> MonotonicInstant { clock.now() }

    /// Live timers waiting in the queue (not suspended ones).
    package var pendingCount: Int { mutex.withLock { queue.count - deadInQueue } }

    /// Dead entries still in the queue (`deadInQueue`), for tests of the bound on them.
    package var deadEntryCount: Int { mutex.withLock { deadInQueue } }

    /// Traps if the queue's order or its dead-entry count is wrong. O(n): tests only.
    package func checkQueueInvariants() {
        mutex.withLock {
            queue.checkInvariants()
            let live = queue.count(where: { !isDeadLocked($0) })
            precondition(live == queue.count - deadInQueue, "TimerScheduler: \(live) live entries, \(queue.count - deadInQueue) counted")
        }
    }

    /// Why the backend's loop stopped, if it stopped on an error (an `epoll_wait` failure, a
    /// wake-up that could not be re-armed from inside the loop). The scheduler then shut
    /// down and `schedule` throws `TimerError.loopFailed` carrying this. Nil otherwise.
    public var failure: TimerError? { mutex.withLock { loopFailure } }

    /// Whether the calling thread is inside this scheduler's `fireDueTimers`: running one of
    /// its handlers, or a task on its loop (`TimerBackend.taskExecutor`).
    public var isOnLoop: Bool { mutex.withLock { isFiringThreadLocked } }

    /// Whether the scheduler has shut down (by `shutdown()` or a loop failure).
    public var hasShutDown: Bool { mutex.withLock { isShutDown } }

    /// What `schedule` throws now that the scheduler has shut down; nil while it runs.
    var shutDownError: TimerError? { mutex.withLock { isShutDown ? shutDownErrorLocked() : nil } }

    /// `hasShutDown` without the lock, for the registry (which must not take this lock).
    var hasBegunShutdown: Bool { shutDownFlag.load(ordering: .relaxed) }

    private func shutDownErrorLocked() -> TimerError {
        loopFailure.map { .loopFailed(backend: backendName, cause: $0) } ?? .backendShutDown(backend: backendName)
    }

    // MARK: Scheduling

    /// Registers and queues a timer. `startSuspended` registers it suspended (a `ticks`
    /// sequence resumes it when its consumer asks); `runsTasks` marks a `scheduleAsync` timer.
    func schedule(
        _ schedule: TimerSchedule, name: String?, tolerance: Duration, policy: MissedTickPolicy,
        target: WeakReference?, startSuspended: Bool = false, runsTasks: Bool = false,
        helper: AnyObject? = nil, handler: @escaping @Sendable (Tick) -> Void
    ) throws(TimerError) -> TimerHandle {
        if tolerance < .zero { throw .negativeDuration(parameter: "tolerance", value: tolerance) }
        if let name { try TimerRegistry.validate(name: name) }
        if shutDownFlag.load(ordering: .relaxed) { throw mutex.withLock { shutDownErrorLocked() } }
        let resolved = try schedule.resolve(now: clock.now())
        var extras: TimerExtras?
        if tolerance > .zero || runsTasks || helper != nil || resolved.jitterNanoseconds > 0 {
            let more = TimerExtras()
            more.jitter = resolved.jitterNanoseconds
            more.tolerance = UInt64(tolerance.saturatingNanoseconds)
            more.runsTasks = runsTasks
            more.helper = helper
            more.parksAfterLastCall = helper != nil
            extras = more
        }
        let timer = try registry.register(name: name, in: registryShard) { id in
            TimerHandle(
                id: id, name: name, scheduler: self, resolved: resolved, policy: policy,
                extras: extras, target: target, handler: handler)
        }
        var refusal: TimerError?
        mutex.lock()
        if isShutDown {
            refusal = shutDownErrorLocked()
        } else if timer.state == .scheduled {  // a registry-wide cancel may have ended it already
            drawJitterLocked(timer)
            if startSuspended {
                timer.state = .suspended
            } else {
                do throws(TimerError) { try queueLocked(timer) } catch { refusal = error }
            }
        }
        mutex.unlock()
        if let refusal {
            timer.cancel()  // also takes it out of the registry
            throw refusal
        }
        return timer
    }

    /// Puts a scheduled timer in deadline order and arms the driver if it is now the
    /// earliest. `previousKey` is the key it waited for until now, when it still has a live
    /// entry (a reschedule): a later key then leaves that entry where it is, to be re-filed
    /// when it reaches the top (an idle timeout moved on every read costs no sift). An
    /// earlier key gives it a new entry and the old one dies. If the driver refuses, the timer
    /// is left unqueued and the error is rethrown.
    private func queueLocked(_ timer: TimerHandle, previousKey: UInt64? = nil) throws(TimerError) {
        let key = RepeatRule.latestFireTime(timer)
        nextSequence &+= 1
        timer.orderSequence = nextSequence
        if timer.entrySequence != 0 {
            if let previousKey, key >= previousKey { return }
            deadInQueue += 1
        }
        queue.insert(timer, key: key, sequence: nextSequence)
        timer.entrySequence = nextSequence
        // The earliest entry, not only a new earliest: after a refused wake-up the driver may
        // be armed later than an entry already queued (then it wakes once more than needed).
        let earliest = queue.topKey ?? key
        guard earliest < armedKey, earliest < Self.horizonNanoseconds, let driver else { return }
        do throws(TimerError) {
            try driver.wake(at: MonotonicInstant(nanoseconds: earliest))
            armedKey = earliest
        } catch {
            unqueueLocked(timer)
            throw error
        }
    }

    /// Whether `entry` no longer stands for its timer.
    @inline(__always)
    private func isDeadLocked(_ entry: TimerQueue<TimerHandle>.Entry) -> Bool {
        entry.element._withUnsafeGuaranteedRef { $0.entrySequence != entry.sequence }
    }

    /// Arms the driver for the earliest key, or disarms it when nothing can come due.
    private func rearmLocked() throws(TimerError) {
        let wanted = queue.topKey.flatMap { $0 < Self.horizonNanoseconds ? $0 : nil } ?? .max
        guard wanted != armedKey, let driver else { return }
        try driver.wake(at: wanted == .max ? .distantFuture : MonotonicInstant(nanoseconds: wanted))
        armedKey = wanted
    }

    /// Kills `timer`'s entry, if it has one: it leaves the queue later (at the top, or swept).
    @inline(__always)
    private func unqueueLocked(_ timer: TimerHandle) {
        guard timer.entrySequence != 0 else { return }
        timer.entrySequence = 0
        deadInQueue += 1
    }

    /// Called when `timer` stops being scheduled. Its entry stays in the queue (touching the
    /// queue here would cost several cache misses per cancel with many timers) unless it is
    /// the earliest, or dead entries near the number of live ones: then a few are swept. Timers the
    /// queue lets go of go to `sweptTimers`, for the caller to release after unlocking
    /// (`takeSweptLocked`).
    private func retireLocked(_ timer: TimerHandle) {
        let sequence = timer.entrySequence
        guard sequence != 0 else { return }
        unqueueLocked(timer)
        if queue.top?.sequence == sequence {
            dropDeadTopsLocked()
        } else {
            sweepDeadLocked()
        }
        // The native wake-up stays armed for the old earliest deadline: the loop wakes once,
        // finds nothing due and re-arms. Cheaper than a re-arm per cancel when timers are
        // cancelled in deadline order (timeouts). Only an empty queue disarms at once, and if
        // that fails the loop wakes once for nothing.
        // Jobs waiting for the loop keep their wake-up.
        if queue.isEmpty, armedKey != .max, jobs.isEmpty {
            armedKey = .max
            try? driver?.wake(at: .distantFuture)
        }
    }

    /// Once dead entries pass three quarters of the live ones, each new dead entry pays for
    /// sweeping up to two (looking at no more than 16 entries): dead entries then fall back
    /// faster than they come, so they never outnumber the live ones, and no call does more
    /// than a bounded bit. Below that, a cancel touches nothing but its own timer.
    private func sweepDeadLocked() {
        guard deadInQueue * 4 > (queue.count - deadInQueue) * 3 else { return }
        deadInQueue -= queue.sweep(budget: 16, limit: 2, isDead: isDeadLocked, into: &sweptTimers)
    }

    /// Drops the dead entries at the top into `sweptTimers`, so the earliest entry is live.
    private func dropDeadTopsLocked() {
        while let top = queue.top, isDeadLocked(top), let timer = queue.popTop() {
            deadInQueue -= 1
            sweptTimers.append(timer)
        }
    }

    /// The timers swept under the lock, handed to the caller to release after unlocking; the
    /// buffer comes back through `returnSwept` so that its storage is reused.
    @inline(__always)
    private func takeSweptLocked() -> [TimerHandle] {
        guard !sweptTimers.isEmpty else { return [] }
        var taken: [TimerHandle] = []
        swap(&taken, &sweptTimers)
        return taken
    }

    /// Releases `swept` (outside the lock) and gives its storage back for the next sweep.
    private func releaseSwept(_ swept: consuming [TimerHandle]) {
        guard swept.capacity > 0 else { return }
        swept.removeAll(keepingCapacity: true)
        mutex.lock()
        if sweptTimers.capacity < swept.capacity && sweptTimers.isEmpty { swap(&sweptTimers, &swept) }
        mutex.unlock()
    }

    // MARK: State machine

    /// Carries a closure into `withExtendedLifetime` by address: passed bare, the generic
    /// parameter boxes the closure (one heap allocation per cancel, measured).
    private struct HandlerLifetime {
        let handler: @Sendable (Tick) -> Void
    }

    /// What an ended timer's handler becomes: one shared closure, so ending allocates nothing.
    static let endedHandler: @Sendable (Tick) -> Void = { _ in }

    /// Draws the jitter of `timer`'s next fire, if it has one.
    private func drawJitterLocked(_ timer: TimerHandle) {
        guard let extras = timer.extras else { return }
        guard extras.jitter > 0 else {
            extras.jitterOffset = 0
            return
        }
        // SplitMix64: a few instructions per draw, and repeatable from a seed.
        jitterState &+= 0x9E37_79B9_7F4A_7C15
        var z = jitterState
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        extras.jitterOffset = z % (extras.jitter + 1)
    }

    /// Makes the jitter draws of this scheduler's timers repeatable from `seed`.
    func seedJitter(_ seed: UInt64) { mutex.withLock { jitterState = seed } }

    /// Why `timer` ended, or nil while it is live.
    func endReasonLocked(_ timer: TimerHandle) -> TimerEndReason? {
        switch timer.endCause {
        case .live: nil
        case .completed: .completed
        case .cancelled: .cancelled
        case .cancelledByName: .cancelledByName
        case .cancelledByCancelAll: .cancelledByCancelAll
        case .targetReleased: .targetReleased
        case .shutDown: loopFailure.map { .loopFailed($0) } ?? .backendShutDown
        }
    }

    func cancel(_ timer: TimerHandle, because cause: EndCause) {
        // Explicit lock/unlock rather than a closure returning (handler, dropped): that
        // plumbing cost two heap allocations per cancel (seen with a malloc breakpoint).
        mutex.lock()
        guard !timer.state.hasEnded else {
            mutex.unlock()
            return
        }
        timer.state = .cancelled
        timer.endCause = cause
        retireLocked(timer)
        let swept = takeSweptLocked()
        // Drop the handler now: a closure that captured its own handle would otherwise keep
        // the timer alive forever. It is released after the lock, because its captures'
        // deinits may call back into TimerKit.
        let handler = HandlerLifetime(handler: timer.handler)
        timer.handler = Self.endedHandler
        let observers = dropObserversLocked(timer)
        let endWaiters = takeEndWaitersLocked(timer)
        let task = timer.extras?.runningTask
        timer.extras?.runningTask = nil
        mutex.unlock()
        withExtendedLifetime(handler) {}
        withExtendedLifetime(observers) {}
        releaseSwept(swept)
        task?.cancel()
        registry.remove(timer)
        for waiter in endWaiters { waiter.action() }
    }

    /// Whether `timer` has ended and nothing of it runs any more: no handler call, no task.
    private func hasEndedAndIdleLocked(_ timer: TimerHandle) -> Bool {
        timer.state.hasEnded && timer.activeCalls == 0 && (timer.extras?.tasksRunning ?? 0) == 0
    }

    /// The `whenEnded` actions of a timer that has ended and gone idle, to run after unlocking.
    private func takeEndWaitersLocked(_ timer: TimerHandle) -> [EndWaiter] {
        guard let extras = timer.extras, !extras.endWaiters.isEmpty, hasEndedAndIdleLocked(timer) else { return [] }
        defer { extras.endWaiters = [] }
        return extras.endWaiters
    }

    /// Runs `action` once `timer` has ended (cancelled, finished, or shut down with its
    /// backend) and no call of its handler, nor a task it started, is running: at once if that
    /// is so already. `action` runs outside the lock, on the thread that completed the
    /// condition; it must be quick (a continuation's resume). Returns a token for
    /// `removeEndWaiter(_:of:)`, or nil when `action` has run already.
    @discardableResult
    func whenEnded(_ timer: TimerHandle, _ action: @escaping @Sendable () -> Void) -> UInt64? {
        mutex.lock()
        guard !hasEndedAndIdleLocked(timer) else {
            mutex.unlock()
            action()
            return nil
        }
        let extras = timer.extras ?? TimerExtras()
        nextWaiterToken &+= 1
        let token = nextWaiterToken
        extras.endWaiters.append(EndWaiter(token: token, action: action))
        timer.extras = extras
        mutex.unlock()
        return token
    }

    /// Takes back the action `whenEnded` returned `token` for, if it has not run (a waiter
    /// that gave up: its task was cancelled). It is released after unlocking.
    func removeEndWaiter(_ token: UInt64, of timer: TimerHandle) {
        mutex.lock()
        var removed: [EndWaiter] = []
        if let extras = timer.extras, let index = extras.endWaiters.firstIndex(where: { $0.token == token }) {
            removed.append(extras.endWaiters.remove(at: index))
        }
        mutex.unlock()
        withExtendedLifetime(removed) {}
    }

    // MARK: Tasks (scheduleAsync)

    /// Called by a task timer's handler, during its call: a task of it is starting.
    func taskStarted(_ timer: TimerHandle, _ task: Task<Void, Never>) {
        mutex.lock()
        let ended = timer.state.hasEnded
        // A task that has already returned is not kept (`taskReturned` ran first).
        if !ended, let extras = timer.extras, extras.tasksRunning > 0 { extras.runningTask = task }
        mutex.unlock()
        if ended { task.cancel() }
    }

    /// Called when a task of `timer` has returned: a repeat is queued again a full interval
    /// later (fixed delay), a one-shot or a finished count ends the timer.
    func taskReturned(_ timer: TimerHandle) {
        mutex.lock()
        guard let extras = timer.extras else {
            mutex.unlock()
            return
        }
        extras.tasksRunning -= 1
        extras.runningTask = nil
        var finishedHandler: HandlerLifetime?
        var observers: [TimerObserver] = []
        var failure: TimerError?
        if isShutDown {
            // Shutdown has ended it, or is about to.
        } else if isLastCallOverLocked(timer) && !extras.rescheduledDuringTask {
            timer.state = .finished
            timer.endCause = .completed
            finishedHandler = HandlerLifetime(handler: timer.handler)
            timer.handler = Self.endedHandler
            observers = dropObserversLocked(timer)
        } else if timer.state == .scheduled && timer.entrySequence == 0 {
            if !extras.rescheduledDuringTask { timer.deadline = clock.now().nanoseconds.saturatingAdd(timer.interval) }
            do throws(TimerError) { try queueLocked(timer) } catch { failure = error }
        }
        extras.rescheduledDuringTask = false
        let endWaiters = takeEndWaitersLocked(timer)
        let stopped = failure.map { beginShutdownLocked(failure: $0) } ?? ([], [])
        mutex.unlock()
        withExtendedLifetime(finishedHandler) {}
        withExtendedLifetime(observers) {}
        if finishedHandler != nil { registry.remove(timer) }
        if failure != nil { finishShutdown(stopped) }
        for waiter in endWaiters { waiter.action() }
    }

    /// An ended timer never fires again: its observers go too (released by the caller after
    /// unlocking), so that a handle kept somewhere no longer keeps their captures alive.
    private func dropObserversLocked(_ timer: TimerHandle) -> [TimerObserver] {
        guard let extras = timer.extras, !extras.observers.isEmpty else { return [] }
        defer { extras.observers = [] }
        return extras.observers
    }

    /// The debouncer or throttler that `timer` belongs to, if any.
    func helper(of timer: TimerHandle) -> AnyObject? {
        mutex.withLock { timer.extras?.helper }
    }

    /// Returns once no call of `timer`'s handler is running, or at once when the caller is
    /// the thread running it (a handler waiting for itself would never return).
    func waitUntilIdle(_ timer: TimerHandle) {
        mutex.lock()
        while timer.activeCalls > 0 && !isFiringThreadLocked { waitLocked() }
        mutex.unlock()
    }

    private var isFiringThreadLocked: Bool { firingDepth > 0 && pthread_equal(firingThread, pthread_self()) != 0 }

    private func waitLocked() {
        waiters += 1
        firingDone.wait(mutex)
        waiters -= 1
    }

    func suspend(_ timer: TimerHandle) throws(TimerError) {
        let swept = try mutex.withLock { () throws(TimerError) -> [TimerHandle] in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            guard timer.state == .scheduled else { return [] }
            timer.state = .suspended
            retireLocked(timer)
            return takeSweptLocked()
        }
        releaseSwept(swept)
    }

    func resume(_ timer: TimerHandle) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            if isShutDown { throw shutDownErrorLocked() }
            guard timer.state == .suspended else { return }
            timer.state = .scheduled
            // A handler that suspends and resumes its own timer is re-queued when it returns,
            // and a task timer when its task does.
            guard timer.activeCalls == 0 && (timer.extras?.tasksRunning ?? 0) == 0 else { return }
            do throws(TimerError) { try queueLocked(timer) } catch {
                timer.state = .suspended  // left as it was, so the caller may retry
                throw error
            }
        }
    }

    func reschedule(_ timer: TimerHandle, _ schedule: TimerSchedule) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            if isShutDown { throw shutDownErrorLocked() }
            let resolved = try schedule.resolve(now: clock.now())
            let previousKey = timer.entrySequence != 0 ? RepeatRule.latestFireTime(timer) : nil
            timer.deadline = resolved.firstDeadline
            timer.interval = resolved.intervalNanoseconds
            timer.remaining = resolved.remaining
            if resolved.jitterNanoseconds > 0 || timer.extras?.jitter ?? 0 > 0 {
                let extras = timer.extras ?? TimerExtras()
                extras.jitter = resolved.jitterNanoseconds
                timer.extras = extras
                drawJitterLocked(timer)
            }
            if let extras = timer.extras, extras.tasksRunning > 0 {
                // A task of it is running: the new schedule starts when the task returns.
                extras.rescheduledDuringTask = true
                unqueueLocked(timer)
            } else if timer.state == .scheduled {
                // Inside its own handler too: the fire loop then sees it queued and leaves it be.
                do throws(TimerError) { try queueLocked(timer, previousKey: previousKey) } catch {
                    timer.state = .suspended  // keeps the new schedule; resume() retries the arm
                    throw error
                }
            }
            // A suspended timer has no entry: its place is found again on resume.
        }
    }

    func addObserver(_ observer: TimerObserver, to timer: TimerHandle) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            let extras = timer.extras ?? TimerExtras()
            extras.observers.append(observer)
            timer.extras = extras
        }
    }

    // MARK: Firing

    /// One handler call, prepared under the lock and made outside it. It holds its own
    /// references to everything the call uses (a concurrent cancel may drop the timer's).
    private struct Call {
        let handler: @Sendable (Tick) -> Void
        let tick: Tick
        let observers: [TimerObserver]
        let target: WeakReference?
    }

    /// A timer the fire loop lets go of, released after the lock: the queue's reference to
    /// it and, for one that just finished, its handler. It leaves the registry then too.
    private struct Released {
        let timer: TimerHandle
        var handler: (@Sendable (Tick) -> Void)? = nil
        var observers: [TimerObserver] = []
        var endWaiters: [EndWaiter] = []
        var leavesRegistry = false
    }

    /// The most handlers one `fireDueTimers` call runs (SwiftNIO runs at most 4096 scheduled
    /// tasks per loop tick for the same reason): with more due, it re-arms the driver for at
    /// once and returns, so the host loop serves its I/O between batches of a burst.
    package static let maxFiresPerCall = 4096

    /// Runs the handlers that are due, in deadline order (then scheduling order), at most
    /// 4096 of them, then re-arms the driver for the next one (at once, if more are due).
    /// Backends call this on their loop when woken.
    public func fireDueTimers() {
        mutex.lock()
        guard !isShutDown, driver != nil else {
            mutex.unlock()
            return
        }
        armedKey = .max  // the wake-up that brought us here is used up
        if firingDepth == 0 { firingThread = pthread_self() }
        firingDepth += 1
        let now = clock.now().nanoseconds
        var released: [Released] = []
        swap(&released, &spareReleased)
        var failure: TimerError?
        var fired = 0
        while fired < Self.maxFiresPerCall, !isShutDown, let timer = popDueLocked(now: now, into: &released) {
            fired += 1
            let call = beginCallLocked(timer)
            mutex.unlock()
            // `consume`: without it a debug build keeps `call` (and the handler, tick and
            // target it holds) alive to the end of this scope, after the lock below.
            let called = perform(consume call)
            mutex.lock()
            endCallLocked(timer, called: called)
            if timer.extras?.runsTasks == true && called {
                // Its task decides what follows, when it returns (`taskReturned`). If it has
                // returned already, during this call, the timer may have ended with this call
                // the last thing running: then `ended` waits no longer.
                let endWaiters = takeEndWaitersLocked(timer)
                if !endWaiters.isEmpty { released.append(Released(timer: timer, endWaiters: endWaiters)) }
            } else if isLastCallOverLocked(timer) && timer.extras?.parksAfterLastCall == true {
                // A debouncer's or throttler's timer waits, suspended, for its next call.
                timer.state = .suspended
            } else if isLastCallOverLocked(timer) {
                timer.state = .finished
                timer.endCause = .completed
                let observers = dropObserversLocked(timer)
                released.append(
                    Released(
                        timer: timer, handler: timer.handler, observers: observers,
                        endWaiters: takeEndWaitersLocked(timer), leavesRegistry: true))
                timer.handler = Self.endedHandler
            } else if timer.state == .scheduled && timer.entrySequence == 0 && !isShutDown {
                do throws(TimerError) { try queueLocked(timer) } catch {
                    failure = error
                    released.append(Released(timer: timer))
                    break
                }
            } else if timer.entrySequence == 0 {
                // Cancelled or suspended while its handler ran (the queue no longer holds it),
                // or the backend began shutting down meanwhile: nothing is queued, and the
                // driver is not woken, after shutdown has begun; the shutdown cancels it.
                released.append(Released(timer: timer, endWaiters: takeEndWaitersLocked(timer)))
            }
        }
        var stopped: (timers: [TimerHandle], jobs: [UnownedJob]) = ([], [])
        if !isShutDown && failure == nil {
            while let top = queue.top, isDeadLocked(top), let timer = queue.popTop() {
                deadInQueue -= 1
                released.append(Released(timer: timer))
            }
            do throws(TimerError) { try rearmLocked() } catch { failure = error }
        }
        if let failure { stopped = beginShutdownLocked(failure: failure) }
        // Jobs queued so far run after this batch of handlers; the ones they queue, at the
        // next wake-up, so that a task that keeps yielding cannot hold the timers back.
        var batch: [UnownedJob] = []
        if !isShutDown && !jobs.isEmpty {
            swap(&batch, &spareJobs)
            swap(&batch, &jobs)
        }
        // Work left for after the lock keeps this call "firing" until it is done, so that
        // `shutdown` does not return while finished timers are still leaving the registry.
        let hasWrapUp = !released.isEmpty || failure != nil || !batch.isEmpty
        if !hasWrapUp {
            swap(&released, &spareReleased)  // empty: nothing is released here
            endFiringLocked()
        }
        mutex.unlock()
        guard hasWrapUp else { return }
        for item in released where item.leavesRegistry { registry.remove(item.timer) }
        for item in released { for waiter in item.endWaiters { waiter.action() } }
        released.removeAll(keepingCapacity: true)
        if failure != nil { finishShutdown(stopped) }
        if !batch.isEmpty {
            let executor = asUnownedTaskExecutor()
            for job in batch { job.runSynchronously(on: executor) }
            batch.removeAll(keepingCapacity: true)
        }
        mutex.lock()
        if spareReleased.capacity < released.capacity { swap(&released, &spareReleased) }
        if spareJobs.capacity < batch.capacity { swap(&batch, &spareJobs) }
        // Jobs queued while the batch ran (a task's next step) need a wake-up of their own.
        let stranded = wakeForJobsLocked()
        endFiringLocked()
        mutex.unlock()
        for job in stranded { globalConcurrentExecutor.enqueue(job) }
    }

    private func endFiringLocked() {
        firingDepth -= 1
        if waiters > 0 { firingDone.broadcast() }
    }

    /// Pops the next due, scheduled timer; dead entries met on the way go to `released`, and
    /// entries of timers reset to a later deadline are re-filed at their new place.
    private func popDueLocked(now: UInt64, into released: inout [Released]) -> TimerHandle? {
        while let top = queue.top, top.key < Self.horizonNanoseconds {
            let timer = top.element.takeUnretainedValue()
            if timer.entrySequence != top.sequence {
                deadInQueue -= 1
                if let timer = queue.popTop() { released.append(Released(timer: timer)) }
                continue
            }
            if timer.orderSequence != top.sequence {
                // Reset later while it waited: it takes its new place now, in the order of its reset.
                let key = RepeatRule.latestFireTime(timer)
                queue.refileTop(key: key, sequence: timer.orderSequence)
                timer.entrySequence = timer.orderSequence
                continue
            }
            guard top.key <= now || RepeatRule.dueTime(timer) <= now else { return nil }
            timer.entrySequence = 0
            return queue.popTop()
        }
        return nil
    }

    /// Advances `timer` past this tick under the lock and returns the call to make.
    private func beginCallLocked(_ timer: TimerHandle) -> Call {
        let index = timer.fires
        timer.fires += 1
        if timer.remaining > 0 { timer.remaining -= 1 }
        let actual = clock.now()
        let missed = RepeatRule.catchUp(timer, now: actual.nanoseconds)
        let scheduled = RepeatRule.dueTime(timer)
        let interval: Duration? = timer.interval == 0 ? nil : .nanoseconds(Int64(clamping: timer.interval))
        if timer.interval > 0 {
            timer.deadline = timer.deadline.saturatingAdd(timer.interval)
            drawJitterLocked(timer)
        }
        timer.activeCalls += 1
        if let extras = timer.extras, extras.runsTasks { extras.tasksRunning += 1 }
        let tick = Tick(
            index: index, scheduled: MonotonicInstant(nanoseconds: scheduled), actual: actual,
            missed: missed, interval: interval, timer: timer)
        return Call(handler: timer.handler, tick: tick, observers: timer.extras?.observers ?? [], target: timer.target)
    }

    /// Whether `timer` has made its last call (a one-shot's, a count's last) and so finishes
    /// now, whatever that call did to it — suspended it included — unless it rescheduled it
    /// (which gives it calls again) or ended it.
    private func isLastCallOverLocked(_ timer: TimerHandle) -> Bool {
        !timer.state.hasEnded && timer.remaining == 0 && timer.entrySequence == 0
    }

    private func endCallLocked(_ timer: TimerHandle, called: Bool) {
        if !called {
            // The target was gone, so the handler never ran: the tick does not count.
            timer.fires -= 1
            if timer.remaining >= 0 { timer.remaining += 1 }
            if let extras = timer.extras, extras.runsTasks { extras.tasksRunning -= 1 }
        }
        timer.activeCalls -= 1
        if waiters > 0 { firingDone.broadcast() }
    }

    /// Makes one handler call, outside the lock, and says whether it did. Everything `call`
    /// holds is released when this returns, still outside the lock.
    private func perform(_ call: consuming Call) -> Bool {
        guard let target = call.target else {
            invoke(call)
            return true
        }
        // The proxy's job, done at fire time: a target that is gone ends its timer. The
        // strong reference loaded here keeps the target alive for the call and is dropped
        // before the lock is taken again.
        guard let object = target.object else {
            call.tick.timer.cancel(because: .targetReleased)
            return false
        }
        withExtendedLifetime(object) { invoke(call) }
        return true
    }

    private func invoke(_ call: borrowing Call) {
        let registryObservers = registry.currentObservers()
        if registryObservers.isEmpty && call.observers.isEmpty {
            call.handler(call.tick)
            return
        }
        for observer in registryObservers { observer.willFire?(call.tick) }
        for observer in call.observers { observer.willFire?(call.tick) }
        let began = clock.now()
        call.handler(call.tick)
        let elapsed = clock.now() - began
        for observer in call.observers { observer.didFire?(call.tick, elapsed) }
        for observer in registryObservers { observer.didFire?(call.tick, elapsed) }
    }

    // MARK: Shutdown

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
    private func beginShutdownLocked(failure: TimerError?) -> (timers: [TimerHandle], jobs: [UnownedJob]) {
        guard !isShutDown else { return ([], []) }
        isShutDown = true
        loopFailure = failure
        shutDownFlag.store(true, ordering: .relaxed)
        armedKey = .max
        deadInQueue = 0
        defer { jobs = [] }
        let queued = queue.removeAll()
        for timer in queued { timer.entrySequence = 0 }
        return (queued, jobs)
    }

    /// Ends every timer of this scheduler together: one pass under the registry's lock lists
    /// them (this scheduler's slots only), one under this lock cancels them, and one under the
    /// registry's lock takes them out; what they held is released after the locks.
    private func finishShutdown(_ queued: (timers: [TimerHandle], jobs: [UnownedJob])) {
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
            mutex.unlock()
            for task in tasks { task.cancel() }
            registry.remove(ended)
            for item in released { for waiter in item.endWaiters { waiter.action() } }
            withExtendedLifetime(released) {}
        }
        // Ended timers waiting in the registry's removal batch hold this scheduler, which
        // holds the registry: let them go now, or a dropped registry would never be freed.
        registry.retire(registryShard)
    }
}

// MARK: Tasks on the loop

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
    private func wakeForJobsLocked() -> [UnownedJob] {
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
