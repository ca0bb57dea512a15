import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitTestSupport

/// `statistics`, slow-handler reports and backend events, with exact figures on virtual time.
@Suite("Statistics and slow handlers")
struct StatisticsTests {
    let registry = TimerRegistry()

    /// "a" fires on time at 10 ms and takes 3 ms; "b", due at 11 ms, waits for it and fires
    /// 2 ms late. Over the 20 ms since the backend started, handlers ran 3 ms: busy 15 %.
    @Test func figuresAreExactOnVirtualTime() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        try clock.schedule(.after(ms(10)), name: "a") { _ in clock.advance(by: ms(3)) }
        try clock.schedule(.after(ms(11)), name: "b") { _ in }
        try clock.schedule(.after(ms(50)), name: "c") { _ in }.cancel()
        try clock.schedule(.after(ms(60)), name: "d") { _ in }
        clock.advance(by: ms(20))
        let stats = clock.statistics
        #expect(stats.backend == "manual")
        #expect(stats.liveTimers == 1)
        #expect(stats.fires == 2 && stats.cancels == 1)
        #expect(stats.lateness.count == 2 && stats.lateness.max == ms(2))
        #expect(stats.lateness.p50 == .zero && stats.lateness.p99 == ms(2))
        #expect(stats.handlerTime.count == 2 && stats.handlerTime.max == ms(3) && stats.handlerTime.p50 == .zero)
        #expect(stats.busyFraction == 0.15)
        #expect(stats.longestHandler?.name == "a" && stats.longestHandler?.duration == ms(3))
        #expect(stats.at - stats.since == ms(20))
        #expect(stats.missedTicks[.skip] == 0 && stats.missedTicks[.delay] == 0)
    }

    @Test func resetStartsTheFiguresAgainButKeepsTheLiveCount() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        try clock.schedule(.every(ms(10)), name: "tick") { _ in clock.advance(by: ms(1)) }
        clock.advance(by: ms(30))
        #expect(clock.statistics.fires == 3)
        clock.resetStatistics()
        let fresh = clock.statistics
        #expect(fresh.fires == 0 && fresh.cancels == 0 && fresh.lateness.count == 0 && fresh.handlerTime.count == 0)
        #expect(fresh.longestHandler == nil && fresh.busyFraction == 0 && fresh.liveTimers == 1)
        #expect(fresh.lateness.p99 == .zero && fresh.lateness.description == "none")
        clock.advance(by: ms(10))
        #expect(clock.statistics.fires == 1 && clock.statistics.busyFraction == 0.1)
    }

    /// A handler that overruns two grid points: `.skip` drops one and fires the next 5 ms
    /// late; `.delay` restarts the grid, passing over both. The snapshot says which timer (a
    /// live timer's: once it has ended, a handle answers its name, state and fires).
    @Test func missedTicksAreCountedByPolicyAndPerTimer() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let skipping = try clock.schedule(.every(ms(10), count: 3), name: "skipping", missedTicks: .skip) { tick in
            if tick.index == 0 { clock.advance(by: ms(25)) }
        }
        let delaying = try clock.schedule(.every(ms(100), count: 3), name: "delaying", missedTicks: .delay) { tick in
            if tick.index == 0 { clock.advance(by: ms(350)) }
        }
        let before = try #require(skipping.snapshot as TimerSnapshot?)
        #expect(before.lastLateness == nil && before.maxLateness == nil && before.missedTicks == 0)
        clock.advance(by: ms(39))  // the third tick, due at 40 ms, is not yet
        let snapshot = skipping.snapshot
        #expect(snapshot.missedTicks == 1 && snapshot.lastLateness == ms(5) && snapshot.maxLateness == ms(5))
        clock.advance(by: ms(460))  // to 499 ms: its third tick, due at 550 ms, is not yet
        #expect(delaying.snapshot.missedTicks == 2)
        let stats = clock.statistics
        #expect(stats.missedTicks[.skip] == 1 && stats.missedTicks[.delay] == 2 && stats.missedTicks[.burst] == 0)
        clock.advance(by: ms(1000))
        #expect(registry.snapshot().isEmpty)  // both finished
    }

    /// With a threshold, a handler that runs past it is reported once, after its batch, with
    /// the timer's name, the time it took and the timers that came due meanwhile. A quick
    /// handler is not; without a threshold nothing is.
    @Test func aSlowHandlerIsReportedWithItsNameDurationAndTheTimersItDelayed() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let events = Locked<[TimerBackendEvent]>([])
        clock.addEventObserver { event in events.withLock { $0.append(event) } }
        #expect(clock.slowHandlerThreshold == nil)
        try clock.schedule(.after(ms(10)), name: "unreported") { _ in clock.advance(by: ms(50)) }
        clock.advance(by: ms(100))
        #expect(events.current.isEmpty)
        clock.slowHandlerThreshold = ms(2)
        #expect(clock.slowHandlerThreshold == ms(2))
        try clock.schedule(.after(ms(10)), name: "slow") { _ in clock.advance(by: ms(3)) }
        try clock.schedule(.after(ms(11)), name: "waiting") { _ in }
        try clock.schedule(.after(ms(12)), name: "also waiting") { _ in clock.advance(by: ms(1)) }
        try clock.schedule(.after(ms(14)), name: "not yet due") { _ in }
        clock.advance(by: ms(10))
        let reports = events.current.compactMap { event -> SlowHandlerReport? in
            guard case .slowHandler(let report) = event else { return nil }
            return report
        }
        #expect(reports.count == 1)
        let report = try #require(reports.first)
        #expect(report.source == .handler(timer: "slow") && report.backend == "manual")
        #expect(report.duration == ms(3) && report.delayedTimers == 2)
        #expect(report.description == "manual: the handler of slow ran for 0.003 seconds and delayed 2 timers")
        clock.slowHandlerThreshold = nil
        #expect(clock.slowHandlerThreshold == nil)
    }

    /// Observers hear of a loop failure and of shutdown, once, with the timers it ended; they
    /// run outside the lock, so one may call back into the backend.
    @Test func loopFailureAndShutdownAreToldOnceOutsideTheLock() throws {
        let clock = ManualBackend(registry: registry)
        let events = Locked<[String]>([])
        clock.addEventObserver { event in
            _ = clock.statistics  // re-entering TimerKit from the observer must not deadlock
            switch event {
            case .loopFailed(let backend, let cause): events.withLock { $0.append("failed \(backend): \(cause)") }
            case .shutDown(let backend, let ended): events.withLock { $0.append("shut down \(backend): \(ended)") }
            case .slowHandler: events.withLock { $0.append("slow") }
            case .clockChanged: events.withLock { $0.append("clock") }
            }
        }
        try clock.schedule(.after(ms(10))) { _ in }
        try clock.schedule(.every(ms(10))) { _ in }
        withWatchdog { clock.scheduler.fail(with: .systemCall(call: "epoll_wait", errno: 9)) }
        clock.shutdown()
        #expect(
            events.current == [
                "failed manual: \(TimerError.systemCall(call: "epoll_wait", errno: 9))", "shut down manual: 2",
            ])
    }

    /// A bucket spans an eighth of its power of two: a percentile is the bucket's upper bound,
    /// never above the largest value recorded.
    @Test func aBucketIsAnEighthOfItsPowerOfTwo() {
        for value: Int64 in [0, 7, 8, 9, 15, 16, 1_000, 1_000_000, 123_456_789, .max] {
            let width = DurationHistogram.bucketWidth(at: .nanoseconds(value))
            #expect(width <= .nanoseconds(max(1, value / 8)), "\(value) ns")
        }
        #expect(DurationHistogram.bucketWidth(at: .nanoseconds(2_000_000)) == .nanoseconds(131_072))
        #expect(DurationHistogram.bucketWidth(at: .zero) == .nanoseconds(1))
    }
}

extension StatisticsTests {
    /// Twenty timers due together, each handler taking a different time: the lateness of each
    /// call is the sum of the handlers before it, known exactly. Every percentile the histogram
    /// reports is at or above the exact one, at most an eighth above it, and never above the max.
    @Test func percentilesAreAtMostAnEighthAboveTheExactValue() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let deadline = clock.now() + ms(1)
        let takes = (1...20).map { Duration.microseconds($0 * $0 * 37) }
        for take in takes { try clock.schedule(.at(deadline)) { _ in clock.advance(by: take) } }
        clock.advance(by: ms(100))
        var exact: [Duration] = [.zero]
        for take in takes.dropLast() { exact.append((exact.last ?? .zero) + take) }
        let lateness = clock.statistics.lateness
        #expect(lateness.count == 20 && lateness.max == exact.last)
        for percent in [1.0, 10, 25, 50, 75, 90, 95, 99, 100] {
            let rank = max(1, Int((percent / 100 * 20).rounded(.up)))
            let truth = exact[rank - 1]
            let reported = lateness.percentile(percent)
            #expect(reported >= truth && reported <= truth + truth / 8 && reported <= lateness.max, "p\(percent)")
        }
    }

    /// A job of a task on the loop (`taskExecutor`) that runs past the threshold is reported
    /// as a slow task. (On a run loop of its own thread: a Dispatch backend's queue waits for
    /// the global pool's workers, which a full sanitized suite kept busy past the watchdog.)
    @Test func aSlowTaskOnTheLoopIsReported() async throws {
        try await withWatchdog {
            let backend = try RunLoopBackend(registry: registry)
            defer { backend.shutdown() }
            backend.slowHandlerThreshold = ms(10)
            let reports = Locked<[SlowHandlerReport]>([])
            backend.addEventObserver { event in
                if case .slowHandler(let report) = event { reports.withLock { $0.append(report) } }
            }
            await Task(executorPreference: backend.taskExecutor) { blockRealTime(ms(30)) }.value
            #expect(await waitForAsync { !reports.current.isEmpty })
            let report = try #require(reports.current.first)
            #expect(report.source == .task && report.duration >= ms(10) && report.backend == "runloop")
        }
    }
}

extension StatisticsTests {
    /// An observer that captures its backend is let go of at shutdown, so the backend is freed.
    @Test func anObserverThatCapturesItsBackendIsLetGoOfAtShutdown() throws {
        weak var released: ManualBackend?
        do {
            let clock = ManualBackend(registry: registry)
            released = clock
            clock.addEventObserver { _ in _ = clock.statistics }
            try clock.schedule(.after(ms(10))) { _ in }
            clock.shutdown()
        }
        #expect(released == nil)
    }
}
