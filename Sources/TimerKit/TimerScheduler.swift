import Glibc
import Synchronization

/// What a backend supplies to the core: its clock and its native wake-up.
///
/// A backend owns one `TimerScheduler` and implements this protocol. The scheduler keeps
/// every timer, the ordering, the state machine and the repeat arithmetic; the driver only
/// wakes the loop and calls `TimerScheduler.fireDueTimers()` there. This keeps every
/// backend's semantics identical and lets a comparison measure just the wake-up mechanism.
public protocol TimerDriver: AnyObject, Sendable {
    /// The current time on the driver's clock (CLOCK_MONOTONIC; virtual for Manual).
    func now() -> MonotonicInstant

    /// Arranges for `fireDueTimers()` to run on the loop at `deadline` (or as soon as
    /// possible when it is past); `.distantFuture` disarms. Replaces any earlier request.
    ///
    /// Called from any thread while the scheduler's lock is held: it must be quick and must
    /// not call back into the scheduler.
    func wake(at deadline: MonotonicInstant)
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

    let mutex = PThreadMutex()
    private let handlerReturned = PThreadCondition()
    private var heap = TimerHeap()
    private weak var driver: (any TimerDriver)?
    private var armedKey: UInt64 = .max
    private var isShutDown = false
    private var running: TimerHandle?
    private var runningThread = pthread_t()
    private var waitersForIdle = 0

    /// Creates a scheduler for the backend named `backendName`, registering into `registry`.
    public init(backendName: String, registry: TimerRegistry) {
        self.backendName = backendName
        self.registry = registry
    }

    /// Connects the backend's driver. The scheduler holds it weakly (the backend owns the scheduler).
    public func attach(_ driver: any TimerDriver) {
        mutex.withLock { self.driver = driver }
    }

    /// The driver's current time.
    public func now() -> MonotonicInstant {
        mutex.withLock { driver }?.now() ?? .now()
    }

    /// Live timers waiting in the heap (not suspended ones).
    public var pendingCount: Int { mutex.withLock { heap.count } }

    /// Whether `shutdown()` has run.
    public var hasShutDown: Bool { mutex.withLock { isShutDown } }

    // MARK: Scheduling

    func schedule(_ schedule: TimerSchedule, name: String?, tolerance: Duration, policy: MissedTickPolicy,
                  target: (any TargetProbe)?, handler: @escaping @Sendable (Tick) -> Void) throws(TimerError) -> TimerHandle {
        if tolerance < .zero { throw .negativeDuration(parameter: "tolerance", value: tolerance) }
        if let name { try TimerRegistry.validate(name: name) }
        let driver = mutex.withLock { isShutDown ? nil : self.driver }
        guard let driver else { throw .backendShutDown(backend: backendName) }
        let resolved = try schedule.resolve(now: driver.now())
        let timer = TimerHandle(id: TimerRegistry.makeID(), name: name, scheduler: self, resolved: resolved,
                                policy: policy, handler: handler)
        if tolerance > .zero || target != nil {
            let extras = TimerExtras()
            extras.tolerance = UInt64(tolerance.saturatingNanoseconds)
            extras.target = target
            timer.extras = extras
        }
        try registry.insert(timer, hasTarget: target != nil)
        let inserted: Bool = mutex.withLock {
            guard !isShutDown else { return false }
            // A registry-wide cancel may have ended the timer between the two locks.
            if timer.state == .scheduled { insertLocked(timer) }
            return true
        }
        if !inserted {
            registry.remove(timer)
            throw .backendShutDown(backend: backendName)
        }
        return timer
    }

    private func insertLocked(_ timer: TimerHandle) {
        let key = timer.deadline.saturatingAdd(timer.extras?.tolerance ?? 0)
        heap.insert(timer, key: key)
        if key < armedKey, timer.heapIndex == 0 {
            armedKey = key
            driver?.wake(at: MonotonicInstant(nanoseconds: key))
        }
    }

    private func removeLocked(_ timer: TimerHandle) {
        guard heap.remove(timer) else { return }
        // Cancelling the earliest timer leaves the native wake-up armed: the loop wakes once,
        // finds nothing due and re-arms. Only an empty heap disarms at once.
        if heap.isEmpty, armedKey != .max {
            armedKey = .max
            driver?.wake(at: .distantFuture)
        }
    }

    // MARK: State machine

    func cancel(_ timer: TimerHandle, finalState: TimerState) {
        let released: (@Sendable (Tick) -> Void)? = mutex.withLock {
            guard !timer.state.hasEnded else { return nil }
            timer.state = finalState
            removeLocked(timer)
            // Drop the handler now: a closure that captured its own handle would otherwise
            // keep the timer alive forever. It is released after the lock, because its
            // captures' deinits may call back into TimerKit.
            let old = timer.handler
            timer.handler = { _ in }
            return old
        }
        guard released != nil else { return }
        withExtendedLifetime(released) {}
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
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            guard timer.state == .scheduled else { return }
            timer.state = .suspended
            removeLocked(timer)
        }
    }

    func resume(_ timer: TimerHandle) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            guard timer.state == .suspended else { return }
            timer.state = .scheduled
            // A handler that suspends and resumes its own timer is re-queued when it returns.
            guard running !== timer, let now = driver?.now() else { return }
            applyMissedTickPolicy(timer, now: now.nanoseconds)
            insertLocked(timer)
        }
    }

    func reschedule(_ timer: TimerHandle, _ schedule: TimerSchedule) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if timer.state.hasEnded { throw .timerEnded(name: timer.name, state: timer.state) }
            if isShutDown { throw .backendShutDown(backend: backendName) }
            let now = driver?.now() ?? .now()
            let resolved = try schedule.resolve(now: now)
            removeLocked(timer)
            timer.deadline = resolved.firstDeadline
            timer.interval = resolved.intervalNanoseconds
            timer.remaining = resolved.remaining
            timer.pendingMissed = 0
            // Inside its own handler too: the fire loop then sees it queued and leaves it be.
            if timer.state == .scheduled { insertLocked(timer) }
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

    /// Moves a repeating timer's `deadline` (a grid point that has already fired, or that
    /// came due while suspended) forward according to its missed-tick policy.
    private func applyMissedTickPolicy(_ timer: TimerHandle, now: UInt64) {
        guard timer.interval > 0, timer.deadline < now else { return }
        let behind = (now - timer.deadline) / timer.interval
        switch timer.policy {
        case .burst:
            break
        case .skip:
            // Fire the latest grid point that is due; drop the earlier ones.
            timer.deadline = timer.deadline.saturatingAdd(behind.saturatingMultiply(timer.interval))
            timer.pendingMissed += Int(clamping: behind)
        case .delay:
            timer.deadline = now
            timer.pendingMissed += Int(clamping: behind)
        }
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
        let start = driver.now().nanoseconds
        while let top = heap.top, top.key <= start || top.timer.deadline <= start {
            let timer = top.timer
            _ = heap.popTop()
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
            let missed = timer.pendingMissed
            timer.pendingMissed = 0
            let scheduled = timer.deadline
            timer.deadline = timer.interval > 0 ? timer.deadline.saturatingAdd(timer.interval) : timer.deadline
            running = timer
            runningThread = pthread_self()
            mutex.unlock()

            let actual = driver.now()
            let tick = Tick(index: index, scheduled: MonotonicInstant(nanoseconds: scheduled), actual: actual,
                            missed: missed, timer: timer)
            run(handler, tick: tick, timerObservers: observers, driver: driver)

            mutex.lock()
            running = nil
            if waitersForIdle > 0 { handlerReturned.broadcast() }
            var finished = false
            if timer.state == .scheduled && timer.heapIndex < 0 {
                if timer.interval == 0 || timer.remaining == 0 {
                    timer.state = .finished
                    finished = true
                } else if !isShutDown {
                    applyMissedTickPolicy(timer, now: driver.now().nanoseconds)
                    insertLocked(timer)
                }
            }
            if finished {
                let old = timer.handler
                timer.handler = { _ in }
                mutex.unlock()
                withExtendedLifetime(old) {}
                registry.remove(timer)
                mutex.lock()
            }
            if isShutDown { break }
        }
        if !isShutDown, let top = heap.top, top.key != armedKey {
            armedKey = top.key
            driver.wake(at: MonotonicInstant(nanoseconds: top.key))
        }
        mutex.unlock()
    }

    private func run(_ handler: @Sendable (Tick) -> Void, tick: Tick, timerObservers: [TimerObserver], driver: any TimerDriver) {
        let registryObservers = registry.currentObservers()
        if registryObservers.isEmpty && timerObservers.isEmpty {
            handler(tick)
            return
        }
        for observer in registryObservers { observer.willFire?(tick) }
        for observer in timerObservers { observer.willFire?(tick) }
        let began = driver.now()
        handler(tick)
        let elapsed = driver.now() - began
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
            armedKey = .max
            return heap.removeAll()
        }
        for timer in queued { timer.cancel() }
        // Suspended timers are not in the heap; the registry knows them.
        for timer in registry.timers(of: self) { timer.cancel() }
    }
}
