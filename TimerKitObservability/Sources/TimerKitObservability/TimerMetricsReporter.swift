import CoreMetrics
import Dispatch
import Synchronization
import TimerKit

/// Publishes a backend's `TimerBackend.statistics` to swift-metrics, every
/// `interval` and whenever ``report()`` is called, dimensioned by the backend's name
/// (`backend`).
///
/// | metric | kind | what |
/// |---|---|---|
/// | `timerkit_live_timers` | gauge | timers live on the backend |
/// | `timerkit_loop_busy_fraction` | gauge | share of the last interval the loop spent in handlers and tasks (0–1) |
/// | `timerkit_fires` | counter | handler calls |
/// | `timerkit_cancels` | counter | timers cancelled |
/// | `timerkit_missed_ticks` | counter | grid points missed, dimensioned by `policy` (`skip`, `delay`) |
/// | `timerkit_lateness` | timer | how late each handler call began |
/// | `timerkit_handler_duration` | timer | how long each handler call ran |
///
/// The two timers receive each call's duration as the backend's histogram kept it: to within
/// an eighth, at the middle of its bucket: one `recordNanoseconds` per call, so the periodic
/// report runs on a Dispatch queue of its own, never on the backend's loop. Nothing is added to
/// the fire path: the figures are read from `statistics` when the report runs. A repeating timer
/// of the backend starts each report (it counts among the backend's fires and live timers).
public final class TimerMetricsReporter: Sendable {
    private let backend: any TimerBackend
    private let metrics: Metrics
    private let previous = Mutex<TimerStatistics?>(nil)
    private let timer = Mutex<TimerHandle?>(nil)
    /// Where the periodic reports run: off the loop, one at a time.
    private let reports = DispatchQueue(label: "timerkit.metrics-reporter")

    /// Metric handles, made once.
    private struct Metrics: Sendable {
        let live: Gauge
        let busy: Gauge
        let fires: Counter
        let cancels: Counter
        let skipped: Counter
        let delayed: Counter
        let lateness: CoreMetrics.Timer
        let handlerTime: CoreMetrics.Timer
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
    public init(backend: any TimerBackend, factory: any MetricsFactory = MetricsSystem.factory, every interval: Duration? = .seconds(10))
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
            lateness: CoreMetrics.Timer(label: "timerkit_lateness", dimensions: dimensions, factory: factory),
            handlerTime: CoreMetrics.Timer(label: "timerkit_handler_duration", dimensions: dimensions, factory: factory))
        previous.withLock { $0 = backend.statistics }
        if let interval {
            let reporter = WeakReporter(self)
            let reports = self.reports
            let handle = try backend.schedule(.every(interval)) { _ in reports.async { reporter.reporter?.report() } }
            timer.withLock { $0 = handle }
        }
    }

    /// Publishes the figures now: the gauges' current values, and what the counters and timers
    /// gained since the previous report (or since the reporter was made).
    public func report() {
        let now = backend.statistics
        let before = previous.withLock { previous in
            defer { previous = now }
            return previous
        }
        // A `resetStatistics()` in between starts the figures again: count from zero.
        let base = before.flatMap { $0.since == now.since ? $0 : nil }
        metrics.live.record(now.liveTimers)
        metrics.fires.increment(by: max(0, now.fires - (base?.fires ?? 0)))
        metrics.cancels.increment(by: max(0, now.cancels - (base?.cancels ?? 0)))
        metrics.skipped.increment(by: max(0, (now.missedTicks[.skip] ?? 0) - (base?.missedTicks[.skip] ?? 0)))
        metrics.delayed.increment(by: max(0, (now.missedTicks[.delay] ?? 0) - (base?.missedTicks[.delay] ?? 0)))
        record(now.lateness, after: base?.lateness, into: metrics.lateness)
        record(now.handlerTime, after: base?.handlerTime, into: metrics.handlerTime)
        let busyNow = now.busyFraction * Double((now.at - now.since).nanosecondsValue)
        let busyBefore = base.map { $0.busyFraction * Double(($0.at - $0.since).nanosecondsValue) } ?? 0
        let elapsed = Double((now.at - (base?.at ?? now.since)).nanosecondsValue)
        metrics.busy.record(elapsed > 0 ? min(1, max(0, (busyNow - busyBefore) / elapsed)) : 0)
    }

    /// Stops the periodic reports. Idempotent; ``report()`` still publishes when called.
    public func stop() {
        let handle = timer.withLock { $0 }
        handle?.cancel()
    }

    deinit { stop() }

    private func record(_ histogram: DurationHistogram, after earlier: DurationHistogram?, into timer: CoreMetrics.Timer) {
        var counted: [Duration: Int] = [:]
        for bucket in earlier?.buckets ?? [] { counted[bucket.range.lowerBound] = bucket.count }
        for bucket in histogram.buckets {
            let added = bucket.count - (counted[bucket.range.lowerBound] ?? 0)
            guard added > 0 else { continue }
            let middle = (bucket.range.lowerBound.nanosecondsValue + bucket.range.upperBound.nanosecondsValue) / 2
            for _ in 0..<added { timer.recordNanoseconds(middle) }
        }
    }
}

/// The periodic report's reference to its reporter: the backend's timer must not keep the
/// reporter alive, or `deinit` (which stops it) would never run.
private final class WeakReporter: Sendable {
    private let reference: Mutex<WeakBox>

    private struct WeakBox: @unchecked Sendable {
        // @unchecked: only read and written under `reference`'s lock.
        weak var reporter: TimerMetricsReporter?
    }

    init(_ reporter: TimerMetricsReporter) { reference = Mutex(WeakBox(reporter: reporter)) }

    var reporter: TimerMetricsReporter? { reference.withLock { $0.reporter } }
}

extension Duration {
    /// The duration in whole nanoseconds, saturating.
    var nanosecondsValue: Int64 {
        let (seconds, attoseconds) = components
        let (fromSeconds, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return fromSeconds.addingReportingOverflow(attoseconds / 1_000_000_000).overflow ? .max : fromSeconds + attoseconds / 1_000_000_000
    }
}
