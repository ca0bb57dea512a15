#if NIO
    import NIOConcurrencyHelpers
    import NIOCore
    import NIOEmbedded
    import Synchronization
    @_spi(BackendImplementation) import TimerKit

    /// A TimerKit backend whose timers fire on a SwiftNIO `EventLoop`.
    ///
    /// Handlers run on that loop, one at a time, like the loop's own tasks, so a `ChannelHandler`
    /// can use its timers without hopping. The loop is the caller's: the backend never starts,
    /// stops or blocks it. However many timers there are, it keeps few `scheduleCallback(at:)`
    /// on the loop: one at or before the earliest deadline, and ones that deadline has left
    /// behind. It does not cancel one to move its wake-up or to disarm, because cancelling a NIO
    /// callback searches the loop's whole task queue. When the deadline moves earlier than every
    /// callback it has there, it schedules another; when the deadline moves later, or no timer is
    /// left, the callbacks stay: one that comes before the deadline wakes the backend early, which
    /// then schedules one for the deadline unless one is there already, and one that comes when
    /// no timer wants it does nothing. So short timers firing before a far one, or an idle
    /// timeout moved later on every read, keep at most two callbacks on the loop. The backend
    /// cancels one, the farthest, only rather than keep more than 64, which takes a deadline
    /// moving earlier than every callback there, again and again, while they wait (a far timer
    /// moved a little earlier on every cycle, say).
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
    /// learns it too; on `EmbeddedEventLoop` and `NIOAsyncTestingEventLoop`, the ones for its
    /// deadlines tell it, and it has one whenever it has a timer), and shuts down with
    /// `TimerError.loopFailed(backend:cause:)`: its timers end and `schedule`
    /// throws that error instead of reaching the dead loop. A `schedule` from another thread that
    /// races the loop's shutdown can still reach NIO after the loop stopped, which NIO reports
    /// (with `SWIFTNIO_STRICT` set, by stopping the program).
    public final class NIOBackend: TimerBackend, Sendable {
        @_spi(BackendImplementation) public let scheduler: TimerScheduler
        @_spi(BackendImplementation) public var unretainedScheduler: Unmanaged<TimerScheduler> { .passUnretained(scheduler) }
        /// The loop the timers fire on.
        public let eventLoop: any EventLoop
        /// The callbacks on the loop and the deadline they serve: the scheduler's driver.
        private let wakeUps: NIOWakeUps

        /// The most callbacks the backend keeps on the loop for its timers; a new one past it
        /// cancels the farthest. Enough that a burst of timers scheduled in falling deadline order
        /// (each callback then serves a timer) rarely reaches it; few enough that the memory they
        /// hold (a few hundred bytes each, in NIO's queue and here) stays small.
        static let maxOutstandingCallbacks = 64

        /// A backend on `eventLoop`, registering its timers in `registry`.
        public init(on eventLoop: any EventLoop, registry: TimerRegistry = .shared) {
            self.eventLoop = eventLoop
            let readsLoopTime = eventLoop is EmbeddedEventLoop || eventLoop is NIOAsyncTestingEventLoop
            let clock: SchedulerClock = readsLoopTime ? .custom { MonotonicInstant(eventLoop.now) } : .monotonic
            scheduler = TimerScheduler(backendName: "nio", registry: registry, clock: clock)
            wakeUps = NIOWakeUps(eventLoop: eventLoop, readsLoopTime: readsLoopTime, scheduler: scheduler)
            scheduler.attach(owning: wakeUps)
            // The test loops stay with the caller's thread and report their own shutdown through
            // the timers' callbacks; a real loop gets a watch, armed from any thread.
            if !readsLoopTime { wakeUps.watchTheLoop() }
        }

        deinit { shutdown() }

        /// Cancels every timer and refuses new ones. From a handler it returns at once; from
        /// another thread it returns once no handler of this backend is running.
        public func shutdown() {
            scheduler.shutdown()
            wakeUps.shutdown()
        }

        /// How many NIO callbacks the backend has cancelled: only past the cap or to shut down,
        /// never to move its wake-up or to disarm.
        var cancelledCallbackCount: Int { wakeUps.cancelledCallbackCount }

        /// How many callbacks the backend has on the loop for its timers, the watch aside: at
        /// most `maxOutstandingCallbacks`.
        var outstandingCallbackCount: Int { wakeUps.outstandingCallbackCount }

        /// The deadlines of those callbacks, in the order they were scheduled (falling).
        var outstandingCallbackDeadlines: [MonotonicInstant] { wakeUps.outstandingCallbackDeadlines }

        /// How many callbacks have called the scheduler's `fireDueTimers`: only ones that came
        /// when a deadline it asked for had come.
        var dueTimersCallCount: Int { wakeUps.dueTimersCallCount }
    }

    /// A `NIOBackend`'s driver: its callbacks on the loop and the deadline they serve. The
    /// scheduler owns it (`attach(owning:)`) until its shutdown, and it holds the scheduler, to
    /// fire its timers: the shutdown, which the backend's `deinit` makes too, ends the cycle.
    /// The loop's callbacks hold it weakly, so one still queued there keeps nothing alive.
    private final class NIOWakeUps: TimerDriver, @unchecked Sendable {
        // @unchecked: the mutable fields are touched only while holding `lock`; the rest is
        // immutable.
        let eventLoop: any EventLoop
        /// Whether the loop keeps virtual time (`EventLoop.now`), which the backend's clock reads.
        let readsLoopTime: Bool
        let scheduler: TimerScheduler
        private let lock = NIOLock()
        /// The deadline the scheduler last asked to be woken at, as applied on the loop; nil when
        /// it asked for none, or when the callback that came for it has called `fireDueTimers`.
        private var target: MonotonicInstant?
        /// The callbacks on the loop for the timers (the watch aside), in the order they were
        /// scheduled. Each was scheduled only when every one before it was later, so their
        /// deadlines fall from first to last: the first is the farthest, the last the nearest.
        private var pending: [Pending] = []
        /// A deadline asked for off the loop, applied on the loop by the hop `execute` runs.
        private var wanted: MonotonicInstant?
        private var hopQueued = false
        /// A callback at the end of time that only tells the backend when the loop shuts down,
        /// so that one with no timers learns it too.
        private var watch: Pending?
        private var loopHasShutDown = false
        private var hasShutDown = false
        private var cancelledCallbacks = 0
        private var dueTimersCalls = 0

        init(eventLoop: any EventLoop, readsLoopTime: Bool, scheduler: TimerScheduler) {
            self.eventLoop = eventLoop
            self.readsLoopTime = readsLoopTime
            self.scheduler = scheduler
        }

        /// Puts the watch on the loop.
        func watchTheLoop() {
            let callback = Callback(wakeUps: self, deadline: .distantFuture)
            if let scheduled = try? eventLoop.scheduleCallback(at: .distantFuture, handler: callback) {
                lock.withLock { watch = Pending(callback: callback, scheduled: scheduled) }
            }
        }

        /// After the scheduler's shutdown: cancels the callbacks on a loop that still runs.
        func shutdown() {
            let (callbacks, loopRuns) = lock.withLock {
                hasShutDown = true
                wanted = nil
                target = nil
                defer { (pending, watch) = ([], nil) }
                return (pending + (watch.map { [$0] } ?? []), !loopHasShutDown)
            }
            // The only cancels besides the cap's, and once: left there, they would hold memory in
            // NIO's queue until they came.
            guard loopRuns else { return }
            for callback in callbacks { cancel(callback) }
        }

        var cancelledCallbackCount: Int { lock.withLock { cancelledCallbacks } }
        var outstandingCallbackCount: Int { lock.withLock { pending.count } }
        var outstandingCallbackDeadlines: [MonotonicInstant] { lock.withLock { pending.map(\.callback.deadline) } }
        var dueTimersCallCount: Int { lock.withLock { dueTimersCalls } }

        private func cancel(_ pending: Pending) {
            pending.callback.isCancelledByBackend.store(true, ordering: .releasing)
            lock.withLock { cancelledCallbacks += 1 }
            pending.scheduled.cancel()
        }

        /// Moves the backend's wake-up to `deadline`. Called with the scheduler's lock held, from
        /// any thread, so it never waits for the loop: on the loop it applies the deadline at once
        /// (scheduling a callback only when none on the loop comes at or before it: NIO takes its
        /// task lock for a moment); off the loop it records the deadline and, unless a hop is
        /// queued already, queues one with `execute` that applies the latest deadline there. A
        /// loop that has shut down is never called.
        func wake(at deadline: MonotonicInstant) throws(TimerError) {
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

        /// Makes sure a callback comes at or before `deadline`, or disarms. Called on the loop.
        private func arm(_ deadline: MonotonicInstant) throws(TimerError) {
            let (needed, evicted): (Bool, Pending?) = lock.withLock {
                guard !hasShutDown, !loopHasShutDown else { return (false, nil) }
                target = deadline == .distantFuture ? nil : deadline
                // Disarmed, the callbacks stay on the loop and do nothing when they come; one
                // already at or before the deadline serves it (an early one wakes the backend,
                // which then looks again).
                guard deadline != .distantFuture, !(pending.last.map { $0.callback.deadline <= deadline } ?? false) else {
                    return (false, nil)
                }
                // Every one there is later than the deadline: past the cap, the farthest goes.
                return (true, pending.count >= NIOBackend.maxOutstandingCallbacks ? pending.removeFirst() : nil)
            }
            if let evicted { cancel(evicted) }
            guard needed else { return }
            let callback = Callback(wakeUps: self, deadline: deadline)
            let scheduled: NIOScheduledCallback
            do {
                scheduled = try eventLoop.scheduleCallback(at: NIODeadline(deadline), handler: callback)
            } catch {
                throw .loopFailed(backend: "nio", cause: .nativeFailure(backend: "nio", call: "EventLoop.scheduleCallback: \(error)"))
            }
            let new = Pending(callback: callback, scheduled: scheduled)
            let tooLate = lock.withLock {
                if hasShutDown || loopHasShutDown { return true }  // a shutdown from another thread
                pending.append(new)  // the nearest: every one there was later
                return false
            }
            if tooLate { cancel(new) }
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

        /// A callback came. It calls `fireDueTimers` only when the deadline the scheduler asked
        /// for has come: then the scheduler finds timers due (or ones cancelled since, and
        /// re-arms), and asks for its next deadline afresh. A callback that comes with no deadline
        /// asked for does nothing; one that comes before it makes sure another will come at the
        /// deadline (one already on the loop, or a new one) without entering the scheduler.
        fileprivate func callbackFired(_ callback: Callback) {
            let now = readsLoopTime ? MonotonicInstant(eventLoop.now) : .now()
            let (fire, early): (Bool, MonotonicInstant?) = lock.withLock {
                // Usually the nearest: NIO runs them in deadline order.
                guard let index = pending.lastIndex(where: { $0.callback === callback }) else { return (false, nil) }
                pending.remove(at: index)
                guard !hasShutDown, !loopHasShutDown, let target else { return (false, nil) }
                if callback.deadline >= target || now >= target {
                    self.target = nil  // used up, as the scheduler's own record of it
                    dueTimersCalls += 1
                    return (true, nil)
                }
                let covered = pending.last.map { $0.callback.deadline <= target } ?? false
                return (false, covered ? nil : target)
            }
            if fire {
                scheduler.fireDueTimers()
            } else if let early {
                do throws(TimerError) { try arm(early) } catch { scheduler.fail(with: error) }
            }
        }

        /// A callback the backend did not cancel was cancelled: the loop is shutting down.
        fileprivate func loopShutDown() {
            let first = lock.withLock {
                defer { loopHasShutDown = true }
                pending = []
                target = nil
                watch = nil
                wanted = nil
                return !loopHasShutDown && !hasShutDown
            }
            if first {
                scheduler.fail(with: .nativeFailure(backend: "nio", call: "EventLoop: it shut down before the NIOBackend on it"))
            }
        }
    }

    /// A callback the backend has on the loop, and NIO's handle to cancel it.
    private struct Pending {
        let callback: Callback
        let scheduled: NIOScheduledCallback
    }

    /// One callback on the loop. It holds the backend's wake-ups weakly, so a callback still
    /// queued on the loop never keeps a backend (and its timers' handlers) alive.
    private final class Callback: NIOScheduledCallbackHandler, Sendable {
        weak let wakeUps: NIOWakeUps?
        /// When NIO runs it.
        let deadline: MonotonicInstant
        /// Set before the backend cancels it: any other cancellation is the loop shutting down.
        let isCancelledByBackend = Atomic<Bool>(false)

        init(wakeUps: NIOWakeUps, deadline: MonotonicInstant) {
            self.wakeUps = wakeUps
            self.deadline = deadline
        }

        func handleScheduledCallback(eventLoop: some EventLoop) {
            wakeUps?.callbackFired(self)
        }

        func didCancelScheduledCallback(eventLoop: some EventLoop) {
            guard !isCancelledByBackend.load(ordering: .acquiring) else { return }
            wakeUps?.loopShutDown()
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
#endif
