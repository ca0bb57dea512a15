#if Observability
    import CoreMetrics
    import Dispatch
    import Glibc
    import Synchronization
    import TimerKit

    /// Publishes a backend's `TimerBackend.statistics` to swift-metrics, every
    /// `interval` and whenever ``report()`` is called, dimensioned by the backend's name
    /// (`backend`).
    ///
    /// | metric | kind | what |
    /// |---|---|---|
    /// | `timerkit_live_timers` | gauge | timers live on the backend |
    /// | `timerkit_loop_busy_fraction` | gauge | share of the time since the previous report (or since the reporter was made) the loop spent in handlers and tasks (0–1) |
    /// | `timerkit_fires` | counter | handler calls |
    /// | `timerkit_cancels` | counter | timers cancelled |
    /// | `timerkit_missed_ticks` | counter | grid points missed, dimensioned by `policy` (`skip`, `delay`) |
    /// | `timerkit_lateness_bucket` | counter, dimensioned by `le` | handler calls that began at most `le` seconds late |
    /// | `timerkit_lateness_count` | counter | handler calls whose lateness was recorded |
    /// | `timerkit_handler_duration_bucket` | counter, dimensioned by `le` | handler calls that ran at most `le` seconds |
    /// | `timerkit_handler_duration_count` | counter | handler calls whose duration was recorded |
    ///
    /// The lateness and handler-time histograms are exported as a Prometheus histogram's buckets
    /// are, in the layout `histogram_quantile` reads: cumulative counters by upper bound `le`.
    /// Each `le` is `+Inf` or the upper bound of one of the backend's buckets (eight per power of
    /// two), in seconds, written out exactly to the nanosecond ("0.002097151"). A bound gets its
    /// series at the first report after a handler call lands in its bucket, and that series then
    /// holds every call at or below it since the reporter began, not only those since it
    /// appeared. There is no `_sum`: the backend keeps no sum of durations.
    ///
    /// So a report makes at most one metric call per bucket that has held a call since the
    /// reporter began, two more per histogram and six for the other figures: at most 1,002,
    /// however many handler calls it covers. Nothing is added to the fire path: the figures are
    /// read from `statistics` when the report runs. A repeating timer of the backend starts each
    /// periodic report (it counts among the backend's fires and live timers); periodic reports
    /// are read, and all reports published, on a Dispatch queue of the reporter's own, never on
    /// the backend's loop.
    ///
    /// Reports are published one at a time, in the order they read the statistics, whether
    /// periodic or called from any number of threads: each handler call is counted once, and
    /// the gauges end at the latest report's figures.
    public final class TimerMetricsReporter: Sendable {
        private let backend: any TimerBackend
        private let metrics: Metrics
        /// The statistics the latest report read, and what the histograms' series hold. A report
        /// reads the statistics and takes what they gained under this lock, in one go, so that
        /// no two reports take the same gain. The lock is taken before the backend's own (which
        /// reading `statistics` takes), never under them, and no user code runs under it.
        private let state: Locked<State>
        private let timer = Locked<TimerHandle?>(nil)
        /// Where reports are published (and the periodic ones taken): off the loop, one at a time,
        /// in the order they were taken, which is the order they were queued in.
        private let reports = DispatchQueue(label: "timerkit.metrics-reporter")
        /// The thread publishing on `reports` (0: none), so that a `report()` made from a metrics
        /// handler while publishing does not wait for the queue, that is for itself.
        private let publishingThread = Atomic<UInt>(0)

        /// Metric handles, made once; the histograms' `le` series are made as buckets fill.
        private struct Metrics: Sendable {
            let live: Gauge
            let busy: Gauge
            let fires: Counter
            let cancels: Counter
            let skipped: Counter
            let delayed: Counter
            let lateness: HistogramSeries
            let handlerTime: HistogramSeries
        }

        /// Starts reporting `backend`'s statistics to `factory` every `interval`.
        ///
        /// - Parameters:
        ///   - backend: The backend whose figures are published.
        ///   - factory: Where metrics go: by default the process's `MetricsSystem`.
        ///   - interval: How often the figures are published; nil publishes only when
        ///     ``report()`` is called.
        /// - Throws: What scheduling on `backend` throws (a backend that has shut down), and
        ///   `TimerError.zeroInterval` for an interval of zero.
        public init(
            backend: any TimerBackend, factory: any MetricsFactory = MetricsSystem.factory, every interval: Duration? = .seconds(10)
        )
            throws(TimerError)
        {
            self.backend = backend
            let dimensions = [("backend", backend.name)]
            metrics = Metrics(
                live: Gauge(label: "timerkit_live_timers", dimensions: dimensions, factory: factory),
                busy: Gauge(label: "timerkit_loop_busy_fraction", dimensions: dimensions, factory: factory),
                fires: Counter(label: "timerkit_fires", dimensions: dimensions, factory: factory),
                cancels: Counter(label: "timerkit_cancels", dimensions: dimensions, factory: factory),
                skipped: Counter(label: "timerkit_missed_ticks", dimensions: dimensions + [("policy", "skip")], factory: factory),
                delayed: Counter(label: "timerkit_missed_ticks", dimensions: dimensions + [("policy", "delay")], factory: factory),
                lateness: HistogramSeries(name: "timerkit_lateness", dimensions: dimensions, factory: factory),
                handlerTime: HistogramSeries(name: "timerkit_handler_duration", dimensions: dimensions, factory: factory))
            state = Locked(State(previous: backend.statistics))
            if let interval {
                let reporter = WeakReporter(self)
                let reports = self.reports
                let handle = try backend.schedule(.every(interval)) { _ in reports.async { reporter.reporter?.take() } }
                timer.withLock { $0 = handle }
            }
        }

        /// Publishes the figures now: the gauges' current values, and what the counters gained
        /// since the previous report (or since the reporter was made). It returns once they are
        /// published, after any report taken before it; called from a metrics handler while a
        /// report is being published, it returns at once and its figures follow that report's.
        public func report() {
            take()
            guard publishingThread.load(ordering: .acquiring) != UInt(pthread_self()) else { return }
            reports.sync {}
        }

        /// Stops the periodic reports. Idempotent; ``report()`` still publishes when called.
        public func stop() {
            let handle = timer.withLock { $0 }
            handle?.cancel()
        }

        deinit { stop() }

        /// Reads the statistics, takes what they gained since the previous report, and queues
        /// its publication, all under `state`'s lock: reports are published in the order they
        /// were taken, so a gauge never goes back to an older report's value.
        private func take() {
            state.withLock { state in
                let report = state.take(backend.statistics)
                reports.async { self.publish(report) }
            }
        }

        /// Runs on `reports`, outside every lock of the reporter's: the handlers are the metrics
        /// backend's code.
        private func publish(_ report: Report) {
            publishingThread.store(UInt(pthread_self()), ordering: .releasing)
            defer { publishingThread.store(0, ordering: .releasing) }
            metrics.live.record(report.liveTimers)
            metrics.busy.record(report.busyFraction)
            metrics.fires.increment(by: report.fires)
            metrics.cancels.increment(by: report.cancels)
            metrics.skipped.increment(by: report.skipped)
            metrics.delayed.increment(by: report.delayed)
            metrics.lateness.publish(report.lateness)
            metrics.handlerTime.publish(report.handlerTime)
        }
    }

    /// What one report publishes.
    private struct Report: Sendable {
        var liveTimers: Int
        var busyFraction: Double
        var fires: Int
        var cancels: Int
        var skipped: Int
        var delayed: Int
        var lateness: HistogramGain
        var handlerTime: HistogramGain
    }

    /// What a histogram's series gain in one report: each `le` series that gains (by the bound in
    /// nanoseconds, increasing), and the calls added in all (the `+Inf` series and `_count`).
    private struct HistogramGain: Sendable {
        var bounds: [Bound]
        var count: Int

        struct Bound: Sendable {
            var nanoseconds: Int64
            var increment: Int
        }
    }

    /// What the reports have taken so far.
    private struct State: Sendable {
        var previous: TimerStatistics
        var lateness: BucketTotals
        var handlerTime: BucketTotals

        init(previous: TimerStatistics) {
            self.previous = previous
            lateness = BucketTotals(previous.lateness)
            handlerTime = BucketTotals(previous.handlerTime)
        }

        /// What `now` gained over the previous report's statistics; `now` becomes the previous.
        mutating func take(_ now: TimerStatistics) -> Report {
            // A `resetStatistics()` in between starts the figures again: count from zero.
            let base = previous.since == now.since ? previous : nil
            previous = now
            let busyNow = now.busyFraction * Double((now.at - now.since).nanosecondsValue)
            let busyBefore = base.map { $0.busyFraction * Double(($0.at - $0.since).nanosecondsValue) } ?? 0
            let elapsed = Double((now.at - (base?.at ?? now.since)).nanosecondsValue)
            return Report(
                liveTimers: now.liveTimers,
                busyFraction: elapsed > 0 ? min(1, max(0, (busyNow - busyBefore) / elapsed)) : 0,
                fires: max(0, now.fires - (base?.fires ?? 0)),
                cancels: max(0, now.cancels - (base?.cancels ?? 0)),
                skipped: max(0, (now.missedTicks[.skip] ?? 0) - (base?.missedTicks[.skip] ?? 0)),
                delayed: max(0, (now.missedTicks[.delay] ?? 0) - (base?.missedTicks[.delay] ?? 0)),
                lateness: lateness.add(now.lateness, continuing: base != nil),
                handlerTime: handlerTime.add(now.handlerTime, continuing: base != nil))
        }
    }

    /// Calls by bucket, each bucket named by its upper bound in nanoseconds, in increasing order;
    /// buckets without calls are left out.
    private typealias CallsByBucket = [(nanoseconds: Int64, calls: Int)]

    /// A histogram as the previous report read it, and the calls its `le` series have counted
    /// since the reporter began, bucket by bucket (each series holds the calls of its bucket
    /// and of every bucket below).
    private struct BucketTotals: Sendable {
        private var previous: CallsByBucket
        /// Only buckets that have held a call, that is, that have a series.
        private var totals: CallsByBucket = []

        init(_ histogram: DurationHistogram) { previous = Self.calls(in: histogram) }

        /// Adds what `histogram` gained over the previous one read (all of it unless
        /// `continuing`: the statistics were reset in between) and returns what each series
        /// gains: an existing one, the calls added at or below its bound; a new one, every call
        /// at or below its bound so far, since it starts from zero.
        mutating func add(_ histogram: DurationHistogram, continuing: Bool) -> HistogramGain {
            let now = Self.calls(in: histogram)
            let added = Self.merge(now, continuing ? previous : []) { max(0, $0 - $1) }
            previous = now
            let merged = Self.merge(totals, added, +)
            var gain = HistogramGain(bounds: [], count: 0)
            var (old, new, totalBelow) = (0, 0, 0)
            for bucket in merged {
                var (before, adding) = (0, 0)
                if old < totals.count && totals[old].nanoseconds == bucket.nanoseconds {
                    before = totals[old].calls
                    old += 1
                }
                if new < added.count && added[new].nanoseconds == bucket.nanoseconds {
                    adding = added[new].calls
                    new += 1
                }
                gain.count += adding
                totalBelow += before + adding
                let increment = before > 0 ? gain.count : totalBelow
                if increment > 0 { gain.bounds.append(.init(nanoseconds: bucket.nanoseconds, increment: increment)) }
            }
            totals = merged
            return gain
        }

        /// `histogram`'s calls by bucket bound. (The topmost buckets, past 2^63 ns, share one
        /// bound: their calls are counted together.)
        static func calls(in histogram: DurationHistogram) -> CallsByBucket {
            var calls: CallsByBucket = []
            for bucket in histogram.buckets {
                let bound = bucket.range.upperBound.nanosecondsValue
                if let last = calls.last, last.nanoseconds == bound {
                    calls[calls.count - 1].calls += bucket.count
                } else {
                    calls.append((bound, bucket.count))
                }
            }
            return calls
        }

        /// The buckets of `a` and `b`, each with `combine` of its calls in each (zero where it is
        /// absent); buckets where that is zero are left out.
        static func merge(_ a: CallsByBucket, _ b: CallsByBucket, _ combine: (Int, Int) -> Int) -> CallsByBucket {
            var merged: CallsByBucket = []
            merged.reserveCapacity(max(a.count, b.count))
            var (i, j) = (0, 0)
            while i < a.count || j < b.count {
                let bound = min(i < a.count ? a[i].nanoseconds : .max, j < b.count ? b[j].nanoseconds : .max)
                var (x, y) = (0, 0)
                if i < a.count && a[i].nanoseconds == bound {
                    x = a[i].calls
                    i += 1
                }
                if j < b.count && b[j].nanoseconds == bound {
                    y = b[j].calls
                    j += 1
                }
                let calls = combine(x, y)
                if calls != 0 { merged.append((bound, calls)) }
            }
            return merged
        }
    }

    /// A histogram's counters: `<name>_bucket` by `le`, and `<name>_count`.
    private final class HistogramSeries: Sendable {
        private let bucketLabel: String
        private let dimensions: [(String, String)]
        private let factory: any MetricsFactory
        private let infinity: Counter
        private let count: Counter
        /// The `le` series made so far, by bound in nanoseconds. Made outside the lock (the factory
        /// is user code), on the reporter's queue only, so no two are made for one bound.
        private let bounds = Locked<[Int64: Counter]>([:])

        init(name: String, dimensions: [(String, String)], factory: any MetricsFactory) {
            bucketLabel = name + "_bucket"
            self.dimensions = dimensions
            self.factory = factory
            infinity = Counter(label: bucketLabel, dimensions: dimensions + [("le", "+Inf")], factory: factory)
            count = Counter(label: name + "_count", dimensions: dimensions, factory: factory)
        }

        func publish(_ gain: HistogramGain) {
            for bound in gain.bounds { series(for: bound.nanoseconds).increment(by: bound.increment) }
            infinity.increment(by: gain.count)
            count.increment(by: gain.count)
        }

        private func series(for nanoseconds: Int64) -> Counter {
            if let made = bounds.withLock({ $0[nanoseconds] }) { return made }
            let made = Counter(label: bucketLabel, dimensions: dimensions + [("le", Self.seconds(nanoseconds))], factory: factory)
            bounds.withLock { $0[nanoseconds] = made }
            return made
        }

        /// `nanoseconds` in seconds, exactly: "0", "0.000001023", "2.5".
        static func seconds(_ nanoseconds: Int64) -> String {
            let (whole, fraction) = nanoseconds.quotientAndRemainder(dividingBy: 1_000_000_000)
            guard fraction > 0 else { return String(whole) }
            var digits = String(fraction)
            digits = String(repeating: "0", count: 9 - digits.count) + digits
            while digits.last == "0" { digits.removeLast() }
            return "\(whole).\(digits)"
        }
    }

    /// The periodic report's reference to its reporter: the backend's timer must not keep the
    /// reporter alive, or `deinit` (which stops it) would never run.
    private final class WeakReporter: Sendable {
        private let reference: Locked<WeakBox>

        // @unchecked: only read and written under `reference`'s lock.
        private struct WeakBox: @unchecked Sendable {
            weak var reporter: TimerMetricsReporter?
        }

        init(_ reporter: TimerMetricsReporter) { reference = Locked(WeakBox(reporter: reporter)) }

        var reporter: TimerMetricsReporter? { reference.withLock { $0.reporter } }
    }

    extension Duration {
        /// The duration in whole nanoseconds, saturating.
        var nanosecondsValue: Int64 {
            let (seconds, attoseconds) = components
            let (fromSeconds, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
            if overflow { return seconds < 0 ? .min : .max }
            return fromSeconds.addingReportingOverflow(attoseconds / 1_000_000_000).overflow
                ? .max : fromSeconds + attoseconds / 1_000_000_000
        }
    }
#endif
