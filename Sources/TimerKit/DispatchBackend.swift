import Dispatch

/// A backend on Grand Central Dispatch: one `DispatchSourceTimer` on a serial queue wakes
/// the core scheduler, however many timers are scheduled.
///
/// Handlers run on the backend's serial queue: its own, or one that targets the caller's
/// queue (so handlers stay serial even on a concurrent queue).
public final class DispatchBackend: TimerBackend, TimerDriver, @unchecked Sendable {
    // @unchecked: `source` is created in init and only cancelled (thread-safe in GCD)
    // afterwards; the rest is immutable or Sendable.

    /// The core scheduler.
    public let scheduler: TimerScheduler
    /// The serial queue the handlers run on.
    public let queue: DispatchQueue
    private let source: DispatchSourceTimer
    private let shutdownOnce = OnceFlag()
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

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
        source.setEventHandler { [weak scheduler] in scheduler?.fireDueTimers() }
        source.schedule(deadline: .distantFuture, repeating: .never, leeway: .nanoseconds(0))
        source.activate()
        self.queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
        scheduler.attach(self)
    }

    deinit { shutdown() }

    public func wake(at deadline: MonotonicInstant) throws(TimerError) {
        // DispatchTime's uptime clock is CLOCK_MONOTONIC on Linux.
        let when: DispatchTime = deadline == .distantFuture ? .distantFuture : DispatchTime(uptimeNanoseconds: max(deadline.nanoseconds, 1))
        source.schedule(deadline: when, repeating: .never, leeway: .nanoseconds(0))
    }

    public func shutdown() {
        guard shutdownOnce.claim() else { return }
        scheduler.shutdown()
        source.cancel()
        // Wait for a handler call already on the queue to finish, unless we are on it.
        if DispatchQueue.getSpecific(key: Self.queueKey) != ObjectIdentifier(self) {
            queue.sync {}
        }
    }
}
