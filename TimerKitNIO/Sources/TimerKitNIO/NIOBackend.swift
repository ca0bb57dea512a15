import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
@_spi(BackendImplementation) import TimerKit

/// A TimerKit backend whose timers fire on a SwiftNIO `EventLoop`.
///
/// Handlers run on that loop, one at a time, like the loop's own tasks, so a `ChannelHandler`
/// can use its timers without hopping. The loop is the caller's: the backend never starts,
/// stops or blocks it. However many timers there are, the backend keeps one
/// `scheduleCallback(at:)` on the loop, for the earliest deadline, and moves it when that
/// deadline changes.
///
/// ```swift
/// let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
/// let timers = try NIOBackend(on: group.next())
/// try timers.schedule(.every(.seconds(1)), name: "heartbeat") { _ in sendHeartbeat() }
/// ```
///
/// On an `EmbeddedEventLoop` or a `NIOAsyncTestingEventLoop` the backend reads the loop's own
/// virtual time (`EventLoop.now`), so a test moves TimerKit's timers with `advanceTime(by:)`.
///
/// Shut the backend down before the loop's group. SwiftNIO gives no way to learn that a loop
/// has shut down: work scheduled on it afterwards is dropped with a logged error ("Cannot
/// schedule tasks on an EventLoop that has already shut down"), so the timers of a backend
/// whose loop is gone never fire. A loop whose `scheduleCallback` throws shuts the backend
/// down with `TimerError.loopFailed(backend:cause:)`, as every backend's loop
/// failure does.
public final class NIOBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: `pending` is touched only while holding `lock`; the rest is immutable.
    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    /// The loop the timers fire on.
    public let eventLoop: any EventLoop
    private let lock = NIOLock()
    private var pending: NIOScheduledCallback?

    /// A backend on `eventLoop`, registering its timers in `registry`.
    public init(on eventLoop: any EventLoop, registry: TimerRegistry = .shared) {
        self.eventLoop = eventLoop
        let readsLoopTime = eventLoop is EmbeddedEventLoop || eventLoop is NIOAsyncTestingEventLoop
        let clock: SchedulerClock = readsLoopTime ? .custom { MonotonicInstant(eventLoop.now) } : .monotonic
        scheduler = TimerScheduler(backendName: "nio", registry: registry, clock: clock)
        scheduler.attach(self)
    }

    /// Cancels every timer and refuses new ones. From a handler it returns at once; from
    /// another thread it returns once no handler of this backend is running.
    public func shutdown() {
        scheduler.shutdown()
        replacePending(with: nil)
    }

    /// Makes `callback` the loop's one pending callback and cancels the one it replaces.
    private func replacePending(with callback: NIOScheduledCallback?) {
        let replaced = lock.withLock {
            defer { pending = callback }
            return pending
        }
        replaced?.cancel()
    }
}

@_spi(BackendImplementation) extension NIOBackend: TimerDriver {
    /// Moves the loop's one callback to `deadline`. Called with the scheduler's lock held, from
    /// any thread: `scheduleCallback` and `cancel` take NIO's task lock for a moment and never
    /// wait for the loop to run anything.
    public func wake(at deadline: MonotonicInstant) throws(TimerError) {
        guard deadline != .distantFuture else { return replacePending(with: nil) }
        do {
            replacePending(with: try eventLoop.scheduleCallback(at: NIODeadline(deadline), handler: FireDueTimers(backend: self)))
        } catch {
            // The loop refused: the core shuts this backend down with the reason.
            throw .loopFailed(backend: "nio", cause: .nativeFailure(backend: "nio", call: "EventLoop.scheduleCallback: \(error)"))
        }
    }
}

/// The loop's callback: fires what is due. It holds the backend weakly, so a callback still
/// queued on the loop never keeps a backend (and its timers' handlers) alive.
private struct FireDueTimers: NIOScheduledCallbackHandler, Sendable {
    weak var backend: NIOBackend?

    func handleScheduledCallback(eventLoop: some EventLoop) {
        backend?.scheduler.fireDueTimers()
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
