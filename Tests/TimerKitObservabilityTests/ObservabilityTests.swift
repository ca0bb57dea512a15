#if Observability
    import Glibc
    import InMemoryLogging
    import Logging
    import MetricsTestKit
    import Testing
    import TimerKit
    @_spi(BackendImplementation) import TimerKit
    import TimerKitEpoll
    import TimerKitObservability

    /// The adapters, on virtual time, with swift-metrics' and swift-log's test handlers.
    @Suite("Metrics and logs")
    struct ObservabilityTests {
        /// "a" fires on time and takes 3 ms; "b" waits for it and fires 2 ms late; one more timer is
        /// cancelled and one stays live.
        func twoFires(on clock: ManualBackend) throws {
            try clock.schedule(.after(.milliseconds(10)), name: "a") { _ in clock.advance(by: .milliseconds(3)) }
            try clock.schedule(.after(.milliseconds(11)), name: "b") { _ in }
            try clock.schedule(.after(.seconds(5))) { _ in }.cancel()
            try clock.schedule(.after(.seconds(60))) { _ in }
            clock.advance(by: .milliseconds(20))
        }

        @Test func aReportPublishesEveryFigureDimensionedByBackend() throws {
            let metrics = TestMetrics()
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let reporter = try TimerMetricsReporter(backend: clock, factory: metrics, every: nil)
            try twoFires(on: clock)
            reporter.report()
            let backend = [("backend", "manual")]
            #expect(try metrics.expectGauge("timerkit_live_timers", backend).lastValue == 1)
            #expect(try metrics.expectCounter("timerkit_fires", backend).totalValue == 2)
            #expect(try metrics.expectCounter("timerkit_cancels", backend).totalValue == 1)
            #expect(try metrics.expectCounter("timerkit_missed_ticks", backend + [("policy", "skip")]).totalValue == 0)
            // 3 ms of handlers in the 20 ms since the reporter began.
            #expect(try metrics.expectGauge("timerkit_loop_busy_fraction", backend).lastValue == 0.15)
            // "a" on time (the bucket of 0 ns), "b" 2 ms late: in the bucket 1,966,080–2,097,151 ns.
            #expect(metrics.bucketSeries("timerkit_lateness", backend) == ["0": 1, "0.002097151": 2, "+Inf": 2])
            #expect(try metrics.expectCounter("timerkit_lateness_count", backend).totalValue == 2)
            // "b" took no time, "a" 3 ms: in the bucket 2,883,584–3,145,727 ns.
            #expect(metrics.bucketSeries("timerkit_handler_duration", backend) == ["0": 1, "0.003145727": 2, "+Inf": 2])
            #expect(try metrics.expectCounter("timerkit_handler_duration_count", backend).totalValue == 2)
            #expect(metrics.counters(label: "timerkit_lateness_sum").isEmpty && metrics.timers.isEmpty)
        }

        /// Counters get only what was added since the last report; a reset of the statistics in
        /// between starts them from zero rather than going negative.
        @Test func eachReportAddsOnlyWhatIsNew() throws {
            let metrics = TestMetrics()
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let reporter = try TimerMetricsReporter(backend: clock, factory: metrics, every: nil)
            try clock.schedule(.every(.milliseconds(10)), name: "tick") { _ in }
            clock.advance(by: .milliseconds(30))
            reporter.report()
            clock.advance(by: .milliseconds(20))
            reporter.report()
            let fires = try metrics.expectCounter("timerkit_fires", [("backend", "manual")])
            #expect(fires.values == [3, 2] && fires.totalValue == 5)
            clock.resetStatistics()
            clock.advance(by: .milliseconds(10))
            reporter.report()
            #expect(fires.values == [3, 2, 1])
            #expect(try metrics.expectCounter("timerkit_lateness_count", [("backend", "manual")]).values == [3, 2, 1])
            #expect(metrics.bucketSeries("timerkit_lateness", [("backend", "manual")]) == ["0": 6, "+Inf": 6])
        }

        /// With an interval, a timer of the backend starts the reports (they run off its loop);
        /// dropping the reporter stops them.
        @Test func periodicReportsRunOnTheBackendUntilTheReporterGoes() throws {
            let metrics = TestMetrics()
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            var reporter: TimerMetricsReporter? = try TimerMetricsReporter(backend: clock, factory: metrics, every: .seconds(1))
            #expect(reporter != nil)
            #expect(clock.registry.count == 1)  // the report's timer
            clock.advance(by: .seconds(3))
            #expect(waitUntil { metrics.recorders(label: "timerkit_live_timers").first?.values.count == 3 })
            let live = try metrics.expectGauge("timerkit_live_timers", [("backend", "manual")])
            #expect(live.values == [1, 1, 1])
            // A report still running on the reporter's queue holds it a moment longer: its timer
            // goes when the last reference does.
            reporter = nil
            #expect(waitUntil { clock.registry.count == 0 })
            clock.advance(by: .seconds(3))
            #expect(live.values.count == 3)
        }

        @Test func slowHandlersLoopFailuresAndShutdownsAreLogged() throws {
            let logs = InMemoryLogHandler()
            let logger = Logger(label: "timers") { _ in logs }
            let clock = ManualBackend(registry: TimerRegistry())
            TimerEventLogger.log(clock, to: logger)
            clock.slowHandlerThreshold = .milliseconds(2)
            try clock.schedule(.after(.milliseconds(10)), name: "slow") { _ in clock.advance(by: .milliseconds(3)) }
            try clock.schedule(.after(.milliseconds(11)), name: "waiting") { _ in }
            try clock.schedule(.after(.seconds(60)), name: "live") { _ in }
            clock.advance(by: .milliseconds(20))
            clock.scheduler.fail(with: .systemCall(call: "epoll_wait", errno: 9))
            let entries = logs.entries
            #expect(entries.map(\.level) == [.warning, .error, .notice])
            #expect(
                entries.map(\.message.description) == [
                    "slow timer handler", "timer loop failed", "timer backend shut down with live timers",
                ])
            #expect(entries[0].metadata["timer"] == "slow" && entries[0].metadata["duration_ms"] == "3.0")
            #expect(entries[0].metadata["delayed_timers"] == "1" && entries[0].metadata["backend"] == "manual")
            #expect(entries[2].metadata["ended_timers"] == "1")
        }
    }

    extension ObservabilityTests {
        /// The module's landing page shows a server wiring an epoll backend in four lines; they
        /// work as shown (with the test's metrics factory in place of the bootstrapped one).
        @Test func theLandingPagesWiringWorks() throws {
            let metrics = TestMetrics()
            let logs = InMemoryLogHandler()
            let timers = try EpollBackend(registry: TimerRegistry())
            defer { timers.shutdown() }
            timers.slowHandlerThreshold = .milliseconds(10)
            let reporter = try TimerMetricsReporter(backend: timers, factory: metrics)
            TimerEventLogger.log(timers, to: Logger(label: "timers") { _ in logs })
            try timers.schedule(.after(.milliseconds(1)), name: "slow") { _ in usleep(30_000) }
            #expect(waitUntil { logs.entries.contains { $0.metadata["timer"] == "slow" } })
            reporter.report()
            #expect(try metrics.expectCounter("timerkit_fires", [("backend", "epoll")]).totalValue == 1)
            #expect(timers.slowHandlerThreshold == .milliseconds(10))
        }

        /// Polls `condition` every 2 ms for up to 10 s of real time.
        func waitUntil(_ condition: () -> Bool) -> Bool {
            let deadline = ContinuousClock.now + .seconds(10)
            while !condition() {
                if ContinuousClock.now > deadline { return false }
                usleep(2_000)
            }
            return true
        }
    }

    extension ObservabilityTests {
        @Test func aStepOfTheWallClockIsLoggedWithItsSize() throws {
            let logs = InMemoryLogHandler()
            let clock = ManualBackend(start: MonotonicInstant(nanoseconds: 1_000_000_000_000), registry: TimerRegistry())
            defer { clock.shutdown() }
            TimerEventLogger.log(clock, to: Logger(label: "timers") { _ in logs })
            try clock.schedule(.at(date: clock.wallClock.addingTimeInterval(60))) { _ in }
            clock.stepWallClock(by: .seconds(-90))
            let entry = try #require(logs.entries.first)
            #expect(entry.level == .notice && entry.message.description == "wall clock stepped")
            #expect(entry.metadata["clock"] == "wall" && entry.metadata["step_ms"] == "-90000.0")
        }
    }

    extension TestMetrics {
        /// What each `le` series of the histogram `name` holds, by its `le`.
        func bucketSeries(_ name: String, _ dimensions: [(String, String)]) -> [String: Int64] {
            var series: [String: Int64] = [:]
            for counter in counters(label: name + "_bucket") {
                let others = counter.dimensions.filter { $0.0 != "le" }
                guard others.map(\.0) == dimensions.map(\.0) && others.map(\.1) == dimensions.map(\.1) else { continue }
                guard let le = counter.dimensions.first(where: { $0.0 == "le" })?.1 else { continue }
                series[le, default: 0] += counter.totalValue
            }
            return series
        }
    }
#endif
