import Dispatch

/// A backend on Grand Central Dispatch: one `DispatchSourceTimer` on a serial queue wakes
/// the core scheduler, however many timers are scheduled.
///
/// Handlers run on the backend's serial queue: its own, or one that targets the caller's
/// queue (so handlers stay serial even on a concurrent queue).
public final class DispatchBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: `source` is created in init and afterwards only rescheduled and cancelled,
    // both thread-safe in GCD; the rest is immutable or Sendable.

    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    @_spi(BackendImplementation) public var unretainedScheduler: Unmanaged<TimerScheduler> { .passUnretained(scheduler) }
    /// The serial queue the handlers run on.
    public let queue: DispatchQueue
    private let source: DispatchSourceTimer
    /// The scheduler's driver, which moves `source`.
    private let wakeUps: SourceWakeUps
    private let shutdownOnce = OnceFlag()

    /// Creates a Dispatch backend.
    /// - Parameters:
    ///   - queue: handlers run on a serial queue targeting this one; nil makes a private queue.
    ///   - qos: the quality of service of the private queue.
    ///   - registry: where timers are registered.
    public init(queue: DispatchQueue? = nil, qos: DispatchQoS = .userInteractive, registry: TimerRegistry = .shared) {
        self.queue = DispatchQueue(label: "TimerKit.dispatch", qos: qos, target: queue)
        scheduler = TimerScheduler(backendName: "dispatch", registry: registry)
        // The source is activated at once and never suspended: releasing a suspended or
        // never-activated source crashes GCD, so this one can always be cancelled safely.
        source = DispatchSource.makeTimerSource(flags: .strict, queue: self.queue)
        // Strongly, until the cancel at shutdown lets the handler go: a weak reference would
        // give the scheduler a side table (see `RecordChunk.owner`).
        source.setEventHandler { [scheduler] in scheduler.fireDueTimers() }
        source.schedule(deadline: .distantFuture, repeating: .never, leeway: .nanoseconds(0))
        source.activate()
        wakeUps = SourceWakeUps(source)
        scheduler.attach(owning: wakeUps)
    }

    deinit { shutdown() }

    /// Cancels every timer and the native source. From another thread (a block on the
    /// queue this backend targets included) it returns once no handler of this backend is
    /// running; from inside a handler it returns at once and that handler finishes after.
    public func shutdown() {
        guard shutdownOnce.claim() else { return }
        scheduler.shutdown()
        // An event already queued finds the scheduler shut down and returns at once.
        source.cancel()
    }
}

/// A Dispatch backend's driver: it moves the backend's timer source. The scheduler owns it
/// (`attach(owning:)`; a driver held weakly costs the runtime's slow reference counting on every
/// wake-up request) and lets it go at shutdown.
private final class SourceWakeUps: TimerDriver, @unchecked Sendable {
    // @unchecked: `source` never changes, and rescheduling a source is thread-safe in GCD.
    let source: DispatchSourceTimer

    init(_ source: DispatchSourceTimer) { self.source = source }

    func wake(at deadline: MonotonicInstant) {
        // DispatchTime's uptime clock is CLOCK_MONOTONIC on Linux. The scheduler sends no
        // deadline at or past 2^62 ns: libdispatch reads 2^63 and above as a time already
        // past, and a source armed there fires, finds nothing due and re-arms, forever.
        let when: DispatchTime = deadline == .distantFuture ? .distantFuture : DispatchTime(uptimeNanoseconds: max(deadline.nanoseconds, 1))
        source.schedule(deadline: when, repeating: .never, leeway: .nanoseconds(0))
    }
}
