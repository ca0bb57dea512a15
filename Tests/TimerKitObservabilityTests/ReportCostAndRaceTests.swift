#if Observability
    import CoreMetrics
    import Dispatch
    import Foundation
    import MetricsTestKit
    import Synchronization
    import Testing
    import TimerKit
    import TimerKitObservability

    /// What one report costs in metric calls, what its histogram series hold, and reports racing
    /// each other.
    @Suite("Metrics reports: cost, buckets and races")
    struct ReportCostAndRaceTests {
        let backend = [("backend", "manual")]

        /// A repeating timer whose handler takes a varying share of virtual time, and one beside it
        /// that it makes late: both histograms spread over many buckets.
        func spreadWork(on clock: ManualBackend) throws {
            try clock.schedule(.every(.microseconds(10)), name: "work") { tick in
                clock.advance(by: .nanoseconds(Int64((tick.index &* 7_919) % 15_000)))
            }
            try clock.schedule(.every(.microseconds(7)), name: "beside") { _ in }
        }

        /// Every call the reporter made into the factory's handlers.
        func metricCalls(_ metrics: TestMetrics) -> Int {
            metrics.counters.reduce(0) { $0 + $1.values.count } + metrics.recorders.reduce(0) { $0 + $1.values.count }
                + metrics.timers.reduce(0) { $0 + $1.values.count } + metrics.meters.reduce(0) { $0 + $1.values.count }
        }

        /// What the `le` series of a reporter made before the first call should hold for
        /// `histogram`: each bucket's upper bound, in seconds, counts the calls at or below it.
        func expectedSeries(_ histogram: DurationHistogram) -> [String: Int64] {
            var series: [String: Int64] = ["+Inf": Int64(histogram.count)]
            var below = 0
            for bucket in histogram.buckets {
                below += bucket.count
                let (seconds, attoseconds) = bucket.range.upperBound.components
                let nanoseconds = Decimal(seconds) * 1_000_000_000 + Decimal(attoseconds / 1_000_000_000)
                series["\(nanoseconds / 1_000_000_000)"] = Int64(below)
            }
            return series
        }

        @Test func oneReportAfterManyFiresMakesOneCallPerFilledBucket() throws {
            let metrics = TestMetrics()
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let reporter = try TimerMetricsReporter(backend: clock, factory: metrics, every: nil)
            try spreadWork(on: clock)
            clock.advance(by: .seconds(1))
            let statistics = clock.statistics
            #expect(statistics.fires >= 100_000)
            let before = metricCalls(metrics)
            reporter.report()
            let calls = metricCalls(metrics) - before
            // Six gauges and counters; per histogram, one call per filled bucket and two more.
            #expect(calls == 6 + statistics.lateness.buckets.count + 2 + statistics.handlerTime.buckets.count + 2)
            #expect(calls <= 1_002, "\(calls) metric calls for \(statistics.fires) fires")
            #expect(statistics.lateness.buckets.count > 20 && statistics.handlerTime.buckets.count > 20)
            #expect(metrics.bucketSeries("timerkit_lateness", backend) == expectedSeries(statistics.lateness))
            #expect(metrics.bucketSeries("timerkit_handler_duration", backend) == expectedSeries(statistics.handlerTime))
        }

        /// A bucket that fills after the first report, below a bound that already has its series,
        /// gets a series holding every call at or below it since the reporter began, not only
        /// those since it appeared.
        @Test func aBucketFilledLaterGetsASeriesHoldingEverythingBelowIt() throws {
            let metrics = TestMetrics()
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let reporter = try TimerMetricsReporter(backend: clock, factory: metrics, every: nil)
            // "a" is on time and takes 5 ms; "b", due with it, waits for it.
            try clock.schedule(.after(.milliseconds(10)), name: "a") { _ in clock.advance(by: .milliseconds(5)) }
            try clock.schedule(.after(.milliseconds(10)), name: "b") { _ in }
            clock.advance(by: .milliseconds(20))
            reporter.report()
            // 5 ms lies in the bucket 4,718,592–5,242,879 ns.
            #expect(metrics.bucketSeries("timerkit_lateness", backend) == ["0": 1, "0.005242879": 2, "+Inf": 2])
            // The same again, 1 µs long: a bucket (960–1,023 ns) between the two.
            try clock.schedule(.after(.milliseconds(10)), name: "c") { _ in clock.advance(by: .microseconds(1)) }
            try clock.schedule(.after(.milliseconds(10)), name: "d") { _ in }
            clock.advance(by: .milliseconds(20))
            reporter.report()
            #expect(
                metrics.bucketSeries("timerkit_lateness", backend) == ["0": 2, "0.000001023": 3, "0.005242879": 4, "+Inf": 4])
            #expect(try metrics.expectCounter("timerkit_lateness_bucket", backend + [("le", "0.000001023")]).values == [3])
            let statistics = clock.statistics
            #expect(metrics.bucketSeries("timerkit_lateness", backend) == expectedSeries(statistics.lateness))
            #expect(metrics.bucketSeries("timerkit_handler_duration", backend) == expectedSeries(statistics.handlerTime))
        }

        /// Reports called from eight threads while a periodic reporter runs beside them and
        /// another thread fires timers: the counters add up to exactly what the backend counted,
        /// and the live-timer gauge (which only grows here) is published in the order the
        /// statistics were read.
        @Test func concurrentReportsNeitherCountTwiceNorLoseAny() throws {
            let metrics = TestMetrics()
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let reporter = try TimerMetricsReporter(backend: clock, factory: metrics, every: .microseconds(300))
            try spreadWork(on: clock)
            let threads = DispatchGroup()
            threads.enter()
            Thread.detachNewThread {
                for step in 0..<2_000 {
                    clock.advance(by: .microseconds(100))
                    if step % 100 == 0 { _ = try? clock.schedule(.after(.seconds(3_600))) { _ in } }
                }
                threads.leave()
            }
            // Threads of their own rather than Dispatch's pool, which runs only as many busy
            // blocks at once as there are cores: more threads than cores are what interleave.
            for _ in 0..<8 {
                threads.enter()
                Thread.detachNewThread {
                    for _ in 0..<200 { reporter.report() }
                    threads.leave()
                }
            }
            #expect(threads.wait(timeout: .now() + 60) == .success, "watchdog: the threads did not finish in 60 s")
            // The periodic reports came from the fires, all over by now: this one follows them.
            reporter.report()
            let statistics = clock.statistics
            #expect(try metrics.expectCounter("timerkit_fires", backend).totalValue == Int64(statistics.fires))
            let live = try metrics.expectGauge("timerkit_live_timers", backend).values
            #expect(live.last == Double(statistics.liveTimers))
            #expect(zip(live, live.dropFirst()).allSatisfy { $0 <= $1 }, "the gauge went back")
            #expect(try metrics.expectCounter("timerkit_lateness_count", backend).totalValue == Int64(statistics.lateness.count))
            #expect(metrics.bucketSeries("timerkit_lateness", backend) == expectedSeries(statistics.lateness))
            #expect(metrics.bucketSeries("timerkit_handler_duration", backend) == expectedSeries(statistics.handlerTime))
        }

        /// A metrics handler that calls `report()` while a report is being published does not
        /// wait for itself: it returns, and its figures follow.
        @Test func aReportFromAMetricsHandlerReturns() throws {
            let metrics = CallingBackMetrics()
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let reporter = try TimerMetricsReporter(backend: clock, factory: metrics, every: nil)
            let calls = Atomic(0)
            metrics.onFires.withLock { $0 = { if calls.add(1, ordering: .relaxed).newValue == 1 { reporter.report() } } }
            // The callback holds the reporter, which holds the metrics: let go of it at the end
            // (AddressSanitizer's leak check saw the cycle).
            defer { metrics.onFires.withLock { $0 = nil } }
            try clock.schedule(.every(.milliseconds(1))) { _ in }
            clock.advance(by: .milliseconds(3))
            let returned = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                reporter.report()
                returned.signal()
            }
            #expect(returned.wait(timeout: .now() + 10) == .success, "watchdog: report() did not return in 10 s")
            reporter.report()
            #expect(try metrics.inner.expectCounter("timerkit_fires", backend).values == [3, 0, 0])
        }
    }

    /// Swift-metrics' test handlers, with a callback run whenever the `timerkit_fires` counter
    /// is incremented.
    final class CallingBackMetrics: MetricsFactory, Sendable {
        let inner = TestMetrics()
        let onFires = Mutex<(@Sendable () -> Void)?>(nil)

        private final class Counter: CounterHandler, Sendable {
            let inner: CounterHandler
            let factory: CallingBackMetrics

            init(_ inner: CounterHandler, _ factory: CallingBackMetrics) {
                self.inner = inner
                self.factory = factory
            }

            func increment(by amount: Int64) {
                inner.increment(by: amount)
                factory.onFires.withLock { $0 }?()
            }

            func reset() { inner.reset() }
        }

        func makeCounter(label: String, dimensions: [(String, String)]) -> CounterHandler {
            let counter = inner.makeCounter(label: label, dimensions: dimensions)
            return label == "timerkit_fires" ? Counter(counter, self) : counter
        }

        func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> RecorderHandler {
            inner.makeRecorder(label: label, dimensions: dimensions, aggregate: aggregate)
        }

        func makeTimer(label: String, dimensions: [(String, String)]) -> TimerHandler {
            inner.makeTimer(label: label, dimensions: dimensions)
        }
        func destroyCounter(_ handler: CounterHandler) {}
        func destroyRecorder(_ handler: RecorderHandler) {}
        func destroyTimer(_ handler: TimerHandler) {}
    }
#endif
