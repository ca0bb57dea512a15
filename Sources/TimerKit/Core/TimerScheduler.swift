import Glibc
import Synchronization

/// The core of every backend: a queue of deadlines per clock, the timer state machine,
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
/// code owns: handler closures and their captures, targets, observers, ticks, and the
/// scheduler itself (its link's reference, let go of with the last live timer). Every critical
/// section collects what it lets go of and what it owes (end waiters, events, tasks to cancel)
/// in an `AfterUnlock`, which runs after unlocking, as SwiftNIO's `runOneLoopTick` and tokio's
/// `process_at_sharded_time` do. Timers need no carrying: `endLocked` (and the plain cancels'
/// inlined copy of it) takes everything of the user's out of a timer that ends, so the last
/// reference to an ended timer may go anywhere, and a live timer is also held by the registry.
/// A debug build's mutex is error-checking, so a breach that re-enters the lock crashes with a
/// message instead of hanging.
///
/// ## Where each part lives
///
/// One type under one lock, in files that each answer one question: this one holds the
/// state; `+Queue` where each timer waits (the queues themselves are `ClockQueues`, plain
/// data); `+Clocks` what the continuous and wall clocks read; `+Ending` the one place a timer
/// ends; `+Control` what callers do to a timer; `+Firing` the fire call; `+Tasks` and
/// `+Executor` tasks started by timers and tasks run on the loop; `+Lifecycle` shutdown. Its
/// members are internal so that those files share them; only they touch them.
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

    let mutex = FutexLock()
    /// What the registry and the clock watcher hold of this scheduler: this scheduler while it
    /// has live timers (`SchedulerLink`).
    let link = SchedulerLink()
    /// Tells this scheduler's keys from another's (`TimerKey`): never reused in a process.
    let serial: UInt32
    /// Broadcast when a handler call, a `fireDueTimers` call or a shutdown ends, to
    /// `cancelAndWait` and `shutdown` callers waiting for one.
    let firingDone = FutexCondition()
    // The properties below are only touched while holding `mutex`, which already makes
    // every access exclusive; `@exclusivity(unchecked)` drops the runtime's redundant
    // per-access bookkeeping (about a fifth of the schedule/cancel cost when measured).
    @exclusivity(unchecked) var queues = ClockQueues()
    /// The timers: records in slots (`TimerStore`), which the queues' entries name.
    @exclusivity(unchecked) var store = TimerStore()
    /// The types of the callbacks of timers scheduled with a key, by the kind in their records.
    let callbackKinds = CallbackKinds()
    /// The driver, which the scheduler owns (`attach(owning:)`): not its backend (a driver that
    /// holds this scheduler makes a cycle, which the shutdown ends as it lets the driver go).
    /// Held +1 in a box whose `let` is borrowed for each wake-up request: no retain or release
    /// per request (a loaded optional reference costs one of each; a weak reference's target
    /// takes the runtime's slow path, its side table, about 250 instructions per request). It
    /// goes at shutdown, after which nothing is armed, and is released after unlocking.
    @exclusivity(unchecked) var ownedDriver: Unmanaged<OwnedDriver>?
    /// Whether a driver was attached (read without loading it).
    @exclusivity(unchecked) var isAttached = false
    /// The key the driver is armed for; `.max` when it is not armed.
    @exclusivity(unchecked) var armedKey: UInt64 = .max
    @exclusivity(unchecked) var nextSequence: UInt64 = 0
    /// Draws the jitter of timers scheduled with one (SplitMix64); seeded at random unless a
    /// test seeds it (`seedJitter`).
    @exclusivity(unchecked) var jitterState = UInt64.random(in: .min ... .max)
    /// Where the shutdown is (`ShutdownPhase`): `running` until `shutdown()` or `fail(with:)`.
    /// A byte, as the flag it replaced: read on every schedule and fire.
    @exclusivity(unchecked) var shutdownPhase = ShutdownPhase.running
    /// The thread running the drain, while `shutdownPhase` is `.draining`.
    @exclusivity(unchecked) var drainingThread = pthread_t()
    /// What a test runs between two slices of the shutdown (`runBetweenShutdownSlices`).
    @exclusivity(unchecked) var betweenShutdownSlices: (@Sendable () -> Void)?
    /// Whether the shutdown has begun: new timers are refused from then on.
    @inline(__always) var isShutDown: Bool { shutdownPhase != .running }
    /// See `keepsHandlesAsKeyedTimers`.
    @exclusivity(unchecked) var handlesAsKeyedTimers = false
    @exclusivity(unchecked) var loopFailure: TimerError?
    /// Mirrors `isShutDown` for the lock-free check at the top of `schedule`.
    let shutDownFlag = Atomic<Bool>(false)
    /// `fireDueTimers` calls under way (more than one only when a handler runs its loop
    /// nested): `shutdown` waits until it is 0.
    @exclusivity(unchecked) var firingDepth = 0
    /// The thread running `fireDueTimers`, valid while `firingDepth > 0`.
    @exclusivity(unchecked) var firingThread = pthread_t()
    @exclusivity(unchecked) var waiters = 0
    @exclusivity(unchecked) var nextWaiterToken: UInt64 = 0
    /// Jobs of tasks that prefer this scheduler as their executor (`TimerBackend.taskExecutor`),
    /// waiting to run on the loop after its next batch of handlers.
    @exclusivity(unchecked) var jobs: [UnownedJob] = []
    /// An empty buffer the fire loop reuses for a batch of jobs (it swaps places with
    /// `jobs`), so that running them allocates nothing in steady state.
    @exclusivity(unchecked) var spareJobs: [UnownedJob] = []
    /// What `statistics` reports, recorded as timers fire.
    @exclusivity(unchecked) var stats: StatisticsRecorder
    /// Whether fires are recorded in `stats` (always, but for the benchmark that measures
    /// what recording costs).
    @exclusivity(unchecked) var recordsStatistics = true
    /// Handlers and jobs that run at least this long (ns) are reported; 0: none is.
    @exclusivity(unchecked) var slowHandlerNanoseconds: UInt64 = 0
    /// Slow calls of the current wake-up, reported when it ends (`SlowCalls`), and the walks
    /// over the due entries those reports have made.
    @exclusivity(unchecked) var slowCalls = SlowCalls()
    @exclusivity(unchecked) var slowReportWalks = 0
    /// Observers of whole-backend events, and the events waiting to be told to them after
    /// the lock is released.
    @exclusivity(unchecked) var eventObservers: [@Sendable (TimerBackendEvent) -> Void] = []
    @exclusivity(unchecked) var pendingEvents: [TimerBackendEvent] = []
    /// What the continuous and wall clocks read against this scheduler's (`+Clocks`).
    @exclusivity(unchecked) var clocks: ClockState
    /// Whether the owned driver keeps deadlines on the continuous and wall clocks itself
    /// (`OwnedDriver.ownClock`): `armedKey` is then the monotonic queue's alone.
    @exclusivity(unchecked) var hasOwnClockDriver = false
    /// The keys the owned driver's own clocks are armed for; `.max`: none.
    @exclusivity(unchecked) var armedOwnClockKeys = OwnClockKeys()

    static let horizonNanoseconds = MonotonicInstant.horizon.nanoseconds

    /// Creates a scheduler for the backend named `backendName`, registering into `registry`,
    /// reading deadlines on `clock`, and starting timers' tasks on `taskExecutor` (nil: the
    /// global executor).
    public init(backendName: String, registry: TimerRegistry, clock: SchedulerClock = .monotonic, taskExecutor: (any TaskExecutor)? = nil) {
        self.backendName = backendName
        self.serial = Self.serials.add(1, ordering: .relaxed).newValue
        self.registry = registry
        self.clock = clock
        self.taskExecutor = taskExecutor
        self.stats = StatisticsRecorder(since: clock.now().nanoseconds)
        self.clocks = ClockState(clock)
    }

    /// The last serial number given out.
    private static let serials = Atomic<UInt32>(0)

    deinit {
        // Every timer has ended (a live timer keeps its scheduler through its link): its slots
        // are free, and its chunks go back. Its backend may never have shut it down.
        if clocks.isWatched { ClockWatcher.shared.unwatch(self) }
        registry.retire(returning: store.takeChunks())
        stats.free()
        ownedDriver?.release()  // shutdown let it go already, unless it never ran
    }

    /// Maps the first chunk of records and of the monotonic queue as the backend starts
    /// (nothing is written to them, so nothing of them is resident yet), so that its first
    /// schedule maps nothing under the lock: those three `mmap`s made it the longest operation
    /// of a million schedules (10–60 µs). If the kernel refuses, the first schedule maps them
    /// (or reports why not).
    private func prepareStoreLocked() {
        if store.chunks.isEmpty, let chunk = registry.lendChunk(to: self, at: 0) { store.add(chunk) }
        queues.monotonic.heap.mapFirstChunk()
    }

    /// Connects the backend's driver, which this scheduler keeps (strongly) until it shuts down:
    /// an object of the backend's that holds not the backend (its wake-up state), so that the
    /// backend itself is never referenced weakly. One that holds this scheduler makes a cycle
    /// that the shutdown ends. Attaching another replaces it.
    public func attach(owning driver: any TimerDriver) {
        let replaced = mutex.withLock { () -> Unmanaged<OwnedDriver>? in
            let replaced = ownedDriver
            // A custom or virtual clock's continuous and wall readings are not the kernel's.
            let ownClock: (any OwnClockTimerDriver)? = if case .monotonic = clock { driver as? any OwnClockTimerDriver } else { nil }
            ownedDriver = .passRetained(OwnedDriver(driver, ownClock: ownClock))
            hasOwnClockDriver = ownClock != nil
            isAttached = true
            prepareStoreLocked()
            return replaced
        }
        replaced?.release()
    }

    /// The scheduler's current time.
    @inline(__always)
    public func now() -> MonotonicInstant { clock.now() }

    /// Live timers (scheduled or suspended) of this scheduler.
    var liveTimers: Int { mutex.withLock { store.live } }

    /// Live timers waiting in the queues (not suspended ones).
    package var pendingCount: Int { mutex.withLock { queues.live } }

    /// Dead entries still in the queues, for tests of the bound on them.
    package var deadEntryCount: Int { mutex.withLock { queues.dead } }

    /// Every queue entry's clock, key and sequence, for tests that check a step rewrites none.
    package var queueEntries: [(clock: DeadlineClock, key: UInt64, sequence: UInt64)] {
        mutex.withLock {
            var entries: [(clock: DeadlineClock, key: UInt64, sequence: UInt64)] = []
            for clock in DeadlineClock.allCases {
                queues.read(clock) { queue in
                    queue.heap.forEachEntry(keyedAtOrBefore: .max) { entries.append((clock, $0.key, $0.sequence)) }
                }
            }
            return entries
        }
    }

    /// How many walks over the due entries slow-handler reports have made, for tests that check
    /// one wake-up walks once however many it reports.
    package var slowReportWalkCount: Int { mutex.withLock { slowReportWalks } }

    /// Traps if a queue's order or its counts are wrong. Tests; debug builds check after
    /// every operation too (`checkInvariantsLocked`).
    package func checkQueueInvariants() {
        mutex.withLock { queues.checkInvariants(in: store.table) }
    }

    /// The store's invariants, after each operation in a debug build (as SwiftNIO's
    /// `_popTasksLockedAssertInvariants`): each queue's dead entries at most one more than its
    /// live ones, its heap order, and its counts. Nothing in a release build.
    @inline(__always)
    func checkInvariantsLocked() {
        #if DEBUG
            queues.checkInvariants(in: store.table)
        #endif
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

    func shutDownErrorLocked() -> TimerError {
        loopFailure.map { .loopFailed(backend: backendName, cause: $0) } ?? .backendShutDown(backend: backendName)
    }

    /// Closes a critical section begun with `mutex.lock()`: settles it, unlocks, and runs what it
    /// owes.
    @inline(__always)
    func unlock(running after: consuming AfterUnlock) {
        settleLocked(&after)
        mutex.unlock()
        after.run()
    }

    /// Runs `body` under the lock with a carrier, settles the section (`settleLocked`: ended
    /// timers leave the registry, their end waiters are taken), unlocks, and runs the carrier.
    @inline(__always)
    func locked<R, E: Error>(_ body: (inout AfterUnlock) throws(E) -> R) throws(E) -> R {
        var after = AfterUnlock()
        mutex.lock()
        let result: Result<R, E>
        do throws(E) { result = .success(try body(&after)) } catch { result = .failure(error) }
        settleLocked(&after)
        mutex.unlock()
        after.run()
        return try result.get()
    }
}

/// A driver a scheduler owns, in a box whose `let` a wake-up request borrows (see
/// `TimerScheduler.ownedDriver`).
final class OwnedDriver {
    let driver: any TimerDriver
    /// The same driver when it keeps continuous and wall deadlines itself (and the scheduler's
    /// clock is the kernel's).
    let ownClock: (any OwnClockTimerDriver)?
    init(_ driver: any TimerDriver, ownClock: (any OwnClockTimerDriver)?) {
        self.driver = driver
        self.ownClock = ownClock
    }
}
