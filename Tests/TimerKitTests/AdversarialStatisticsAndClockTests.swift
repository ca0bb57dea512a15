import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitTestSupport

// Adversarial tests of three new surfaces: statistics, slow-handler reports and backend events,
// and the continuous/wall clocks with calendar schedules. Each test states the documented
// promise it tries to break.

/// Releases are observable through this flag.
private final class Sentinel: Sendable {
    let released: Locked<Bool>
    init(_ released: Locked<Bool>) { self.released = released }
    deinit { released.withLock { $0 = true } }
}

private final class ActionTarget: Sendable {}

/// A Manual backend 1,000 s (or `startSeconds`) after boot, so that deadlines a forward step
/// moves into the past stay after the monotonic origin.
private func makeManual(
    _ registry: TimerRegistry, startSeconds: UInt64 = 1_000, wallClockStart: Date = Date(timeIntervalSince1970: 1_767_225_600)
) -> ManualBackend {
    ManualBackend(start: MonotonicInstant(nanoseconds: startSeconds * 1_000_000_000), registry: registry, wallClockStart: wallClockStart)
}

/// Whole seconds of the backend's wall clock since `origin` (exact for whole-second steps).
private func wallSeconds(_ clock: ManualBackend, since origin: Date) -> Int {
    Int(clock.wallClock.timeIntervalSince(origin).rounded())
}

/// The nearest-rank value of `sorted` at `percent` (an integer percent), computed exactly.
private func exactPercentile(_ sorted: [Duration], percent: Int) -> Duration {
    let rank = max(1, (percent * sorted.count + 99) / 100)
    return sorted[rank - 1]
}

/// Checks the documented invariants of one histogram; returns what broke.
private func histogramViolations(_ histogram: DurationHistogram, label: String) -> [String] {
    var broken: [String] = []
    if histogram.count == 0 {
        if histogram.max != .zero || histogram.p50 != .zero || histogram.p99 != .zero || !histogram.buckets.isEmpty {
            broken.append("\(label): empty histogram not zero")
        }
        return broken
    }
    if !(histogram.p50 <= histogram.p90 && histogram.p90 <= histogram.p99 && histogram.p99 <= histogram.max) {
        broken.append("\(label): p50 \(histogram.p50) p90 \(histogram.p90) p99 \(histogram.p99) max \(histogram.max)")
    }
    if histogram.percentile(100) != histogram.max {
        broken.append("\(label): p100 \(histogram.percentile(100)) != max \(histogram.max)")
    }
    let buckets = histogram.buckets
    if buckets.reduce(0, { $0 + $1.count }) != histogram.count {
        broken.append("\(label): bucket counts \(buckets.reduce(0) { $0 + $1.count }) != count \(histogram.count)")
    }
    for (a, b) in zip(buckets, buckets.dropFirst()) where !(a.range.upperBound < b.range.lowerBound) {
        broken.append("\(label): buckets overlap or out of order: \(a.range) then \(b.range)")
    }
    if let last = buckets.last, !last.range.contains(histogram.max) {
        broken.append("\(label): max \(histogram.max) is not in the last bucket \(last.range)")
    }
    return broken
}

// MARK: - 1. Statistics

@Suite("Adversarial: statistics")
struct AdversarialStatisticsTests {
    let registry = TimerRegistry()

    /// Promise: `percentile(p)` is the upper bound of the bucket holding the rank, at most 1/8
    /// above the exact (nearest-rank) value, never above max. 100 handler times growing by
    /// 20 % each, so a percentile that lands on the wrong rank is more than 1/8 off.
    @Test func everyIntegerPercentileIsWithinAnEighthOfTheExactRank() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let takes = (0..<100).map { Duration.nanoseconds(Int64((1_000 * pow(1.2, Double($0))).rounded())) }
        let deadline = clock.now() + ms(1)
        for take in takes { try clock.schedule(.at(deadline)) { _ in clock.advance(by: take) } }
        clock.advance(by: ms(2))
        let histogram = clock.statistics.handlerTime
        #expect(histogram.count == 100 && histogram.max == takes.max())
        let sorted = takes.sorted()
        var wrong: [String] = []
        for percent in 1...100 {
            let exact = exactPercentile(sorted, percent: percent)
            let reported = histogram.percentile(Double(percent))
            if reported < exact || reported > exact + exact / 8 || reported > histogram.max {
                wrong.append("p\(percent): reported \(reported), exact \(exact)")
            }
        }
        #expect(wrong.isEmpty, "percentiles off the exact rank: \(wrong)")
    }

    /// Promise: p50 <= p90 <= p99 <= max; percentile never above max; zero when empty; out-of-range
    /// percents are clamped; buckets ascending, disjoint, each no wider than 1/8 of its lower
    /// bound; max exact. Durations from 0 ns to 100 years, in handler time and in lateness.
    @Test func histogramsStayOrderedAndBoundedFromNanosecondsToCenturies() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let year = Duration.seconds(365 * 86_400)
        let takes: [Duration] = [
            .zero, .nanoseconds(1), .nanoseconds(7), .nanoseconds(8), .nanoseconds(9), .microseconds(1), .milliseconds(1),
            .seconds(1), .seconds(3_600), .seconds(86_400), year, year * 100,
        ]
        let deadline = clock.now() + ms(1)
        for take in takes { try clock.schedule(.at(deadline)) { _ in clock.advance(by: take) } }
        clock.advance(by: ms(1))
        let stats = clock.statistics
        var lateness: [Duration] = [.zero]
        for take in takes.dropLast() { lateness.append((lateness.last ?? .zero) + take) }
        #expect(stats.handlerTime.count == takes.count && stats.handlerTime.max == year * 100)
        #expect(stats.lateness.count == takes.count && stats.lateness.max == lateness.last)
        for (histogram, values, label) in [(stats.handlerTime, takes, "handlerTime"), (stats.lateness, lateness, "lateness")] {
            var broken = histogramViolations(histogram, label: label)
            for bucket in histogram.buckets {
                let lower = bucket.range.lowerBound
                let width = bucket.range.upperBound - lower + .nanoseconds(1)
                if width > max(.nanoseconds(1), lower / 8) { broken.append("\(label): bucket \(bucket.range) wider than 1/8") }
            }
            let sorted = values.sorted()
            var previous = Duration.zero
            for percent in stride(from: 0.0, through: 100.0, by: 0.5) {
                let reported = histogram.percentile(percent)
                if reported < previous { broken.append("\(label): percentile(\(percent)) \(reported) < a lower percent's \(previous)") }
                previous = reported
                if reported > histogram.max { broken.append("\(label): percentile(\(percent)) above max") }
                if percent == percent.rounded() {
                    let exact = exactPercentile(sorted, percent: Int(percent))
                    if reported < exact || reported > exact + exact / 8 {
                        broken.append("\(label): p\(percent) \(reported) vs exact \(exact)")
                    }
                }
            }
            if histogram.percentile(-10) != histogram.percentile(0) { broken.append("\(label): -10 not clamped") }
            if histogram.percentile(1_000) != histogram.max { broken.append("\(label): 1000 not clamped") }
            if histogram.percentile(.infinity) != histogram.max { broken.append("\(label): +inf not clamped") }
            if histogram.percentile(.nan) != histogram.percentile(0) { broken.append("\(label): nan not 0") }
            #expect(broken.isEmpty, "\(broken)")
        }
    }

    /// Promise: `bucketWidth(at:)` is the width of the bucket holding the duration: at least
    /// 1 ns and at most an eighth of the value, for any Duration (negative, sub-ns, huge).
    @Test func bucketWidthHoldsForExtremeDurations() {
        let cases: [Duration] = [
            .nanoseconds(-5), .seconds(-1), Duration(secondsComponent: 0, attosecondsComponent: 1), .zero,
            .nanoseconds(Int64.max), .seconds(Int64.max), .nanoseconds(1 << 62), .nanoseconds((1 << 62) - 1),
        ]
        for value in cases {
            let width = DurationHistogram.bucketWidth(at: value)
            #expect(width >= .nanoseconds(1), "\(value)")
            if value > .nanoseconds(8) { #expect(width <= value / 8, "\(value): width \(width)") }
            if value <= .zero { #expect(width == .nanoseconds(1), "\(value): width \(width)") }
        }
    }

    /// Promise: before anything ran, the figures are zero: histograms empty (percentiles zero),
    /// longestHandler nil, busy 0, missedTicks [skip: 0, delay: 0, burst: 0], since <= at.
    @Test func aFreshBackendReportsZeroFigures() {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let stats = clock.statistics
        #expect(histogramViolations(stats.lateness, label: "lateness").isEmpty)
        #expect(histogramViolations(stats.handlerTime, label: "handlerTime").isEmpty)
        #expect(stats.longestHandler == nil && stats.busyFraction == 0 && stats.fires == 0 && stats.cancels == 0)
        #expect(stats.missedTicks == [.skip: 0, .delay: 0, .burst: 0])
        #expect(stats.since <= stats.at && stats.clockChanges == 0 && stats.liveTimers == 0)
    }

    /// Promise: `fires` counts handler calls. A target-action timer whose target is gone when it
    /// comes due never calls its handler: it is a cancel (target released), not a fire.
    @Test func aTickWhoseTargetWasReleasedIsNotCountedAsAFire() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let ran = Counter()
        do {
            let target = ActionTarget()
            try clock.schedule(.after(ms(10)), target: target) { _, _ in ran.increment() }
        }
        clock.advance(by: ms(20))
        let stats = clock.statistics
        #expect(ran.current == 0)
        #expect(stats.cancels == 1, "a released target is a cancel")
        #expect(stats.fires == 0, "no handler call was made, yet fires = \(stats.fires)")
        #expect(stats.lateness.count == 0, "no handler call was made, yet lateness recorded \(stats.lateness.count)")
        #expect(stats.handlerTime.count == 0)
    }

    /// Promise: `cancels` counts timers ended by cancel by handle, by name, by cancelAll, or a
    /// released target; once each; not completions, reschedules or shutdown. Per backend.
    @Test func cancelsCountEveryKindOfCancelOnceAndNothingElse() throws {
        let clock = makeManual(registry)
        let other = makeManual(registry)
        defer { other.shutdown() }
        let a = try clock.schedule(.after(ms(100)), name: "a") { _ in }
        a.cancel()
        a.cancel()
        #expect(clock.statistics.cancels == 1)
        try clock.schedule(.after(ms(100)), name: "b") { _ in }
        try registry.cancel(named: "b")
        #expect(clock.statistics.cancels == 2)
        let c = try clock.schedule(.every(ms(100)), name: "c") { _ in }
        try c.suspend()
        c.cancel()
        #expect(clock.statistics.cancels == 3)
        let d = try clock.schedule(.after(ms(1)), name: "d") { _ in }
        clock.advance(by: ms(2))
        d.cancel()  // already finished
        let e = try clock.schedule(.after(ms(500)), name: "e") { _ in }
        try e.reschedule(.after(ms(600)))
        #expect(clock.statistics.cancels == 3, "completion, a late cancel and a reschedule are not cancels")
        try clock.schedule(.every(ms(10)), name: "self") { tick in tick.timer.cancel() }
        clock.advance(by: ms(10))
        #expect(clock.statistics.cancels == 4, "a handler cancelling its own timer")
        do {
            let target = ActionTarget()
            try clock.schedule(.after(ms(1_000)), target: target, name: "h") { _, _ in }
        }
        #expect(registry.cancelTimersOfReleasedTargets() == 1)
        #expect(clock.statistics.cancels == 5)
        try other.schedule(.after(ms(100)), name: "f") { _ in }
        registry.cancelAll()  // ends e on clock and f on other
        #expect(clock.statistics.cancels == 6 && other.statistics.cancels == 1)
        try clock.schedule(.after(ms(100)), name: "g") { _ in }
        try clock.schedule(.every(ms(100)), name: "g2") { _ in }
        clock.shutdown()
        let after = clock.statistics
        #expect(after.cancels == 6, "shutdown is not a cancel")
        #expect(after.liveTimers == 0)
    }

    /// Promise: busyFraction is the time in handlers since `since` over the time since `since`;
    /// handlerTime/fires are figures since `since`. A reset made inside a handler starts the
    /// figures at that instant: the part of the handler before it is not "since".
    @Test func aResetInsideAHandlerStartsTheFiguresAtTheReset() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        try clock.schedule(.after(.seconds(1)), name: "long") { _ in
            clock.advance(by: .seconds(9))
            clock.resetStatistics()
            clock.advance(by: .seconds(1))
        }
        clock.advance(by: .seconds(1))  // fires at 1 s, returns at 11 s; reset at 10 s
        clock.advance(by: .seconds(1))  // 12 s: 2 s since the reset, 1 s of it in the handler
        let stats = clock.statistics
        #expect(stats.at - stats.since == .seconds(2))
        #expect(stats.busyFraction <= 1 && stats.busyFraction >= 0)
        #expect(abs(stats.busyFraction - 0.5) < 0.01, "busyFraction \(stats.busyFraction): 1 s in handlers over 2 s")
        #expect(stats.handlerTime.max <= stats.at - stats.since, "handler time \(stats.handlerTime.max) > the 2 s window")
        #expect(stats.handlerTime.count <= stats.fires, "handlerTime.count \(stats.handlerTime.count) > fires \(stats.fires)")
    }

    /// Promise: busyFraction = time in handlers / time since `since`, exactly on virtual time,
    /// in 0...1; the longest handler names the timer (a generated name too); reset clears it.
    @Test func busyFractionAndLongestHandlerAreExact() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let unnamed = try clock.schedule(.after(.seconds(1))) { _ in clock.advance(by: .seconds(1)) }
        try clock.schedule(.after(.seconds(3)), name: "short") { _ in clock.advance(by: ms(500)) }
        clock.advance(by: .seconds(1))  // 1 s fires, returns at 2 s
        clock.advance(by: .seconds(2))  // 4 s; "short" fired at 3 s, returned at 3.5 s
        let stats = clock.statistics
        #expect(stats.at - stats.since == .seconds(4))
        #expect(stats.busyFraction == 0.375)
        #expect(stats.longestHandler?.name == unnamed.name && stats.longestHandler?.duration == .seconds(1))
        clock.resetStatistics()
        #expect(clock.statistics.longestHandler == nil && clock.statistics.busyFraction == 0)
        // A handler that runs for all the time since the reset: busy 1, not more.
        try clock.schedule(.after(.zero)) { _ in clock.advance(by: .seconds(5)) }
        clock.runDue()
        #expect(clock.statistics.busyFraction == 1)
    }

    /// Promise: TimerSnapshot (from the handle and `registry.snapshot()`) has lastLateness and
    /// maxLateness nil before the first fire, then exact, and missedTicks; also for a wall timer
    /// fired by a step.
    @Test func snapshotsReportLatenessAndMissedTicksExactly() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let timer = try clock.schedule(.every(ms(10)), name: "r") { _ in }
        let wall = try clock.schedule(.every(.seconds(60), on: .wall), name: "w") { _ in }
        let first = try registry.snapshot(named: "r")
        #expect(first.lastLateness == nil && first.maxLateness == nil && first.missedTicks == 0)
        clock.stall(for: ms(25))
        clock.runDue()  // due at 10 ms, fired at 25: skips 10 ms, fires the 20 ms point 5 ms late
        let late = try #require(registry.snapshot().first { $0.name == "r" })
        #expect(late.lastLateness == ms(5) && late.maxLateness == ms(5) && late.missedTicks == 1)
        clock.advance(by: ms(5))
        #expect(timer.snapshot.lastLateness == .zero && timer.snapshot.maxLateness == ms(5))
        clock.stepWallClock(by: .seconds(150))  // wall timer due at +60 s, wall clock now at +150 s
        let stepped = wall.snapshot
        // Due at wall +60 s, fired at wall +150.03 s: skips the +60 s point, fires the +120 s one 30.03 s late.
        #expect(stepped.fires == 1 && stepped.missedTicks == 1 && stepped.lastLateness == .milliseconds(30_030))
        #expect(stepped.nextDeadline == clock.now() + .milliseconds(29_970))
    }

    /// Promise: statistics can be read from any thread while the loop fires; each reading is
    /// consistent: fires == lateness.count, bucket counts sum to count, percentiles ordered and
    /// under max, busy in 0...1, since <= at, longestHandler nil iff no handler time, and its
    /// duration is handlerTime.max. Resets, threshold changes and observers run concurrently.
    @Test func statisticsReadFromManyThreadsWhileADispatchBackendFiresStayConsistent() throws {
        try withWatchdog(seconds: 60) {
            let backend = DispatchBackend(registry: registry)
            defer { backend.shutdown() }
            let events = Counter()
            backend.addEventObserver { _ in
                _ = backend.statistics
                events.increment()
            }
            // Kept small: under ThreadSanitizer every reading costs milliseconds, and a test that
            // holds both cores for long starves the suite's other tests of the cooperative pool.
            for index in 0..<4 {
                try backend.schedule(.every(.microseconds(1_000 + 100 * index)), name: "t\(index)") { tick in
                    if tick.index % 50 == 0 { blockRealTime(.microseconds(300)) }
                }
            }
            let broken = Locked<[String]>([])
            let reads = Counter()
            let counted = reads
            // A number of readings, not a time: a sanitized build reads many times slower.
            onThreads(3) { thread in
                var reads = 0
                while reads < 20 {
                    if thread == 2 {
                        if reads % 3 == 0 { backend.resetStatistics() }
                        backend.slowHandlerThreshold = reads % 2 == 0 ? .microseconds(100) : nil
                        blockRealTime(.microseconds(700))
                    }
                    let stats = backend.statistics
                    reads += 1
                    counted.increment()
                    var problems = histogramViolations(stats.lateness, label: "lateness")
                    problems += histogramViolations(stats.handlerTime, label: "handlerTime")
                    if stats.fires != stats.lateness.count {
                        problems.append("fires \(stats.fires) != lateness.count \(stats.lateness.count)")
                    }
                    if !(0...1).contains(stats.busyFraction) { problems.append("busy \(stats.busyFraction)") }
                    if stats.since > stats.at { problems.append("since after at") }
                    if (stats.longestHandler == nil) != (stats.handlerTime.count == 0) { problems.append("longestHandler vs count") }
                    if let longest = stats.longestHandler, longest.duration != stats.handlerTime.max {
                        problems.append("longest \(longest.duration) != max \(stats.handlerTime.max)")
                    }
                    if stats.missedTicks[.burst] != 0 { problems.append("burst missed") }
                    if !problems.isEmpty { broken.withLock { $0 += problems } }
                }
            }
            let found = broken.current
            #expect(found.isEmpty, "\(found.count) inconsistent readings, e.g. \(Array(found.prefix(5)))")
            #expect(backend.statistics.liveTimers == 4 && reads.current == 60, "\(reads.current) readings")
        }
    }
}

// MARK: - 2. Slow handlers and events

@Suite("Adversarial: slow handlers and events")
struct AdversarialEventTests {
    let registry = TimerRegistry()

    /// Promise: a threshold below 1 ns counts as 1 ns (zero, negative, sub-nanosecond); then a
    /// handler that takes 1 ns is reported and one that takes no time is not.
    @Test func aThresholdBelowOneNanosecondCountsAsOne() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        for threshold: Duration in [.zero, .nanoseconds(-5), .seconds(-100), Duration(secondsComponent: 0, attosecondsComponent: 1)] {
            clock.slowHandlerThreshold = threshold
            #expect(clock.slowHandlerThreshold == .nanoseconds(1), "\(threshold)")
        }
        let reports = Locked<[String]>([])
        clock.addEventObserver { event in
            if case .slowHandler(let report) = event, case .handler(let name) = report.source { reports.withLock { $0.append(name) } }
        }
        try clock.schedule(.after(ms(1)), name: "instant") { _ in }
        try clock.schedule(.after(ms(2)), name: "one ns") { _ in clock.advance(by: .nanoseconds(1)) }
        clock.advance(by: ms(5))
        #expect(reports.current == ["one ns"])
    }

    /// Promise: a slow report reaches observers after the batch of handlers it was in, and
    /// counts the timers of the backend due when it returned (suspended ones are not waiting).
    @Test func aSlowReportArrivesAfterItsBatchAndCountsTheTimersItDelayed() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        clock.slowHandlerThreshold = ms(2)
        let order = Locked<[String]>([])
        clock.addEventObserver { event in
            if case .slowHandler(let report) = event { order.withLock { $0.append("report delayed=\(report.delayedTimers)") } }
        }
        try clock.schedule(.after(ms(10)), name: "A") { _ in
            order.withLock { $0.append("A") }
            clock.advance(by: ms(5))
        }
        try clock.schedule(.after(ms(10)), name: "B") { _ in order.withLock { $0.append("B") } }
        try clock.schedule(.after(ms(12)), name: "C") { _ in order.withLock { $0.append("C") } }
        try clock.schedule(.after(ms(20)), name: "D") { _ in order.withLock { $0.append("D") } }
        try clock.schedule(.after(ms(11)), name: "E") { _ in order.withLock { $0.append("E") } }.suspend()
        clock.advance(by: ms(10))
        clock.runDue()
        #expect(order.current == ["A", "B", "report delayed=2", "C"])
    }

    /// Promise: delayedTimers counts the other timers due by the time the slow handler
    /// returned; a repeating handler that overran its own next tick does not count itself.
    @Test func aRepeatingSlowHandlerDoesNotCountItsOwnOverdueTick() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        clock.slowHandlerThreshold = ms(1)
        let delayed = Locked<[Int]>([])
        clock.addEventObserver { event in
            if case .slowHandler(let report) = event { delayed.withLock { $0.append(report.delayedTimers) } }
        }
        try clock.schedule(.every(ms(10), count: 2), name: "overrun") { tick in
            if tick.index == 0 { clock.advance(by: ms(25)) }
        }
        clock.advance(by: ms(10))
        #expect(delayed.current == [0], "only other timers count: \(delayed.current)")
    }

    /// Promise: observers run outside the locks and may shut the backend down; the rest of the
    /// batch's wrap-up survives it, no later handler runs, shutdown is told once.
    @Test func anObserverMayShutTheBackendDownFromASlowHandlerReport() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        clock.slowHandlerThreshold = ms(1)
        let told = Locked<[String]>([])
        let ran = Locked<[String]>([])
        clock.addEventObserver { event in
            switch event {
            case .slowHandler:
                told.withLock { $0.append("slow") }
                clock.shutdown()
                told.withLock { $0.append("live=\(clock.statistics.liveTimers)") }
            case .shutDown(_, let ended): told.withLock { $0.append("shutDown \(ended)") }
            default: break
            }
        }
        try clock.schedule(.after(ms(10)), name: "slow") { _ in
            ran.withLock { $0.append("slow") }
            clock.advance(by: ms(5))
        }
        try clock.schedule(.after(ms(12)), name: "next") { _ in ran.withLock { $0.append("next") } }
        try clock.schedule(.every(ms(30)), name: "later") { _ in ran.withLock { $0.append("later") } }
        withWatchdog {
            clock.advance(by: ms(10))
            clock.advance(by: ms(200))
            clock.shutdown()
        }
        #expect(ran.current == ["slow"])
        #expect(told.current == ["slow", "shutDown 2", "live=0"])
        #expect(throws: TimerError.backendShutDown(backend: "manual")) { _ = try clock.schedule(.after(ms(1))) { _ in } }
        #expect(clock.statistics.cancels == 0)
    }

    /// Promise: observers may schedule and cancel from an event: a timer the observer cancels
    /// never fires; one it schedules fires at its time.
    @Test func anObserverMayScheduleAndCancelFromAnEvent() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        clock.slowHandlerThreshold = ms(1)
        let ran = Locked<[String]>([])
        let victim = Locked<TimerHandle?>(nil)
        clock.addEventObserver { event in
            guard case .slowHandler = event else { return }
            victim.withLock { $0 }?.cancel()
            _ = try? clock.schedule(.after(ms(1)), name: "from observer") { _ in ran.withLock { $0.append("from observer") } }
        }
        try clock.schedule(.after(ms(10)), name: "slow") { _ in
            ran.withLock { $0.append("slow") }
            clock.advance(by: ms(5))
        }
        victim.withLock { $0 = try? clock.schedule(.after(ms(50)), name: "victim") { _ in ran.withLock { $0.append("victim") } } }
        withWatchdog { clock.advance(by: ms(100)) }
        #expect(ran.current == ["slow", "from observer"])
        #expect(clock.statistics.cancels == 1 && clock.statistics.fires == 2)
    }

    /// Promise: an observer hears every *later* event: one added from inside an event does
    /// not hear that event, and hears the next.
    @Test func anObserverAddedDuringAnEventHearsOnlyLaterEvents() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        clock.slowHandlerThreshold = ms(1)
        let second = Locked<[Int]>([])
        let added = Locked(false)
        clock.addEventObserver { event in
            guard case .slowHandler = event else { return }
            let first = added.withLock { was in
                defer { was = true }
                return !was
            }
            if first {
                clock.addEventObserver { event in
                    if case .slowHandler(let report) = event { second.withLock { $0.append(Int(report.duration / ms(1))) } }
                }
            }
        }
        try clock.schedule(.after(ms(10))) { _ in clock.advance(by: ms(2)) }
        try clock.schedule(.after(ms(50))) { _ in clock.advance(by: ms(3)) }
        clock.advance(by: ms(100))
        #expect(second.current == [3])
    }

    /// Promise: `.shutDown(endedTimers:)` is told once, even with shutdown called again from
    /// the observer itself and from several threads; it counts suspended timers; shutdown ends
    /// are not cancels.
    @Test func shutdownIsToldOnceAcrossReentrantAndConcurrentCalls() throws {
        let clock = makeManual(registry)
        let told = Locked<[Int]>([])
        let refused = Locked<[TimerError]>([])
        clock.addEventObserver { event in
            guard case .shutDown(_, let ended) = event else { return }
            told.withLock { $0.append(ended) }
            clock.shutdown()  // re-entrant
            do throws(TimerError) { _ = try clock.schedule(.after(ms(1))) { _ in } } catch { refused.withLock { $0.append(error) } }
        }
        try clock.schedule(.after(ms(10))) { _ in }
        try clock.schedule(.every(ms(10))) { _ in }
        try clock.schedule(.every(ms(10))) { _ in }.suspend()
        try clock.schedule(.at(date: clock.wallClock.addingTimeInterval(100))) { _ in }
        withWatchdog {
            onThreads(4) { _ in clock.shutdown() }
            clock.shutdown()
        }
        #expect(told.current == [4])
        #expect(refused.current == [.backendShutDown(backend: "manual")])
        #expect(clock.statistics.cancels == 0 && clock.statistics.liveTimers == 0)
    }

    /// Promise: observers are let go at shutdown (their captures released).
    @Test func observersAndTheirCapturesAreLetGoAtShutdown() throws {
        let released = Locked(false)
        let clock = makeManual(registry)
        do {
            let sentinel = Sentinel(released)
            clock.addEventObserver { _ in _ = sentinel }
        }
        #expect(!released.current)
        clock.shutdown()
        #expect(released.current)
    }

    /// Promise: observers are kept until the backend shuts down, then let go; an observer
    /// capturing its backend must not leak it. One added after the shutdown included.
    @Test func anObserverAddedAfterShutdownDoesNotLeakItsBackend() throws {
        weak var weakBackend: ManualBackend?
        let released = Locked(false)
        do {
            let clock = makeManual(registry)
            weakBackend = clock
            clock.shutdown()
            let sentinel = Sentinel(released)
            clock.addEventObserver { _ in
                _ = clock.statistics
                _ = sentinel
            }
        }
        weak var control: ManualBackend?
        do {
            let clock = makeManual(registry)
            control = clock
            clock.shutdown()
        }
        #expect(control == nil, "control: a shut-down backend without a late observer is freed")
        #expect(weakBackend == nil, "the backend is kept alive by an observer added after its shutdown")
        #expect(released.current, "the observer's captures are never released")
    }

    /// Promise: a threshold set from inside a handler applies to the handlers after it (the
    /// same batch included); set to nil from inside a handler, nothing more is reported.
    @Test func aThresholdChangedInsideAHandlerAppliesToLaterHandlers() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let reports = Locked<[String]>([])
        clock.addEventObserver { event in
            if case .slowHandler(let report) = event, case .handler(let name) = report.source { reports.withLock { $0.append(name) } }
        }
        try clock.schedule(.after(ms(10)), name: "arms") { _ in clock.slowHandlerThreshold = ms(1) }
        try clock.schedule(.after(ms(10)), name: "slow in batch") { _ in clock.advance(by: ms(3)) }
        try clock.schedule(.after(ms(30)), name: "disarms") { _ in
            clock.slowHandlerThreshold = nil
            clock.advance(by: ms(5))
        }
        try clock.schedule(.after(ms(50)), name: "slow later") { _ in clock.advance(by: ms(5)) }
        clock.advance(by: ms(100))
        #expect(reports.current == ["slow in batch"])
    }

    /// Promise: a suspend of the machine is one `.clockChanged` event (clock `.continuous`,
    /// "the wall clock moves with it"), and clockChanges counts each such event.
    @Test func aSuspendIsOneClockChangedEvent() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let changes = Locked<[String]>([])
        clock.addEventObserver { event in
            if case .clockChanged(_, let kind, let step) = event { changes.withLock { $0.append("\(kind) \(step)") } }
        }
        try clock.schedule(.after(.seconds(3_600), on: .wall)) { _ in }
        clock.simulateSuspend(for: .seconds(60))
        #expect(changes.current == ["continuous 60.0 seconds"], "one suspend told as \(changes.current)")
        #expect(clock.statistics.clockChanges == changes.current.count)
    }

    /// Promise: observers may shut the backend down from a `.clockChanged` event; nothing of
    /// it fires afterwards, and the shutdown is told once with the timers it ended.
    @Test func anObserverMayShutTheBackendDownFromAClockChangedEvent() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let told = Locked<[String]>([])
        let fired = Counter()
        clock.addEventObserver { event in
            switch event {
            case .clockChanged:
                told.withLock { $0.append("changed") }
                clock.shutdown()
            case .shutDown(_, let ended): told.withLock { $0.append("shutDown \(ended)") }
            default: break
            }
        }
        try clock.schedule(.at(date: clock.wallClock.addingTimeInterval(10))) { _ in fired.increment() }
        try clock.schedule(.every(.seconds(5), on: .wall)) { _ in fired.increment() }
        withWatchdog {
            clock.stepWallClock(by: .seconds(60))
            clock.advance(by: .seconds(60))
        }
        #expect(fired.current == 0)
        #expect(told.current == ["changed", "shutDown 2"])
    }

    /// Promise (real loop): an observer of a slow-handler report runs on the loop, outside the
    /// locks, and may shut the backend down there without deadlocking; a timer due later never
    /// fires; shutdown is told once.
    @Test func aDispatchObserverMayShutTheBackendDownFromTheLoop() throws {
        try withWatchdog(seconds: 30) {
            let backend = DispatchBackend(registry: registry)
            defer { backend.shutdown() }
            backend.slowHandlerThreshold = ms(20)
            let shutDowns = Counter()
            let slowReports = Counter()
            let later = Counter()
            backend.addEventObserver { event in
                switch event {
                case .slowHandler:
                    slowReports.increment()
                    backend.shutdown()
                case .shutDown: shutDowns.increment()
                default: break
                }
            }
            try backend.schedule(.after(ms(10)), name: "slow") { _ in blockRealTime(ms(250)) }
            try backend.schedule(.after(ms(150)), name: "later") { _ in later.increment() }
            #expect(waitFor(.seconds(10)) { shutDowns.current == 1 })
            blockRealTime(ms(300))
            #expect(later.current == 0 && slowReports.current == 1 && shutDowns.current == 1)
            #expect(backend.scheduler.hasShutDown)
        }
    }
}

// MARK: - 3. Clocks and calendar schedules

@Suite("Adversarial: clocks")
struct AdversarialClockTests {
    let registry = TimerRegistry()

    /// Promise: a wall timer fires at its date (`.at(date:)`, `.after(_:on: .wall)`), and a tick's
    /// clockChanged says whether the clock stepped *since the timer was queued*. Here the wall
    /// clock stepped while no wall timer was live, before these were scheduled.
    @Test func aWallTimerScheduledAfterAStepWhileNoneWasLiveFiresAtItsDate() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        clock.stepWallClock(by: .seconds(3_600))
        let origin = clock.wallClock
        let fired = Locked<[String]>([])
        try clock.schedule(.at(date: origin.addingTimeInterval(10))) { tick in
            fired.withLock { $0.append("at +\(wallSeconds(clock, since: origin)) s changed=\(tick.clockChanged) late=\(tick.lateness)") }
        }
        clock.advance(by: .seconds(10))
        #expect(fired.current == ["at +10 s changed=false late=0.0 seconds"])
        clock.advance(by: .seconds(3_600))
        #expect(fired.current == ["at +10 s changed=false late=0.0 seconds"], "an hour later")
        #expect(clock.statistics.clockChanges == 0, "the step came before any wall timer was live")
    }

    /// Same, with `.after(_:on: .wall)`.
    @Test func anAfterOnWallScheduledAfterAStepWhileNoneWasLiveFiresOnTime() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        clock.stepWallClock(by: .seconds(-3_600))  // back: must not fire early either
        clock.stepWallClock(by: .seconds(7_200))  // net +1 h
        let origin = clock.wallClock
        let fired = Locked<[Int]>([])
        try clock.schedule(.after(.seconds(10), on: .wall)) { _ in fired.withLock { $0.append(wallSeconds(clock, since: origin)) } }
        clock.advance(by: .seconds(10))
        clock.advance(by: .seconds(3_600))
        #expect(fired.current == [10], "fired at wall +\(fired.current) s")
    }

    /// Promise: a continuous timer counts time, suspended time included, from when it is
    /// scheduled. The machine was suspended while no continuous timer was live.
    @Test func aContinuousTimerScheduledAfterASuspendWhileNoneWasLiveFiresOnTime() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        clock.simulateSuspend(for: .seconds(3_600))
        let start = clock.now()
        let fired = Locked<[Duration]>([])
        try clock.schedule(.after(.seconds(10), on: .continuous)) { _ in fired.withLock { $0.append(clock.now() - start) } }
        clock.advance(by: .seconds(10))
        clock.advance(by: .seconds(3_600))
        #expect(fired.current == [.seconds(10)], "fired after \(fired.current)")
    }

    /// Promise: reschedule moves a timer between clocks; a wall timer rescheduled onto the
    /// monotonic clock ignores a step; rescheduled back onto the wall clock, it fires at its
    /// new date (never before, not late).
    @Test func rescheduleWallToMonotonicAndBackAcrossAStep() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let fired = Locked<[String]>([])
        let origin = clock.wallClock
        let timer = try clock.schedule(.at(date: origin.addingTimeInterval(100))) { tick in
            fired.withLock { $0.append("\(tick.clock) +\(wallSeconds(clock, since: origin))") }
        }
        try timer.reschedule(.after(.seconds(50)))
        clock.stepWallClock(by: .seconds(3_600))
        clock.advance(by: .seconds(10))
        #expect(fired.current.isEmpty, "a monotonic timer ignores the step")
        try timer.reschedule(.at(date: clock.wallClock.addingTimeInterval(30)))
        clock.advance(by: .seconds(29))
        #expect(fired.current.isEmpty)
        clock.advance(by: .seconds(1))
        #expect(fired.current == ["wall +3640"], "fired: \(fired.current)")
        clock.advance(by: .seconds(7_200))
        #expect(fired.current == ["wall +3640"], "two hours later")
    }

    /// The same moves with another wall timer live throughout (the backend keeps watching the
    /// wall clock): a control for the test above.
    @Test func rescheduleBetweenClocksWithAnotherWallTimerLive() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let origin = clock.wallClock
        try clock.schedule(.at(date: origin.addingTimeInterval(86_400))) { _ in }
        let fired = Locked<[String]>([])
        let timer = try clock.schedule(.at(date: origin.addingTimeInterval(100))) { tick in
            fired.withLock { $0.append("\(tick.clock) +\(wallSeconds(clock, since: origin))") }
        }
        try timer.reschedule(.after(.seconds(50)))
        clock.stepWallClock(by: .seconds(3_600))
        clock.advance(by: .seconds(10))
        #expect(fired.current.isEmpty)
        try timer.reschedule(.every(.seconds(30), on: .continuous))
        clock.simulateSuspend(for: .seconds(31))
        #expect(fired.current == ["continuous +3641"])
        try timer.reschedule(.at(date: clock.wallClock.addingTimeInterval(30)))
        clock.stepWallClock(by: .seconds(-20))
        clock.advance(by: .seconds(49))
        #expect(fired.current.count == 1)
        clock.advance(by: .seconds(1))
        #expect(fired.current == ["continuous +3641", "wall +3671"])
    }

    /// Promise: repeating wall timers keep their grid through any steps: a step back never
    /// makes one fire before its date, a step forward fires once (skip, delay) or every point
    /// (burst) at once, and advancing fires each point on time. Checked against a model over
    /// 400 random steps and advances, exactly (fire count, wall time of each fire, missed).
    @Test func randomStepsBackAndForthMatchAModelExactly() throws {
        let clock = makeManual(registry, startSeconds: 100_000)
        defer { clock.shutdown() }
        let origin = clock.wallClock
        let interval = 60
        let start = 60  // grid origin + 60 s + k·60 s
        struct Fire: Equatable, CustomStringConvertible {
            var wall: Int
            var missed: Int
            var description: String { "\(wall)/\(missed)" }
        }
        let policies: [MissedTickPolicy] = [.skip, .delay, .burst]
        let logs = policies.map { _ in Locked<[Fire]>([]) }
        for (policy, log) in zip(policies, logs) {
            try clock.schedule(.every(.seconds(interval), from: origin.addingTimeInterval(Double(start))), missedTicks: policy) { tick in
                log.withLock { $0.append(Fire(wall: wallSeconds(clock, since: origin), missed: tick.missed)) }
            }
        }
        // The model: each timer's next due wall time.
        var wall = 0
        var next = policies.map { _ in start }
        var expected = policies.map { _ in [Fire]() }
        var seed: UInt64 = 0x1234_5678
        func random(_ range: ClosedRange<Int>) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return range.lowerBound + Int((seed >> 33) % UInt64(range.count))
        }
        var mismatch: String?
        for step in 0..<400 {
            let isStep = random(0...1) == 0
            let amount = isStep ? random(-400...400) : random(1...200)
            if amount == 0 { continue }
            if isStep {
                wall += amount
                for index in policies.indices where next[index] <= wall {
                    switch policies[index] {
                    case .skip:
                        let behind = (wall - next[index]) / interval
                        expected[index].append(Fire(wall: wall, missed: behind))
                        next[index] += (behind + 1) * interval
                    case .delay:
                        let late = wall - next[index]
                        expected[index].append(Fire(wall: wall, missed: late / interval))
                        next[index] = wall + interval
                    case .burst:
                        while next[index] <= wall {
                            expected[index].append(Fire(wall: wall, missed: 0))
                            next[index] += interval
                        }
                    }
                }
                clock.stepWallClock(by: .seconds(amount))
            } else {
                let target = wall + amount
                for index in policies.indices {
                    while next[index] <= target {
                        expected[index].append(Fire(wall: next[index], missed: 0))
                        next[index] += interval
                    }
                }
                wall = target
                clock.advance(by: .seconds(amount))
            }
            for index in policies.indices where logs[index].current != expected[index] {
                mismatch =
                    "after op \(step) (\(isStep ? "step" : "advance") \(amount) s), \(policies[index]): fired \(logs[index].current.suffix(4)), model \(expected[index].suffix(4))"
                break
            }
            if mismatch != nil { break }
        }
        #expect(mismatch == nil, "\(mismatch ?? "")")
        #expect(logs.allSatisfy { $0.current.count > 100 }, "the model run exercised few fires")
        #expect(wallSeconds(clock, since: origin) == wall)
        let stats = clock.statistics
        #expect(stats.missedTicks[.skip] == expected[0].reduce(0) { $0 + $1.missed })
        #expect(stats.missedTicks[.delay] == expected[1].reduce(0) { $0 + $1.missed })
        #expect(stats.missedTicks[.burst] == 0)
    }

    /// Promise: many wall timers a step jumps past all fire at once, exactly once each, in date
    /// order (Manual fires "in deadline order"), with clockChanged; none past the new time
    /// fires; they fire at their dates later. More than one batch (4,096) of them. The backend
    /// is 100,000 s after boot, so every jumped-past date is still after the monotonic origin.
    @Test func fiveThousandWallTimersAStepJumpsPastFireOnceEachInDateOrder() throws {
        let clock = makeManual(registry, startSeconds: 100_000)
        defer { clock.shutdown() }
        let origin = clock.wallClock
        let fired = Locked<[Int]>([])
        let problems = Locked<[String]>([])
        var order = Array(1...5_200)
        var seed: UInt64 = 42
        for index in order.indices.reversed() {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            order.swapAt(index, Int((seed >> 33) % UInt64(index + 1)))
        }
        for second in order {
            try clock.schedule(.at(date: origin.addingTimeInterval(Double(second)))) { tick in
                fired.withLock { $0.append(second) }
                if wallSeconds(clock, since: origin) < second { problems.withLock { $0.append("\(second) early") } }
                if second <= 5_000 && !tick.clockChanged { problems.withLock { $0.append("\(second) not clockChanged") } }
            }
        }
        clock.stepWallClock(by: .seconds(5_000))
        let atStep = fired.current
        #expect(atStep.sorted() == Array(1...5_000), "fired \(atStep.count) at the step")
        #expect(atStep == atStep.sorted(), "not in date order")
        clock.advance(by: .seconds(200))
        #expect(fired.current.sorted() == Array(1...5_200) && fired.current.count == 5_200)
        #expect(problems.current.isEmpty, "\(problems.current.prefix(5))")
        #expect(clock.statistics.liveTimers == 0 && clock.statistics.fires == 5_200)
    }

    /// Promise: a step jumping wall timers past fires them once each, in date order, even when
    /// the step reaches back before boot (wall timers wait in a queue keyed on the wall clock).
    /// Here the step (1 h) is longer than the time since boot (1,000 s) for the first three.
    @Test func wallTimersJumpedPastTheMonotonicOriginFireInDateOrder() throws {
        let clock = makeManual(registry, startSeconds: 1_000)
        defer { clock.shutdown() }
        let origin = clock.wallClock
        let fired = Locked<[Int]>([])
        for second in [300, 200, 100] {  // scheduled latest date first
            try clock.schedule(.at(date: origin.addingTimeInterval(Double(second)))) { _ in fired.withLock { $0.append(second) } }
        }
        for second in [3_000, 2_900] {
            try clock.schedule(.at(date: origin.addingTimeInterval(Double(second)))) { _ in fired.withLock { $0.append(second) } }
        }
        clock.stepWallClock(by: .seconds(3_600))
        #expect(fired.current == [100, 200, 300, 2_900, 3_000], "fired in the order \(fired.current)")
    }

    /// Promise: a cancelled wall timer never fires, whatever the clock does; a wall timer a
    /// handler in the same step-batch cancels does not fire; a suspended one jumped past fires
    /// once when resumed.
    @Test func cancelledAndSuspendedWallTimersAcrossAStep() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let origin = clock.wallClock
        let fired = Locked<[String]>([])
        let cancelled = try clock.schedule(.at(date: origin.addingTimeInterval(10))) { _ in fired.withLock { $0.append("cancelled") } }
        cancelled.cancel()
        let suspended = try clock.schedule(.every(.seconds(10), from: origin.addingTimeInterval(10))) { _ in
            fired.withLock { $0.append("suspended") }
        }
        try suspended.suspend()
        let victim = try clock.schedule(.at(date: origin.addingTimeInterval(30))) { _ in fired.withLock { $0.append("victim") } }
        try clock.schedule(.at(date: origin.addingTimeInterval(20))) { _ in
            fired.withLock { $0.append("killer") }
            victim.cancel()
        }
        clock.stepWallClock(by: .seconds(100))
        #expect(fired.current == ["killer"])
        clock.stepWallClock(by: .seconds(-200))
        clock.stepWallClock(by: .seconds(300))
        #expect(fired.current == ["killer"])
        try suspended.resume()
        clock.runDue()
        #expect(fired.current == ["killer", "suspended"])
        clock.advance(by: .seconds(10))
        #expect(fired.current == ["killer", "suspended", "suspended"])
    }

    /// Promise: Tick.clockChanged is always false for monotonic timers, and a suspend does not
    /// bring a monotonic deadline nearer.
    @Test func monotonicTicksNeverSayClockChanged() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let log = TickLog()
        try clock.schedule(.every(.seconds(1)), handler: log.record)
        try clock.schedule(.after(.seconds(1_000_000_000), on: .wall)) { _ in }  // keeps the clocks watched
        let oneShot = TickLog()
        try clock.schedule(.after(.seconds(30)), handler: oneShot.record)
        for round in 0..<10 {
            clock.stepWallClock(by: .seconds(round % 2 == 0 ? 100 : -150))
            clock.simulateSuspend(for: .seconds(50))
            clock.advance(by: .milliseconds(1_500))
        }
        #expect(log.count == 15 && log.all.allSatisfy { !$0.clockChanged && $0.clock == .monotonic })
        #expect(oneShot.count == 0, "a suspend does not bring a monotonic deadline nearer")
        clock.advance(by: .seconds(15))
        #expect(oneShot.count == 1 && oneShot.all.first?.clockChanged == false)
    }

    /// Promise: a calendar timer never fires before its date and not twice for one date: after
    /// it fired, a step back over that date does not fire it again; it fires at the next date.
    @Test func aCalendarTimerDoesNotFireAgainAfterAStepBack() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let origin = clock.wallClock  // 2026-01-01 00:00 UTC
        let fired = Locked<[Int]>([])
        try clock.schedule(.daily(at: 6, in: .gmt)) { _ in fired.withLock { $0.append(wallSeconds(clock, since: origin)) } }
        clock.advance(by: .seconds(6 * 3_600))
        #expect(fired.current == [21_600])
        clock.stepWallClock(by: .seconds(-12 * 3_600))
        clock.advance(by: .seconds(12 * 3_600))  // 06:00 on 1 January again
        #expect(fired.current == [21_600])
        clock.advance(by: .seconds(24 * 3_600))
        #expect(fired.current == [21_600, 108_000])
    }

    /// Promise: a calendar timer that comes due late (a suspend, a forward step) fires once,
    /// then at the next matching date after that fire; count limits the calls; a monotonic
    /// timer keeps its deadline through the suspend.
    @Test func aCountedCalendarTimerThroughSuspendAndStep() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let origin = clock.wallClock
        let fired = Locked<[Int]>([])
        let timer = try clock.schedule(.daily(at: 6, in: .gmt, count: 3)) { _ in
            fired.withLock { $0.append(wallSeconds(clock, since: origin)) }
        }
        let monotonic = Counter()
        try clock.schedule(.after(.seconds(3_600))) { _ in monotonic.increment() }
        clock.simulateSuspend(for: .seconds(60 * 3_600))  // 3 January 12:00
        #expect(fired.current == [216_000] && monotonic.current == 0)
        clock.stepWallClock(by: .seconds(2 * 86_400))  // 5 January 12:00: jumped past 4 and 5 January 06:00
        #expect(fired.current == [216_000, 388_800])
        clock.advance(by: .seconds(3_600))
        #expect(monotonic.current == 1)
        clock.advance(by: .seconds(17 * 3_600))  // 6 January 06:00
        #expect(fired.current == [216_000, 388_800, 453_600])
        #expect(timer.currentState == .finished)
        clock.advance(by: .seconds(3 * 86_400))
        #expect(fired.current.count == 3)
    }

    /// Promise: a suspended (paused) calendar timer resumed after several dates fires once,
    /// then at the next date.
    @Test func aPausedCalendarTimerResumesOnceThenKeepsItsDates() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let origin = clock.wallClock
        let fired = Locked<[Int]>([])
        let timer = try clock.schedule(.daily(at: 6, in: .gmt)) { _ in fired.withLock { $0.append(wallSeconds(clock, since: origin)) } }
        try timer.suspend()
        clock.advance(by: .seconds(3 * 86_400))  // 4 January 00:00
        try timer.resume()
        clock.runDue()
        #expect(fired.current == [259_200])
        clock.advance(by: .seconds(6 * 3_600))
        #expect(fired.current == [259_200, 280_800])
    }

    /// Promise: components no date matches throw `invalidOption(name: "calendar components")`
    /// (30 February, 31 April, a year already past, hour 25).
    @Test func componentsNoLaterDateMatchesAreRefused() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = .gmt
        let impossible = [
            DateComponents(month: 2, day: 30), DateComponents(month: 4, day: 31, hour: 12),
            DateComponents(year: 2020, month: 1, day: 1), DateComponents(hour: 25),
        ]
        for components in impossible {
            var outcome = "scheduled"
            do throws(TimerError) {
                let timer = try clock.schedule(.calendar(matching: components, in: utc)) { _ in }
                outcome = "scheduled, next \(String(describing: timer.snapshot.nextDeadline))"
                timer.cancel()
            } catch {
                if case .invalidOption(let name, _, _) = error { outcome = name } else { outcome = "\(error)" }
            }
            #expect(outcome == "calendar components", "\(components): \(outcome)")
        }
    }

    /// Promise: an hourly schedule fires every hour that passes, the repeated one included. At
    /// :30 in New York on 1 November 2026: 01:30 EDT and 01:30 EST both fire.
    @Test func anHourlyCalendarAcrossTheAutumnChangeFiresEveryHour() throws {
        var newYork = Calendar(identifier: .gregorian)
        newYork.timeZone = TimeZone(identifier: "America/New_York") ?? .gmt
        let clock = makeManual(registry, wallClockStart: Date(timeIntervalSince1970: 1_793_505_600))  // 00:00 EDT
        defer { clock.shutdown() }
        let fired = Locked<[Int]>([])
        try clock.schedule(.calendar(matching: DateComponents(minute: 30), in: newYork)) { _ in
            fired.withLock { $0.append(Int(clock.wallClock.timeIntervalSince1970)) }
        }
        for _ in 0..<6 { clock.advance(by: .seconds(3_600)) }
        #expect(
            fired.current == [1_793_507_400, 1_793_511_000, 1_793_514_600, 1_793_518_200, 1_793_521_800, 1_793_525_400], "\(fired.current)")
    }

    /// Promise: dates before 1970 fire at once; `Date.distantFuture` never fires, even after
    /// huge forward steps.
    @Test func datesBefore1970FireAtOnceAndDistantFutureNever() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let early = Counter()
        let never = Counter()
        try clock.schedule(.at(date: Date(timeIntervalSince1970: -86_400 * 365))) { _ in early.increment() }
        try clock.schedule(.every(.seconds(1), from: Date(timeIntervalSince1970: -10), count: 1)) { _ in early.increment() }
        let distant = try clock.schedule(.at(date: .distantFuture)) { _ in never.increment() }
        clock.runDue()
        #expect(early.current == 2)
        clock.stepWallClock(by: .seconds(200 * 365 * 86_400))
        clock.advance(by: .seconds(1_000 * 86_400))
        clock.stepWallClock(by: .nanoseconds(Int64.max))
        clock.advance(by: .seconds(1))
        #expect(never.current == 0 && distant.currentState == .scheduled)
    }

    /// Promise: none fires before its date. A step back of 150 µs (a virtual clock: nothing
    /// to confuse with read noise).
    @Test func aSmallBackwardStepNeverFiresAWallTimerEarly() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let start = clock.now()
        let firedAt = Locked<[Duration]>([])
        try clock.schedule(.after(.microseconds(100), on: .wall)) { _ in firedAt.withLock { $0.append(clock.now() - start) } }
        clock.stepWallClock(by: .microseconds(-150))  // the date is now 250 µs away
        clock.advance(by: .milliseconds(1))
        #expect(firedAt.current == [.microseconds(250)], "fired after \(firedAt.current) of monotonic time")
    }

    /// Promise: a step forward past a wall timer's date fires it at once. A step of 150 µs.
    @Test func aSmallForwardStepFiresWhatItJumpedPastAtOnce() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let fired = TickLog()
        try clock.schedule(.after(.microseconds(100), on: .wall), handler: fired.record)
        clock.stepWallClock(by: .microseconds(150))
        #expect(fired.count == 1, "not fired at the step")
    }

    /// Promise: wall timers fire at their date for any `wallClockStart` (and steps there).
    /// Here the virtual wall clock starts in 2120.
    @Test func wallTimersFireWithAWallClockIn2120() throws {
        let clock = makeManual(registry, wallClockStart: Date(timeIntervalSince1970: 4_733_510_400))
        defer { clock.shutdown() }
        let fired = Locked<[String]>([])
        try clock.schedule(.after(.seconds(10), on: .wall)) { _ in fired.withLock { $0.append("after") } }
        try clock.schedule(.at(date: clock.wallClock.addingTimeInterval(20))) { _ in fired.withLock { $0.append("at") } }
        clock.advance(by: .seconds(30))
        #expect(fired.current == ["after", "at"])
    }

    /// Attack: a wall step made inside a handler (the documentation asks to step from the test,
    /// so this is an abuse): still no wall timer fires before its date, and one it jumped past
    /// fires once.
    @Test func aWallStepInsideAHandlerNeverFiresEarly() throws {
        let clock = makeManual(registry)
        defer { clock.shutdown() }
        let origin = clock.wallClock
        let fired = Locked<[String]>([])
        try clock.schedule(.after(.seconds(10)), name: "stepper") { _ in clock.stepWallClock(by: .seconds(200)) }
        try clock.schedule(.at(date: origin.addingTimeInterval(100))) { tick in
            fired.withLock { $0.append("jumped +\(wallSeconds(clock, since: origin)) changed=\(tick.clockChanged)") }
        }
        try clock.schedule(.at(date: origin.addingTimeInterval(5_000))) { _ in
            fired.withLock { $0.append("far +\(wallSeconds(clock, since: origin))") }
        }
        clock.advance(by: .seconds(10))
        #expect(fired.current == ["jumped +210 changed=true"])
        clock.advance(by: .seconds(4_789))
        #expect(fired.current.count == 1)
        clock.advance(by: .seconds(1))
        #expect(fired.current == ["jumped +210 changed=true", "far +5000"])
    }
}
