import Foundation
@_spi(BackendImplementation) import TimerKit

// The example backend of the "Writing a backend" article, verbatim: the conformance suite
// runs it as one more configuration, so the article's code is known to meet the contract.

/// A backend for a loop you already run (a game's frame loop, an embedded main loop): call
/// `runDueTimers()` each time the loop turns, and let it sleep until `nextDeadline`.
public final class PumpedBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: `requested` is only touched while holding `lock`.
    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    private let lock = NSLock()
    private var requested = MonotonicInstant.distantFuture

    public init(registry: TimerRegistry = .shared) {
        scheduler = TimerScheduler(backendName: "pumped", registry: registry)
        scheduler.attach(self)
    }

    /// When the loop must next call `runDueTimers()` (`.distantFuture`: nothing is due).
    public var nextDeadline: MonotonicInstant { lock.withLock { requested } }

    /// Runs the handlers that are due. Call it from the loop's thread only: handlers of one
    /// backend run serially.
    public func runDueTimers() {
        let due = lock.withLock {
            guard MonotonicInstant.now() >= requested else { return false }
            // Used up: the scheduler asks again for the next deadline, if there is one.
            requested = .distantFuture
            return true
        }
        if due { scheduler.fireDueTimers() }
    }

    public func shutdown() { scheduler.shutdown() }
}

@_spi(BackendImplementation) extension PumpedBackend: TimerDriver {
    /// Called with the scheduler's lock held, from any thread: record the request and return.
    /// (A loop that sleeps would also be woken here, without waiting for it: a pipe write.)
    public func wake(at deadline: MonotonicInstant) throws(TimerError) {
        lock.withLock { requested = deadline }
    }
}
