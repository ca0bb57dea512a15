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
///
/// ## Where each part lives
///
/// One type under one lock, in files that each answer one question: this one holds the
/// state; `+Queue` where each timer waits (the queue itself is `TimerQueue`, a plain data
/// structure); `+Control` what callers do to a timer; `+Firing` the fire call; `+Tasks` and
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

    let mutex = PThreadMutex()
    /// The registry slots this scheduler's timers occupy (guarded by the registry's lock).
    let registryShard: RegistryShard
    /// Broadcast when a handler call or a `fireDueTimers` call ends, to `cancelAndWait` and
    /// `shutdown` callers waiting for one.
    let firingDone = PThreadCondition()
    // The properties below are only touched while holding `mutex`, which already makes
    // every access exclusive; `@exclusivity(unchecked)` drops the runtime's redundant
    // per-access bookkeeping (about a fifth of the schedule/cancel cost when measured).
    @exclusivity(unchecked) var queue = TimerQueue<TimerHandle>()
    @exclusivity(unchecked) weak var driver: (any TimerDriver)?
    /// The key the driver is armed for; `.max` when it is not armed.
    @exclusivity(unchecked) var armedKey: UInt64 = .max
    /// Queue entries that no longer stand for their timer (it was cancelled, suspended, or
    /// moved earlier). Cancel only marks: a dead entry leaves when it reaches the top, or is
    /// swept a few at a time once they near the number of live ones (`sweepDeadLocked`),
    /// so no operation pays for a pass over the whole queue.
    @exclusivity(unchecked) var deadInQueue = 0
    /// Timers whose dead entries left the queue under the lock: released after it, by the
    /// operation that swept them. Kept between operations so that sweeping allocates nothing.
    @exclusivity(unchecked) var sweptTimers: [TimerHandle] = []
    @exclusivity(unchecked) var nextSequence: UInt64 = 0
    /// Draws the jitter of timers scheduled with one (SplitMix64); seeded at random unless a
    /// test seeds it (`seedJitter`).
    @exclusivity(unchecked) var jitterState = UInt64.random(in: .min ... .max)
    @exclusivity(unchecked) var isShutDown = false
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
    /// Empty buffers the fire loop reuses, so that a fire allocates nothing in steady state:
    /// a batch of jobs (it swaps places with `jobs`) and a list of timers to let go of. Taken
    /// under the lock by the outermost `fireDueTimers` and put back, empty, under the lock.
    @exclusivity(unchecked) var spareJobs: [UnownedJob] = []
    @exclusivity(unchecked) var spareReleased: [Released] = []
    /// What `statistics` reports, recorded as timers fire.
    @exclusivity(unchecked) var stats: StatisticsRecorder
    /// Whether fires are recorded in `stats` (always, but for the benchmark that measures
    /// what recording costs).
    @exclusivity(unchecked) var recordsStatistics = true
    /// Handlers and jobs that run at least this long (ns) are reported; 0: none is.
    @exclusivity(unchecked) var slowHandlerNanoseconds: UInt64 = 0
    /// Observers of whole-backend events, and the events waiting to be told to them after
    /// the lock is released.
    @exclusivity(unchecked) var eventObservers: [@Sendable (TimerBackendEvent) -> Void] = []
    @exclusivity(unchecked) var pendingEvents: [TimerBackendEvent] = []
    /// How far the continuous and wall clocks were ahead of the monotonic one when their
    /// timers were last keyed; what a custom clock's offsets stay at (`SchedulerClock.offsets`).
    @exclusivity(unchecked) var clockOffsets: ClockOffsets
    /// The offsets as last read: what decides whether a timer on those clocks is due.
    @exclusivity(unchecked) var dueOffsets: ClockOffsets
    let fixedClockOffsets: ClockOffsets
    /// Live timers on the continuous or wall clock: while there are none, nothing reads those
    /// clocks. And the steps of each seen so far (`TimerHandle.clockEpoch`).
    @exclusivity(unchecked) var clockTimerCount = 0
    @exclusivity(unchecked) var wallEpoch: UInt32 = 0
    @exclusivity(unchecked) var continuousEpoch: UInt32 = 0
    /// Set once the shutdown events have been queued: a second `shutdown()` tells nobody.
    @exclusivity(unchecked) var hasReportedShutdown = false

    static let horizonNanoseconds = MonotonicInstant.horizon.nanoseconds

    /// Creates a scheduler for the backend named `backendName`, registering into `registry`,
    /// reading deadlines on `clock`, and starting timers' tasks on `taskExecutor` (nil: the
    /// global executor).
    public init(backendName: String, registry: TimerRegistry, clock: SchedulerClock = .monotonic, taskExecutor: (any TaskExecutor)? = nil) {
        self.backendName = backendName
        self.registryShard = RegistryShard(backendName: backendName)
        self.registry = registry
        self.clock = clock
        self.taskExecutor = taskExecutor
        self.stats = StatisticsRecorder(since: clock.now().nanoseconds)
        // A custom clock's wall and continuous clocks start where the system's stand now, and
        // then move with it.
        let start = clock.now().nanoseconds
        let fixed = ClockOffsets.reading(continuous: DeadlineClock.read(.continuous), wall: DeadlineClock.read(.wall), against: start)
        self.fixedClockOffsets = fixed
        // A tight reading if one can be had: a loose one would look like a step at the next.
        self.clockOffsets = clock.preciseOffsets(fixed: fixed, within: Self.clockStepThreshold / 2) ?? clock.offsets(fixed: fixed)
        self.dueOffsets = clockOffsets
    }

    deinit {
        registry.retire(registryShard)
        stats.free()
    }

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

    func shutDownErrorLocked() -> TimerError {
        loopFailure.map { .loopFailed(backend: backendName, cause: $0) } ?? .backendShutDown(backend: backendName)
    }
}
