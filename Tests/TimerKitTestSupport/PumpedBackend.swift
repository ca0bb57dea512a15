import Foundation
@_spi(BackendImplementation) import TimerKit

// The example backend of the "Writing a backend" article, verbatim: the conformance suite
// runs it as one more configuration, so the article's code is known to meet the contract.

/// A backend for a loop you already run (a game's frame loop, an embedded main loop): call
/// `runDueTimers()` each time the loop turns, and let it sleep until `nextDeadline`.
public final class PumpedBackend: TimerBackend {
    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    /// The driver, which the scheduler owns: the backend reads and uses up its requests.
    private let wakeUp = WakeUp()

    public init(registry: TimerRegistry = .shared) {
        scheduler = TimerScheduler(backendName: "pumped", registry: registry)
        scheduler.attach(owning: wakeUp)
    }

    /// Dropped without `shutdown()`, the backend still ends its timers.
    deinit { scheduler.shutdown() }

    /// When the loop must next call `runDueTimers()` (`.distantFuture`: nothing is due).
    public var nextDeadline: MonotonicInstant { wakeUp.withRequest { $0 } }

    /// Runs the handlers that are due. Call it from the loop's thread only: handlers of one
    /// backend run serially.
    public func runDueTimers() {
        let due = wakeUp.withRequest { requested in
            guard MonotonicInstant.now() >= requested else { return false }
            // Used up: the scheduler asks again for the next deadline, if there is one.
            requested = .distantFuture
            return true
        }
        if due { scheduler.fireDueTimers() }
    }

    public func shutdown() { scheduler.shutdown() }
}

/// The backend's wake-up state, and its driver: the deadline the scheduler asked for last. It
/// holds neither the backend nor the scheduler, so that the scheduler can own it.
private final class WakeUp: TimerDriver, @unchecked Sendable {
    // @unchecked: `requested` is only touched while holding `lock`.
    private let lock = NSLock()
    private var requested = MonotonicInstant.distantFuture

    /// Runs `body` on the deadline asked for last, under the lock.
    func withRequest<Result>(_ body: (inout MonotonicInstant) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&requested)
    }

    /// Called with the scheduler's lock held, from any thread: record the request and return.
    /// (A loop that sleeps would also be woken here, without waiting for it: a pipe write.)
    func wake(at deadline: MonotonicInstant) throws(TimerError) {
        withRequest { $0 = deadline }
    }
}
