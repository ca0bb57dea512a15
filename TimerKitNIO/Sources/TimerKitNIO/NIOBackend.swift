import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Synchronization
@_spi(BackendImplementation) import TimerKit

/// A TimerKit backend whose timers fire on a SwiftNIO `EventLoop`.
///
/// Handlers run on that loop, one at a time, like the loop's own tasks, so a `ChannelHandler`
/// can use its timers without hopping. The loop is the caller's: the backend never starts,
/// stops or blocks it. However many timers there are, the backend keeps one
/// `scheduleCallback(at:)` on the loop for the earliest deadline. When that deadline moves
/// earlier it schedules another and lets the one it replaces fire as a no-op, rather than
/// cancelling it: cancelling a NIO callback searches the loop's whole task queue.
///
/// ```swift
/// let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
/// let timers = NIOBackend(on: group.next())
/// try timers.schedule(.every(.seconds(1)), name: "heartbeat") { _ in sendHeartbeat() }
/// ```
///
/// On an `EmbeddedEventLoop` or a `NIOAsyncTestingEventLoop` the backend reads the loop's own
/// virtual time (`EventLoop.now`), so a test moves TimerKit's timers with `advanceTime(by:)`.
///
/// Shut the backend down before the loop's group. If the loop shuts down first, the backend
/// learns it when the loop cancels the callbacks it keeps there (on a
/// `MultiThreadedEventLoopGroup`'s loop it always keeps one, so that a backend with no timers
/// learns it too; on `EmbeddedEventLoop` and `NIOAsyncTestingEventLoop`, the one for its next
/// deadline tells it), and shuts down with `TimerError.loopFailed(backend:cause:)`: its timers end and `schedule`
/// throws that error instead of reaching the dead loop. A `schedule` from another thread that
/// races the loop's shutdown can still reach NIO after the loop stopped, which NIO reports
/// (with `SWIFTNIO_STRICT` set, by stopping the program).
public final class NIOBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: the mutable fields are touched only while holding `lock`; the rest is
    // immutable.
    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    /// The loop the timers fire on.
    public let eventLoop: any EventLoop
    private let lock = NIOLock()
    /// The callback that fires the scheduler's due timers; earlier ones still on the loop are
    /// superseded and do nothing when they fire.
    private var armed: (deadline: MonotonicInstant, callback: Callback, scheduled: NIOScheduledCallback)?
    /// A deadline asked for off the loop, applied on the loop by the hop `execute` runs.
    private var wanted: MonotonicInstant?
    private var hopQueued = false
    /// A callback at the end of time that only tells the backend when the loop shuts down,
    /// so that one with no timers learns it too.
    private var watch: (callback: Callback, scheduled: NIOScheduledCallback)?
    private var loopHasShutDown = false
    private var hasShutDown = false
    /// NIO callbacks this backend has cancelled (for tests: re-arming must not cancel).
    private var cancelledCallbacks = 0

    /// A backend on `eventLoop`, registering its timers in `registry`.
    public init(on eventLoop: any EventLoop, registry: TimerRegistry = .shared) {
        self.eventLoop = eventLoop
        let readsLoopTime = eventLoop is EmbeddedEventLoop || eventLoop is NIOAsyncTestingEventLoop
        let clock: SchedulerClock = readsLoopTime ? .custom { MonotonicInstant(eventLoop.now) } : .monotonic
        scheduler = TimerScheduler(backendName: "nio", registry: registry, clock: clock)
        scheduler.attach(self)
        // The test loops stay with the caller's thread and report their own shutdown through
        // the timers' callbacks; a real loop gets a watch, armed from any thread.
        if !readsLoopTime {
            let callback = Callback(backend: self)
            if let scheduled = try? eventLoop.scheduleCallback(at: .distantFuture, handler: callback) {
                lock.withLock { watch = (callback, scheduled) }
            }
        }
    }

    deinit { shutdown() }

    /// Cancels every timer and refuses new ones. From a handler it returns at once; from
    /// another thread it returns once no handler of this backend is running.
    public func shutdown() {
        scheduler.shutdown()
        let (armed, watch, loopRuns) = lock.withLock {
            hasShutDown = true
            wanted = nil
            defer { (self.armed, self.watch) = (nil, nil) }
            return (self.armed, self.watch, !loopHasShutDown)
        }
        guard loopRuns else { return }
        if let armed { cancel(armed.callback, armed.scheduled) }
        if let watch { cancel(watch.callback, watch.scheduled) }
    }

    /// How many NIO callbacks the backend has cancelled: only to disarm or shut down, never to
    /// move its wake-up.
    var cancelledCallbackCount: Int { lock.withLock { cancelledCallbacks } }

    private func cancel(_ callback: Callback, _ scheduled: NIOScheduledCallback) {
        callback.isCancelledByBackend.store(true, ordering: .releasing)
        lock.withLock { cancelledCallbacks += 1 }
        scheduled.cancel()
    }

    /// Makes the loop's callback fire at `deadline`, or disarms it. Called on the loop.
    private func arm(_ deadline: MonotonicInstant) throws(TimerError) {
        let (running, current) = lock.withLock { (!hasShutDown && !loopHasShutDown, armed) }
        guard running, current?.deadline != deadline else { return }
        if deadline == .distantFuture {
            guard let current else { return }
            lock.withLock { armed = nil }
            cancel(current.callback, current.scheduled)
            return
        }
        let callback = Callback(backend: self)
        let scheduled: NIOScheduledCallback
        do {
            scheduled = try eventLoop.scheduleCallback(at: NIODeadline(deadline), handler: callback)
        } catch {
            throw .loopFailed(backend: "nio", cause: .nativeFailure(backend: "nio", call: "EventLoop.scheduleCallback: \(error)"))
        }
        // The callback it replaces stays on the loop and does nothing when it fires.
        let tooLate = lock.withLock {
            if hasShutDown || loopHasShutDown { return true }  // a shutdown from another thread
            armed = (deadline, callback, scheduled)
            return false
        }
        if tooLate { cancel(callback, scheduled) }
    }

    /// The hop: applies the latest deadline asked for off the loop.
    private func applyWanted() {
        let deadline: MonotonicInstant? = lock.withLock {
            hopQueued = false
            defer { wanted = nil }
            return (hasShutDown || loopHasShutDown) ? nil : wanted
        }
        guard let deadline else { return }
        do throws(TimerError) { try arm(deadline) } catch { scheduler.fail(with: error) }
    }

    fileprivate func callbackFired(_ callback: Callback) {
        let isCurrent = lock.withLock {
            guard armed?.callback === callback else { return false }
            armed = nil
            return true
        }
        if isCurrent { scheduler.fireDueTimers() }
    }

    /// A callback the backend did not cancel was cancelled: the loop is shutting down.
    fileprivate func loopShutDown() {
        let first = lock.withLock {
            defer { loopHasShutDown = true }
            armed = nil
            watch = nil
            wanted = nil
            return !loopHasShutDown && !hasShutDown
        }
        if first {
            scheduler.fail(with: .nativeFailure(backend: "nio", call: "EventLoop: it shut down before the NIOBackend on it"))
        }
    }
}

@_spi(BackendImplementation) extension NIOBackend: TimerDriver {
    /// Moves the loop's callback to `deadline`. Called with the scheduler's lock held, from any
    /// thread, so it never waits for the loop: on the loop it schedules the callback at once
    /// (NIO takes its task lock for a moment); off the loop it records the deadline and, unless
    /// a hop is queued already, queues one with `execute` that applies the latest deadline
    /// there. A loop that has shut down is never called.
    public func wake(at deadline: MonotonicInstant) throws(TimerError) {
        if eventLoop.inEventLoop {
            // Newer than any deadline recorded off the loop: the hop finds nothing to do.
            let loopRuns = lock.withLock {
                wanted = nil
                return !loopHasShutDown
            }
            guard loopRuns else { throw Self.loopGone }
            try arm(deadline)
            return
        }
        let (loopRuns, hop) = lock.withLock {
            if loopHasShutDown { return (false, false) }
            wanted = deadline
            defer { hopQueued = true }
            return (true, !hopQueued)
        }
        guard loopRuns else { throw Self.loopGone }
        if hop { eventLoop.execute { [weak self] in self?.applyWanted() } }
    }

    private static let loopGone = TimerError.loopFailed(
        backend: "nio", cause: .nativeFailure(backend: "nio", call: "EventLoop: it shut down before the NIOBackend on it"))
}

/// One callback on the loop. It holds the backend weakly, so a callback still queued on the
/// loop never keeps a backend (and its timers' handlers) alive.
private final class Callback: NIOScheduledCallbackHandler, Sendable {
    weak let backend: NIOBackend?
    /// Set before the backend cancels it: any other cancellation is the loop shutting down.
    let isCancelledByBackend = Atomic<Bool>(false)

    init(backend: NIOBackend) { self.backend = backend }

    func handleScheduledCallback(eventLoop: some EventLoop) {
        backend?.callbackFired(self)
    }

    func didCancelScheduledCallback(eventLoop: some EventLoop) {
        guard !isCancelledByBackend.load(ordering: .acquiring) else { return }
        backend?.loopShutDown()
    }
}

extension MonotonicInstant {
    /// The instant of a NIO deadline. Both count CLOCK_MONOTONIC on Linux, so no conversion
    /// is needed; a deadline before the clock's origin is the origin.
    public init(_ deadline: NIODeadline) {
        self.init(nanoseconds: deadline.uptimeNanoseconds)
    }
}

extension NIODeadline {
    /// The NIO deadline of a TimerKit instant (the same CLOCK_MONOTONIC count on Linux).
    /// `MonotonicInstant.distantFuture` becomes `NIODeadline.distantFuture`.
    public init(_ instant: MonotonicInstant) {
        self = instant == .distantFuture ? .distantFuture : .uptimeNanoseconds(instant.nanoseconds)
    }
}
