import Glibc

/// Fields few timers use, kept out of line so that a plain timer stays small. Written and
/// read only under the scheduler's lock.
final class TimerExtras {
    var tolerance: UInt64 = 0
    var observers: [TimerObserver] = []
    /// Run once the timer has ended and nothing of it runs any more (`whenEnded`).
    var endWaiters: [EndWaiter] = []
    /// The handler starts a task (`scheduleAsync`): a repeat is re-queued when the task
    /// returns (fixed delay), not when the handler does.
    var runsTasks = false
    /// Tasks of this timer that have started and not returned.
    var tasksRunning = 0
    /// The running task, cancelled when the timer ends.
    var runningTask: Task<Void, Never>?
    /// A reschedule while a task ran: its first deadline stands when the task returns.
    var rescheduledDuringTask = false
    /// The `Debouncer` or `Throttler` whose timer this is (weak: the helper owns the timer).
    /// Read only by `TimerScheduler.helper(of:)`, which hands it out of the lock: a strong
    /// reference taken from it must never be the last one released under the lock.
    weak var helper: AnyObject?
    /// The most each fire is jittered by (ns), and this fire's draw: it is due at
    /// `deadline + jitterOffset`.
    var jitter: UInt64 = 0
    var jitterOffset: UInt64 = 0
    /// Suspended, not finished, after its last call (a helper's timer): the helper's next
    /// call moves and resumes it, so a burst of calls reuses one timer.
    var parksAfterLastCall = false
    /// The dates of a calendar schedule; its next deadline is found as it fires.
    var calendarRule: CalendarRule?
}

/// An action to run once a timer has ended and gone idle, and the token that takes it back.
struct EndWaiter {
    let token: UInt64
    let action: @Sendable () -> Void
}

/// A scheduled timer: the value every `schedule` call returns.
///
/// Cancel, suspend, resume or reschedule it from any thread. It is registered in its
/// backend's registry until it is cancelled or finishes.
public final class TimerHandle: @unchecked Sendable, Hashable, CustomStringConvertible {
    // @unchecked: `id`, `customName` and `scheduler` are immutable; every other stored
    // property is read and written only while holding `scheduler.mutex`.

    // Field order is deliberate: what cancel touches (id, scheduler, state, entrySequence,
    // handler) comes first, so that with a million timers a cancel costs one cache miss on
    // the timer instead of two or three.

    /// Unique within its registry and never reused there: a slot number in the low 32 bits
    /// and that slot's generation in the high 32 bits.
    public let id: UInt64
    let scheduler: TimerScheduler
    @exclusivity(unchecked) var state: TimerState = .scheduled
    /// The clock its deadlines are on: `deadline` counts on it.
    @exclusivity(unchecked) var clock: DeadlineClock
    /// The scheduler's count of steps of `clock` when this timer was last queued or fired: a
    /// fire that finds it behind says so (`Tick.clockChanged`).
    @exclusivity(unchecked) var clockSteps: UInt32 = 0
    @exclusivity(unchecked) var policy: MissedTickPolicy
    /// Calls of the handler under way (a handler that runs its loop nested can make two).
    @exclusivity(unchecked) var activeCalls: UInt16 = 0
    /// Why it ended; `.live` until then.
    @exclusivity(unchecked) var endCause: EndCause = .live
    /// The sequence number of the queue entry that stands for this timer; 0 when it has none
    /// (not queued: firing, suspended, ended). Any other entry of it in the queue is dead.
    @exclusivity(unchecked) var entrySequence: UInt64 = 0
    @exclusivity(unchecked) var handler: @Sendable (Tick) -> Void
    /// The next due grid point: advanced one interval as a tick fires; moved by the
    /// missed-tick policy when a tick fires more than an interval late.
    @exclusivity(unchecked) var deadline: UInt64
    let customName: String?
    /// Repeat interval in ns; 0 for one-shots.
    @exclusivity(unchecked) var interval: UInt64
    /// Handler calls left; -1 for unlimited.
    @exclusivity(unchecked) var remaining: Int
    @exclusivity(unchecked) var fires: Int = 0
    /// The lateness of its latest handler call and the most of any (ns), and the grid points
    /// it has missed: for its snapshot.
    @exclusivity(unchecked) var lastLateness: UInt64 = 0
    @exclusivity(unchecked) var maxLateness: UInt64 = 0
    @exclusivity(unchecked) var missedTicks: Int = 0
    /// Its place among timers of equal deadline: the sequence of the latest queue or reset.
    /// Greater than `entrySequence` when a reset moved it later and its entry waits to be
    /// re-filed as it reaches the top.
    @exclusivity(unchecked) var orderSequence: UInt64 = 0
    @exclusivity(unchecked) var extras: TimerExtras?
    /// The target of a target-action timer, held weakly; immutable, so any thread may read
    /// the reference (but see `WeakReference` about loading the object).
    let target: WeakReference?

    init(
        id: UInt64, name: String?, scheduler: TimerScheduler, resolved: TimerSchedule.Resolved,
        policy: MissedTickPolicy, extras: TimerExtras?, target: WeakReference?, handler: @escaping @Sendable (Tick) -> Void
    ) {
        self.extras = extras
        self.target = target
        self.id = id
        self.customName = name
        self.scheduler = scheduler
        self.handler = handler
        self.policy = policy
        self.deadline = resolved.firstDeadline
        self.clock = resolved.clock
        self.interval = resolved.intervalNanoseconds
        self.remaining = resolved.remaining
    }

    /// The registered name: the caller's, or a generated `timer#<slot>` / `timer#<slot>.<generation>`.
    public var name: String { customName ?? TimerRegistry.generatedName(id) }

    /// The name of the backend this timer runs on.
    public var backendName: String { scheduler.backendName }

    /// Whether the timer is scheduled or suspended (not cancelled or finished).
    public var isActive: Bool { !currentState.hasEnded }

    /// The current state.
    public var currentState: TimerState { scheduler.mutex.withLock { state } }

    /// Handler calls so far.
    public var fireCount: Int { scheduler.mutex.withLock { fires } }

    /// A point-in-time view: name, backend, state, fires, next deadline.
    public var snapshot: TimerSnapshot { scheduler.mutex.withLock { snapshotLocked() } }

    /// The snapshot of a timer that is still live (scheduled or suspended), nil once it has
    /// ended: what the registry lists, read in one critical section so no ended timer slips in.
    var liveSnapshot: TimerSnapshot? {
        scheduler.mutex.withLock { state.hasEnded ? nil : snapshotLocked() }
    }

    private func snapshotLocked() -> TimerSnapshot {
        TimerSnapshot(
            name: name, backend: scheduler.backendName, state: state, fires: fires,
            nextDeadline: state == .scheduled
                ? MonotonicInstant(nanoseconds: scheduler.clocks.offsets.monotonic(RepeatRule.dueTime(self), on: clock)) : nil,
            interval: interval == 0 ? nil : .nanoseconds(Int64(clamping: interval)),
            lastLateness: fires == 0 ? nil : .nanoseconds(Int64(clamping: lastLateness)),
            maxLateness: fires == 0 ? nil : .nanoseconds(Int64(clamping: maxLateness)), missedTicks: missedTicks)
    }

    /// Whether this is a target-action timer whose target has been released. Call it only
    /// outside TimerKit's locks (see `WeakReference`).
    var hasReleasedTarget: Bool {
        guard let target else { return false }
        return target.object == nil
    }

    /// Stops the timer. Idempotent; never throws. Once it returns, the loop begins no new call
    /// of the handler; a call it had already begun (running the observers' `willFire` hooks,
    /// or the handler) may still run the handler and finish: `cancelAndWait()` waits for it.
    public func cancel() { scheduler.cancel(self, because: .cancelled) }

    /// Why the timer ended; nil while it is live (scheduled or suspended).
    public var endReason: TimerEndReason? { scheduler.mutex.withLock { scheduler.endReasonLocked(self) } }

    /// Runs `action` with the reason once the timer has ended and no call of its handler, nor
    /// a task it started, is still running: at once (on this thread) if that is so already,
    /// otherwise on the thread that ended it, outside TimerKit's locks. It must be quick.
    public func onEnd(_ action: @escaping @Sendable (TimerEndReason) -> Void) {
        scheduler.whenEnded(self) { [self] in action(scheduler.mutex.withLock { scheduler.endReasonLocked(self) } ?? .completed) }
    }

    func cancel(because cause: EndCause) { scheduler.cancel(self, because: cause) }

    /// Cancels, then waits until a call of this timer's handler that the loop had already begun
    /// has returned: once it returns, no handler of this timer is running or about to start,
    /// and none will. Called from inside that handler it returns at once instead of deadlocking.
    public func cancelAndWait() {
        cancel()
        scheduler.waitUntilIdle(self)
    }

    /// Keeps the timer but stops it firing until `resume()`. Idempotent: suspending twice
    /// and resuming once runs it again (unlike a GCD source, which counts).
    public func suspend() throws(TimerError) { try scheduler.suspend(self) }

    /// Resumes a suspended timer. Ticks that came due while it was suspended are handled by
    /// its missed-tick policy (`.skip`: fire once now). Resuming a scheduled timer does nothing.
    public func resume() throws(TimerError) { try scheduler.resume(self) }

    /// Replaces the timer's schedule, keeping its name, handler and registry entry.
    public func reschedule(_ schedule: TimerSchedule) throws(TimerError) { try scheduler.reschedule(self, schedule) }

    /// Adds hooks that run around each of this timer's handler calls.
    public func addObserver(_ observer: TimerObserver) throws(TimerError) { try scheduler.addObserver(observer, to: self) }

    public static func == (lhs: TimerHandle, rhs: TimerHandle) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }
    public var description: String { "TimerHandle(\(name) on \(backendName))" }
}
