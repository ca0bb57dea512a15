import Glibc
import Synchronization

/// The clock a scheduler reads: CLOCK_MONOTONIC, or virtual time for tests.
public enum SchedulerClock: Sendable {
    /// The kernel's CLOCK_MONOTONIC, which every real backend's wake-up also uses.
    case monotonic
    /// Time that moves only when a test moves it.
    case virtual(VirtualClock)

    /// The current time on this clock.
    @inline(__always)
    public func now() -> MonotonicInstant {
        switch self {
        case .monotonic: .now()
        case let .virtual(clock): clock.now
        }
    }
}

/// A settable clock for virtual-time backends.
public final class VirtualClock: @unchecked Sendable {
    // @unchecked: `nanoseconds` is guarded by `mutex`.
    private let mutex = PThreadMutex()
    private var nanoseconds: UInt64

    /// A clock reading `start`.
    public init(start: MonotonicInstant) { nanoseconds = start.nanoseconds }

    /// The current virtual time.
    public var now: MonotonicInstant { mutex.withLock { MonotonicInstant(nanoseconds: nanoseconds) } }

    /// Moves the clock to `instant` if that is later; it never goes back.
    public func move(to instant: MonotonicInstant) {
        mutex.withLock { nanoseconds = max(nanoseconds, instant.nanoseconds) }
    }
}

/// What a backend supplies to the core besides its clock: its native wake-up.
///
/// A backend owns one `TimerScheduler` and implements this protocol. The scheduler keeps
/// every timer, the ordering, the state machine and the repeat arithmetic; the driver only
/// wakes the loop and calls `TimerScheduler.fireDueTimers()` there. This keeps every
/// backend's semantics identical and lets a comparison measure just the wake-up mechanism.
public protocol TimerDriver: AnyObject, Sendable {
    /// Arranges for `fireDueTimers()` to run on the loop at `deadline` (or as soon as
    /// possible when it is past); `.distantFuture` disarms. Replaces any earlier request.
    ///
    /// Called from any thread while the scheduler's lock is held: it must be quick and must
    /// not call back into the scheduler. Throws when the native mechanism refuses (e.g.
    /// libevent's `event_add` returning -1); the scheduler undoes the change that needed it.
    func wake(at deadline: MonotonicInstant) throws(TimerError)
}

/// The core of every backend: an indexed heap of deadlines, the timer state machine,
/// drift-free repeat arithmetic and the missed-tick policy.
///
/// Backends create one, `attach` their driver, and call `fireDueTimers()` on their loop
/// when woken. Handlers of one scheduler run serially on that loop.
public final class TimerScheduler: @unchecked Sendable {
    // @unchecked: every mutable stored property is guarded by `mutex`, except
    // `hasObservers`-style reads that go through atomics in the registry.

    /// The backend's short name ("dispatch", "epoll", "manual", ...).
    public let backendName: String
    /// The registry every timer of this scheduler is registered in.
    public let registry: TimerRegistry
    /// The clock deadlines are read on.
    public let clock: SchedulerClock

    let mutex = PThreadMutex()
    private let handlerReturned = PThreadCondition()
    // The properties below are only touched while holding `mutex`, which already makes
    // every access exclusive; `@exclusivity(unchecked)` drops the runtime's redundant
    // per-access bookkeeping (about a fifth of the schedule/cancel cost when measured).
    @exclusivity(unchecked) private var heap = TimerHeap()
    @exclusivity(unchecked) private weak var driver: (any TimerDriver)?
    @exclusivity(unchecked) private var armedKey: UInt64 = .max
    /// Heap entries whose timer is no longer scheduled (cancelled or suspended). They are
    /// dropped when they reach the top, or all at once when they outnumber the live ones,
    /// which makes cancel amortized O(1) and keeps the heap within twice the live timers.
    @exclusivity(unchecked) private var deadInHeap = 0
    @exclusivity(unchecked) private var isShutDown = false
    @exclusivity(unchecked) private var driverFailure: TimerError?
    /// Mirrors `isShutDown` for the lock-free check at the top of `schedule`.
    private let shutDownFlag = Atomic<Bool>(false)
    @exclusivity(unchecked) private var running: TimerHandle?
    @exclusivity(unchecked) private var runningThread = pthread_t()
    @exclusivity(unchecked) private var waitersForIdle = 0

    /// Creates a scheduler for the backend named `backendName`, registering into `registry`
    /// and reading deadlines on `clock`.
    public init(backendName: String, registry: TimerRegistry, clock: SchedulerClock = .monotonic) {
        self.backendName = backendName
        self.registry = registry
        self.clock = clock
    }

    /// Connects the backend's driver. The scheduler holds it weakly (the backend owns the scheduler).
    public func attach(_ driver: any TimerDriver) {
        mutex.withLock { self.driver = driver }
    }

    /// The scheduler's current time.
    @inline(__always)
    public func now() -> MonotonicInstant { clock.now() }

    /// Live timers waiting in the heap (not suspended ones).
    public var pendingCount: Int { mutex.withLock { heap.count - deadInHeap } }

    /// The earliest deadline in the heap (including the tolerance), or nil: what a driver
    /// asked to re-arm from its own loop should arm for.
    public var earliestDeadline: MonotonicInstant? {
        mutex.withLock { heap.topKey.map { MonotonicInstant(nanoseconds: $0) } }
    }

    /// The last failure of the driver to re-arm from inside the loop, where no caller could
    /// be told (the timer it concerned was cancelled). Nil when the driver never failed.
    public var lastDriverFailure: TimerError? { mutex.withLock { driverFailure } }

    /// Whether `shutdown()` has run.
    public var hasShutDown: Bool { mutex.withLock { isShutDown } }

    // MARK: Scheduling

    func schedule(_ schedule: TimerSchedule, name: String?, tolerance: Duration, policy: MissedTickPolicy,
                  target: (any TargetProbe)?, handler: @escaping @Sendable (Tick) -> Void) throws(TimerError) -> TimerHandle {
        if tolerance < .zero { throw .negativeDuration(parameter: "tolerance", value: tolerance) }
        if let name { try TimerRegistry.validate(name: name) }
        if shutDownFlag.load(ordering: .relaxed) { throw .backendShutDown(backend: backendName) }
        let resolved = try schedule.resolve(now: clock.now())
        var extras: TimerExtras?
        if tolerance > .zero || target != nil {
            extras = TimerExtras()
            extras?.tolerance = UInt64(tolerance.saturatingNanoseconds)
            extras?.target = target
        }
        let timer = try registry.register(name: name, hasTarget: target != nil) { id in
            TimerHandle(id: id, name: name, scheduler: self, resolved: resolved, policy: policy,
                        extras: extras, handler: handler)
        }
        var armFailure: TimerError?
        let inserted: Bool = mutex.withLock {
            guard !isShutDown else { return false }
            // A registry-wide cancel may have ended the timer between the two locks.
            if timer.state == .scheduled {
                do throws(TimerError) { try queueLocked(timer) } catch { armFailure = error }
            }
            return true
        }
        if !inserted || armFailure != nil {
            timer.cancel()   // also takes it out of the registry
            throw armFailure ?? .backendShutDown(backend: backendName)
        }
        return timer
    }

    @inline(__always)
    private func heapKey(_ timer: TimerHandle) -> UInt64 {
        timer.deadline.saturatingAdd(timer.extras?.tolerance ?? 0)
    }

    /// Puts a scheduled timer in deadline order (inserting it, or reviving the dead entry it
    /// still has) and arms the driver if it is now the earliest. If the driver refuses, the
    /// timer is taken out of the heap again and the error is rethrown.
    private func queueLocked(_ timer: TimerHandle) throws(TimerError) {
        let key = heapKey(timer)
        if timer.heapIndex >= 0 { heap.update(timer, key: key) } else { heap.insert(timer, key: key) }
        guard key < armedKey, timer.heapIndex == 0, let driver else { return }
        do throws(TimerError) {
            try driver.wake(at: MonotonicInstant(nanoseconds: key))
            armedKey = key
        } catch {
            heap.remove(timer)
            throw error
        }
    }

    /// Called when `timer` stops being scheduled. Its heap entry stays (touching the heap
    /// here would cost several cache misses per cancel with many timers) unless it is the
    /// earliest. Returns timers the heap let go of, to be released outside the lock.
    private func retireLocked(_ timer: TimerHandle) -> [TimerHandle] {
        guard timer.heapIndex >= 0 else { return [] }
        deadInHeap += 1
        var dropped: [TimerHandle] = []
        if timer.heapIndex == 0 {
            dropDeadTopsLocked(into: &dropped)
        } else if deadInHeap > 1024, deadInHeap * 2 > heap.count {
            dropped = heap.compact { $0.state == .scheduled }
            deadInHeap = 0
        }
        // The native wake-up stays armed for the old earliest deadline: the loop wakes once,
        // finds nothing due and re-arms. Cheaper than a re-arm per cancel when timers are
        // cancelled in deadline order (timeouts). Only an empty heap disarms at once.
        if heap.isEmpty, armedKey != .max {
            armedKey = .max
            try? driver?.wake(at: .distantFuture)   // if disarming fails, the loop wakes once for nothing
        }
        return dropped
    }

    private func dropDeadTopsLocked(into dropped: inout [TimerHandle]) {
        while let top = heap.top, top.timer.state != .scheduled, let timer = heap.popTop() {
            deadInHeap -= 1
            dropped.append(timer)
        }
    }

    // MARK: State machine

    /// Carries a closure into `withExtendedLifetime` by address: passed bare, the generic
    /// parameter boxes the closure (one heap allocation per cancel, measured).
    private struct HandlerLifetime {
        let handler: @Sendable (Tick) -> Void
    }

    /// What an ended timer's handler becomes: one shared closure, so ending allocates nothing.
    static let endedHandler: @Sendable (Tick) -> Void = { _ in }

    func cancel(_ timer: TimerHandle, finalState: TimerState) {
        // Explicit lock/unlock rather than a closure returning (handler, dropped): that
        // plumbing cost two heap allocations per cancel (seen with a malloc breakpoint).
        mutex.lock()
        guard !timer.state.hasEnded else {
            mutex.unlock()
            return
        }
        timer.state = finalState
        let dropped = retireLocked(timer)
        // Drop the handler now: a closure that captured its own handle would otherwise keep
        // the timer alive forever. It is released after the lock, because its captures'
        // deinits may call back into TimerKit.
        let handler = HandlerLifetime(handler: timer.handler)
        timer.handler = Self.endedHandler
        mutex.unlock()
        withExtendedLifetime(handler) {}
        withExtendedLifetime(dropped) {}
        registry.remove(timer)
    }

    func waitUntilIdle(_ timer: TimerHandle) {
        mutex.withLock {
            guard running === timer, pthread_equal(runningThread, pthread_self()) == 0 else { return }
            waitersForIdle += 1
            while running === timer { handlerReturned.wait(mutex) }
            waitersForIdle -= 1
        }
    }

    func suspend(_ timer: TimerHandle) throws(TimerError) {
        let dropped = try mutex.withLock { () throws(TimerError) -> [TimerHandle] in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            guard timer.state == .scheduled else { return [] }
            timer.state = .suspended
            return retireLocked(timer)
        }
        withExtendedLifetime(dropped) {}
    }

    func resume(_ timer: TimerHandle) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            guard timer.state == .suspended else { return }
            timer.state = .scheduled
            // A handler that suspends and resumes its own timer is re-queued when it returns.
            if timer.heapIndex >= 0 { deadInHeap -= 1 }
            guard running !== timer else { return }
            do throws(TimerError) { try queueLocked(timer) } catch {
                timer.state = .suspended   // left as it was, so the caller may retry
                throw error
            }
        }
    }

    func reschedule(_ timer: TimerHandle, _ schedule: TimerSchedule) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            if isShutDown { throw .backendShutDown(backend: backendName) }
            let resolved = try schedule.resolve(now: clock.now())
            timer.deadline = resolved.firstDeadline
            timer.interval = resolved.intervalNanoseconds
            timer.remaining = resolved.remaining
            if timer.state == .scheduled {
                // Inside its own handler too: the fire loop then sees it queued and leaves it be.
                do throws(TimerError) { try queueLocked(timer) } catch {
                    timer.state = .suspended   // keeps the new schedule; resume() retries the arm
                    throw error
                }
            } else if timer.heapIndex >= 0 {
                // A suspended timer's dead entry: its place is found again on resume.
                heap.remove(timer)
                deadInHeap -= 1
            }
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

    /// Applies a repeating timer's missed-tick policy as it fires at `now`, and returns how
    /// many grid points it missed. Done at fire time, it treats every cause alike: a stalled
    /// loop, a handler that overran, a timer resumed after a pause.
    private func catchUp(_ timer: TimerHandle, now: UInt64) -> Int {
        guard timer.interval > 0, timer.policy != .burst, now > timer.deadline else { return 0 }
        let behind = (now - timer.deadline) / timer.interval
        guard behind > 0 else { return 0 }
        switch timer.policy {
        case .skip:
            // Fire the latest grid point that is due; the earlier ones are dropped.
            timer.deadline = timer.deadline.saturatingAdd(behind.saturatingMultiply(timer.interval))
        case .delay:
            // Restart the grid from now.
            timer.deadline = now
        case .burst:
            break
        }
        return Int(clamping: behind)
    }

    // MARK: Firing

    /// Runs every handler that is due, in deadline order, then re-arms the driver for the
    /// next one. Backends call this on their loop when the driver's wake-up fires.
    public func fireDueTimers() {
        mutex.lock()
        guard let driver, !isShutDown else {
            mutex.unlock()
            return
        }
        armedKey = .max
        let start = clock.now().nanoseconds
        var dropped: [TimerHandle] = []
        while let top = heap.top, top.key <= start || top.timer.deadline <= start {
            guard let timer = heap.popTop() else { break }
            if timer.state != .scheduled {
                deadInHeap -= 1
                dropped.append(timer)
                continue
            }
            let observers = timer.extras?.observers ?? []
            if let probe = timer.extras?.target, !probe.isTargetAlive {
                // The proxy's job: a target that is gone ends its timers.
                mutex.unlock()
                timer.cancel()
                mutex.lock()
                continue
            }
            let handler = timer.handler
            let index = timer.fires
            timer.fires += 1
            if timer.remaining > 0 { timer.remaining -= 1 }
            let actual = clock.now()
            let missed = catchUp(timer, now: actual.nanoseconds)
            let scheduled = timer.deadline
            let interval: Duration? = timer.interval == 0 ? nil : .nanoseconds(Int64(clamping: timer.interval))
            timer.deadline = timer.interval > 0 ? timer.deadline.saturatingAdd(timer.interval) : timer.deadline
            running = timer
            runningThread = pthread_self()
            mutex.unlock()

            let tick = Tick(index: index, scheduled: MonotonicInstant(nanoseconds: scheduled), actual: actual,
                            missed: missed, interval: interval, timer: timer)
            run(handler, tick: tick, timerObservers: observers)

            mutex.lock()
            running = nil
            if waitersForIdle > 0 { handlerReturned.broadcast() }
            var finished = false
            if timer.state == .scheduled && timer.heapIndex < 0 {
                if timer.interval == 0 || timer.remaining == 0 {
                    timer.state = .finished
                    finished = true
                } else if !isShutDown {
                    do throws(TimerError) { try queueLocked(timer) } catch {
                        // Nobody to throw to inside the loop: end the timer, keep the reason.
                        driverFailure = error
                        timer.state = .cancelled
                        finished = true
                    }
                }
            }
            if finished {
                let old = HandlerLifetime(handler: timer.handler)
                timer.handler = Self.endedHandler
                mutex.unlock()
                withExtendedLifetime(old) {}
                registry.remove(timer)
                mutex.lock()
            }
            if isShutDown { break }
        }
        if !isShutDown {
            dropDeadTopsLocked(into: &dropped)
            if let topKey = heap.topKey, topKey != armedKey {
                do throws(TimerError) {
                    try driver.wake(at: MonotonicInstant(nanoseconds: topKey))
                    armedKey = topKey
                } catch {
                    driverFailure = error   // armedKey stays unset: the next schedule retries
                }
            }
        }
        mutex.unlock()
        withExtendedLifetime(dropped) {}
    }

    private func run(_ handler: @Sendable (Tick) -> Void, tick: Tick, timerObservers: [TimerObserver]) {
        let registryObservers = registry.currentObservers()
        if registryObservers.isEmpty && timerObservers.isEmpty {
            handler(tick)
            return
        }
        for observer in registryObservers { observer.willFire?(tick) }
        for observer in timerObservers { observer.willFire?(tick) }
        let began = clock.now()
        handler(tick)
        let elapsed = clock.now() - began
        for observer in timerObservers { observer.didFire?(tick, elapsed) }
        for observer in registryObservers { observer.didFire?(tick, elapsed) }
    }

    // MARK: Shutdown

    /// Cancels every timer of this scheduler and refuses new ones. Idempotent.
    /// Backends call it first in their own `shutdown()`, then stop their loop.
    public func shutdown() {
        let queued: [TimerHandle] = mutex.withLock {
            guard !isShutDown else { return [] }
            isShutDown = true
            shutDownFlag.store(true, ordering: .relaxed)
            armedKey = .max
            deadInHeap = 0
            return heap.removeAll()
        }
        for timer in queued { timer.cancel() }
        // Suspended timers are not in the heap; the registry knows them.
        for timer in registry.timers(of: self) { timer.cancel() }
        // Ended timers waiting in the registry's removal batch hold this scheduler, which
        // holds the registry: let them go now, or a dropped registry would never be freed.
        registry.applyPendingRemovals()
    }
}
