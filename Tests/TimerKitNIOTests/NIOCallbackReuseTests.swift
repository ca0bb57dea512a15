#if NIO
    import Dispatch
    import NIOCore
    import NIOEmbedded
    import NIOPosix
    import Testing
    @_spi(BackendImplementation) import TimerKit
    import TimerKitConformance

    @testable import TimerKitNIO

    /// How many NIO callbacks the backend leaves on its loop: a few, however many times its
    /// deadline moves, and never one cancelled to move or disarm its wake-up.
    @Suite("NIOBackend's callbacks on the loop")
    struct NIOCallbackReuseTests {
        /// The review's case: a far timer, then many short ones, each firing before it. Each
        /// short one used to leave a callback for the far deadline behind (117 MiB after 200,000).
        @Test func shortTimersBeforeAFarOneLeaveNoCallbacksBehind() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                defer { backend.shutdown() }
                let far = Counter()
                try backend.schedule(.after(.seconds(3600))) { _ in far.increment() }
                let short = Counter()
                var most = 0
                for cycle in 1...1_000 {
                    try backend.schedule(.after(.milliseconds(1))) { _ in short.increment() }
                    most = max(most, backend.outstandingCallbackCount)
                    loop.advanceTime(by: .milliseconds(1))
                    #expect(short.current == cycle)
                    most = max(most, backend.outstandingCallbackCount)
                }
                #expect(most <= 2, "one for the far deadline and one for the short timer")
                #expect(far.current == 0)
                #expect(backend.cancelledCallbackCount == 0)
            }
        }

        /// An idle timeout moved later on every cycle: the far deadline's callback wakes the loop
        /// early once, finds nothing due, and one for the new deadline takes its place.
        @Test func aFarTimerMovedLaterEachCycleLeavesNoCallbacksBehind() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                defer { backend.shutdown() }
                let far = Counter()
                let idle = try backend.schedule(.after(.seconds(1))) { _ in far.increment() }
                let short = Counter()
                var most = 0
                for cycle in 1...3_000 {  // 3 s in all: three times the far timer's delay
                    try idle.reschedule(.after(.seconds(1)))
                    try backend.schedule(.after(.milliseconds(1))) { _ in short.increment() }
                    most = max(most, backend.outstandingCallbackCount)
                    loop.advanceTime(by: .milliseconds(1))
                    #expect(short.current == cycle)
                    most = max(most, backend.outstandingCallbackCount)
                }
                #expect(most <= 2)
                #expect(far.current == 0, "moved on every cycle, it never came due")
                #expect(backend.cancelledCallbackCount == 0)
                // Moved last 1 ms ago, before the last short timer.
                loop.advanceTime(by: .milliseconds(998))
                #expect(far.current == 0)
                loop.advanceTime(by: .milliseconds(1))
                #expect(far.current == 1, "a second after its last move, not later")
            }
        }

        /// A far deadline moved earlier on every cycle needs a callback of its own each time: the
        /// backend keeps no more than `maxOutstandingCallbacks`, cancelling the farthest, and the
        /// timer still fires at its last deadline.
        @Test func deadlinesMovingEverEarlierKeepTheCallbacksBounded() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                defer { backend.shutdown() }
                let fired = Locked<[MonotonicInstant]>([])
                let far = try backend.schedule(.after(.seconds(3600))) { tick in fired.withLock { $0.append(tick.actual) } }
                let short = Counter()
                var most = 0
                var deadline = MonotonicInstant(loop.now) + .seconds(3600)
                var farDeadlines = [deadline]  // the first one's callback, then each move's
                let cycles = 1_000
                for cycle in 1...cycles {
                    deadline = MonotonicInstant(loop.now) + .seconds(3600 - cycle)
                    farDeadlines.append(deadline)
                    try far.reschedule(.at(deadline))
                    try backend.schedule(.after(.milliseconds(1))) { _ in short.increment() }
                    most = max(most, backend.outstandingCallbackCount)
                    loop.advanceTime(by: .milliseconds(1))
                    #expect(short.current == cycle)
                    most = max(most, backend.outstandingCallbackCount)
                }
                #expect(most <= NIOBackend.maxOutstandingCallbacks)
                // Past the cap, each new callback cancelled the farthest: the nearest ones stay
                // (all but the slot each short timer took, then gave back by firing).
                let kept = NIOBackend.maxOutstandingCallbacks - 1
                #expect(backend.outstandingCallbackDeadlines == Array(farDeadlines.suffix(kept)))
                #expect(backend.cancelledCallbackCount == farDeadlines.count - kept)
                loop.advanceTime(to: NIODeadline(deadline) - .nanoseconds(1))
                #expect(fired.current.isEmpty)
                loop.advanceTime(by: .nanoseconds(1))
                #expect(fired.current == [deadline])
            }
        }

        /// A request timeout: scheduled, then cancelled before it fires, which empties the queue.
        /// Cancelling the NIO callback would search the loop's whole task queue; the backend leaves
        /// it to wake the loop early or fire as a no-op, and the next timer still fires on time.
        @Test func emptyingTheQueueCancelsNoNIOCallback() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                defer { backend.shutdown() }
                let timeout = try backend.schedule(.after(.seconds(30))) { _ in Issue.record("a cancelled timer fired") }
                timeout.cancel()
                #expect(backend.cancelledCallbackCount == 0)
                #expect(backend.outstandingCallbackCount == 1, "the disarmed one stays, to be reused or to fire as a no-op")
                // Later than the one left behind: that one wakes the loop early, and one for 60 s follows.
                let later = Locked<[MonotonicInstant]>([])
                let laterDeadline = MonotonicInstant(loop.now) + .seconds(60)
                try backend.schedule(.at(laterDeadline)) { tick in later.withLock { $0.append(tick.actual) } }
                // Earlier than it: a callback of its own.
                let sooner = Locked<[MonotonicInstant]>([])
                let soonerDeadline = MonotonicInstant(loop.now) + .seconds(10)
                try backend.schedule(.at(soonerDeadline)) { tick in sooner.withLock { $0.append(tick.actual) } }
                loop.advanceTime(by: .seconds(10))
                #expect(sooner.current == [soonerDeadline])
                loop.advanceTime(by: .seconds(50) - .nanoseconds(1))
                #expect(later.current.isEmpty)
                loop.advanceTime(by: .nanoseconds(1))
                #expect(later.current == [laterDeadline])
                #expect(backend.cancelledCallbackCount == 0)
            }
        }

        /// A callback calls `fireDueTimers` only when the deadline the scheduler asked for has
        /// come: one left behind by a cancelled timer does nothing, and one that comes before the
        /// deadline only makes sure another comes at it.
        @Test func aCallbackEntersTheSchedulerOnlyWhenADeadlineHasCome() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                defer { backend.shutdown() }
                try backend.schedule(.after(.seconds(10))) { _ in }.cancel()
                loop.advanceTime(by: .seconds(10))  // the callback for 10 s comes, unwanted
                #expect(backend.dueTimersCallCount == 0)
                let leftBehind = MonotonicInstant(loop.now) + .seconds(10)
                try backend.schedule(.at(leftBehind)) { _ in }.cancel()
                let fired = Locked<[MonotonicInstant]>([])
                let deadline = MonotonicInstant(loop.now) + .seconds(30)
                try backend.schedule(.at(deadline)) { tick in fired.withLock { $0.append(tick.actual) } }
                #expect(backend.outstandingCallbackDeadlines == [leftBehind], "the one at 20 s serves 40 s")
                loop.advanceTime(by: .seconds(10))  // it comes early
                #expect(backend.dueTimersCallCount == 0)
                #expect(backend.outstandingCallbackDeadlines == [deadline])
                loop.advanceTime(by: .seconds(20))
                #expect(fired.current == [deadline])
                #expect(backend.dueTimersCallCount == 1)
                #expect(backend.cancelledCallbackCount == 0)
            }
        }

        /// Random schedules, cancels, moves and advances of virtual time on an `EmbeddedEventLoop`:
        /// after each advance every timer whose deadline has come has fired exactly then, once,
        /// and no other, whichever callbacks the backend reused; and it kept at most
        /// `maxOutstandingCallbacks` on the loop.
        @Test func reusingCallbacksNeverMakesATimerLate() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                defer { backend.shutdown() }
                var random = SplitMix64(seed: 0x5EED)
                var deadlines: [Int: MonotonicInstant] = [:]  // of the timers not cancelled
                var handles: [Int: TimerHandle] = [:]
                let fired = Locked<[Int: [MonotonicInstant]]>([:])
                func newDeadline() -> MonotonicInstant {
                    let delay: Duration =
                        random.next(below: 10) == 0
                        ? .seconds(3600) + .milliseconds(random.next(below: 1000))
                        : .milliseconds(random.next(below: 2000)) + .nanoseconds(random.next(below: 1000))
                    return MonotonicInstant(loop.now) + delay
                }
                func unfired() -> [Int] { deadlines.keys.filter { fired.current[$0] == nil }.sorted() }
                var most = 0
                for step in 0..<4_000 {
                    switch random.next(below: 20) {
                    case 0..<7:
                        let deadline = newDeadline()
                        handles[step] = try backend.schedule(.at(deadline)) { tick in
                            fired.withLock { $0[step, default: []].append(tick.actual) }
                        }
                        deadlines[step] = deadline
                    case 7..<10:
                        let live = unfired()
                        guard !live.isEmpty else { continue }
                        let id = live[random.next(below: live.count)]
                        handles[id]?.cancel()
                        deadlines[id] = nil
                    case 10..<13:
                        let live = unfired()
                        guard !live.isEmpty else { continue }
                        let id = live[random.next(below: live.count)]
                        let deadline = newDeadline()
                        try handles[id]?.reschedule(.at(deadline))
                        deadlines[id] = deadline
                    default:
                        loop.advanceTime(by: .milliseconds(Int64(random.next(below: 1500))))
                        let now = MonotonicInstant(loop.now)
                        let firedNow = fired.current
                        for (id, deadline) in deadlines {
                            if deadline <= now {
                                #expect(firedNow[id] == [deadline], "timer \(id), due at \(deadline), at \(now)")
                            } else {
                                #expect(firedNow[id] == nil, "timer \(id), due at \(deadline), fired early at \(now)")
                            }
                        }
                    }
                    most = max(most, backend.outstandingCallbackCount)
                }
                loop.advanceTime(by: .seconds(7200))
                let firedAtEnd = fired.current
                for (id, deadline) in deadlines { #expect(firedAtEnd[id] == [deadline]) }
                #expect(firedAtEnd.count == deadlines.count, "no cancelled timer fired")
                #expect(most <= NIOBackend.maxOutstandingCallbacks)
            }
        }
    }

    extension NIOCallbackReuseTests {
        /// The review's case on a real loop, driven from the test's thread: a far timer, then
        /// short timers, each awaited. The backend keeps two callbacks on the loop at most.
        @Test func onARealLoopShortTimersBeforeAFarOneLeaveNoCallbacksBehind() throws {
            try withWatchdog(seconds: 60) {
                let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
                defer { try? group.syncShutdownGracefully() }
                let backend = NIOBackend(on: group.next(), registry: TimerRegistry())
                defer { backend.shutdown() }
                let far = Counter()
                try backend.schedule(.after(.seconds(3600))) { _ in far.increment() }
                let shortFired = DispatchSemaphore(value: 0)
                var most = 0
                for _ in 0..<2_000 {
                    try backend.schedule(.after(.microseconds(50))) { _ in shortFired.signal() }
                    most = max(most, backend.outstandingCallbackCount)
                    try #require(shortFired.wait(timeout: .now() + .seconds(10)) == .success, "a short timer did not fire")
                    most = max(most, backend.outstandingCallbackCount)
                }
                #expect(most <= 2)
                #expect(far.current == 0)
                #expect(backend.cancelledCallbackCount == 0)
                // Request timeouts, each cancelled before it fires: no cancel reaches NIO.
                for _ in 0..<2_000 {
                    let timeout = try backend.schedule(.after(.seconds(30))) { _ in }
                    timeout.cancel()
                }
                #expect(backend.cancelledCallbackCount == 0)
                #expect(backend.outstandingCallbackCount <= 2)
            }
        }
    }

    /// A small seeded generator (SplitMix64), so that the random test is the same on every run.
    struct SplitMix64 {
        private var state: UInt64
        init(seed: UInt64) { state = seed }
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func next(below bound: Int) -> Int { Int(next() % UInt64(bound)) }
    }
#endif
