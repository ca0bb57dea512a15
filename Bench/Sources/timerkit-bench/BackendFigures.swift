import TimerKit

/// What a backend says of itself during the latency run (`TimerBackend.statistics`, gathered
/// from each slice's backend before it shuts down), and whether it agrees with what the bench
/// measured of the same fires.
struct BackendFigures: Codable {
    var fires: Int
    var latenessP50Us: Double
    var latenessP90Us: Double
    var latenessP99Us: Double
    var latenessMaxUs: Double
    var handlerP50Us: Double
    var handlerP99Us: Double
    /// Time in handlers over the slices' time, in %.
    var busyPercent: Double
    var missed: Int
    var longestHandler: String
    var longestHandlerUs: Double
    /// Whether the backend's lateness p50 and p90 lie within a bucket's width (and the
    /// bench histogram's 0.1 %) of the bench's own, with the same number of fires; nil when
    /// other timers shared the backend (a loaded run), so the samples differ.
    var agreesWithBench: Bool?
    /// The comparison, for the report: "p50 24.1 vs 24.6 (bucket 2.0) ...".
    var agreement: String?
}

/// The statistics of a backend's slices, merged: each slice is a backend of its own.
struct BackendFiguresCollector {
    private var lateness: [UInt64: (upper: UInt64, count: Int)] = [:]
    private var handler: [UInt64: (upper: UInt64, count: Int)] = [:]
    private var latenessMax: UInt64 = 0
    private var handlerMax: UInt64 = 0
    private var fires = 0
    private var missed = 0
    private var busy = 0.0
    private var elapsed = 0.0
    private var longest: (name: String, nanoseconds: UInt64)?

    var isEmpty: Bool { fires == 0 }

    mutating func add(_ statistics: TimerStatistics) {
        Self.merge(statistics.lateness, into: &lateness)
        Self.merge(statistics.handlerTime, into: &handler)
        latenessMax = max(latenessMax, ns(statistics.lateness.max))
        handlerMax = max(handlerMax, ns(statistics.handlerTime.max))
        fires += statistics.fires
        missed += statistics.missedTicks.values.reduce(0, +)
        let span = Double(ns(statistics.at - statistics.since))
        busy += statistics.busyFraction * span
        elapsed += span
        if let candidate = statistics.longestHandler, ns(candidate.duration) > longest?.nanoseconds ?? 0 {
            longest = (candidate.name, ns(candidate.duration))
        }
    }

    /// The merged figures; `bench` and `benchFires` are the bench's own lateness percentiles
    /// (µs, by percent) and fire count for the cross-check, when the samples are the same.
    func figures(bench: ((Double) -> Double)?, benchFires: Int) -> BackendFigures {
        var figures = BackendFigures(
            fires: fires, latenessP50Us: Self.percentile(50, lateness, max: latenessMax),
            latenessP90Us: Self.percentile(90, lateness, max: latenessMax), latenessP99Us: Self.percentile(99, lateness, max: latenessMax),
            latenessMaxUs: Double(latenessMax) / 1000, handlerP50Us: Self.percentile(50, handler, max: handlerMax),
            handlerP99Us: Self.percentile(99, handler, max: handlerMax), busyPercent: elapsed > 0 ? 100 * busy / elapsed : 0,
            missed: missed, longestHandler: longest?.name ?? "-", longestHandlerUs: Double(longest?.nanoseconds ?? 0) / 1000)
        guard let bench else { return figures }
        var agrees = fires == benchFires
        var parts = ["fires \(fires) vs \(benchFires)"]
        for percent in [50.0, 90.0] {
            let own = Self.percentile(percent, lateness, max: latenessMax)
            let measured = bench(percent)
            let width = ns(DurationHistogram.bucketWidth(at: .nanoseconds(Int64(max(own, measured) * 1000))))
            let allowed = Double(width) / 1000 + measured * 0.001
            agrees = agrees && abs(own - measured) <= allowed
            parts.append(String(format: "p%.0f %.1f vs %.1f µs (bucket %.1f)", percent, own, measured, Double(width) / 1000))
        }
        figures.agreesWithBench = agrees
        figures.agreement = parts.joined(separator: ", ")
        return figures
    }

    private static func merge(_ histogram: DurationHistogram, into merged: inout [UInt64: (upper: UInt64, count: Int)]) {
        for bucket in histogram.buckets {
            let lower = ns(bucket.range.lowerBound)
            merged[lower, default: (ns(bucket.range.upperBound), 0)].count += bucket.count
        }
    }

    /// As `DurationHistogram.percentile`: the upper bound of the bucket holding the rank, in µs.
    private static func percentile(_ percent: Double, _ buckets: [UInt64: (upper: UInt64, count: Int)], max: UInt64) -> Double {
        let total = buckets.values.reduce(0) { $0 + $1.count }
        guard total > 0 else { return 0 }
        // The smallest k ≥ share·total, with a product a hair above a whole number taken as it.
        let product = percent / 100 * Double(total)
        let rank = Swift.max(
            1, abs(product - product.rounded()) <= 1e-9 * Swift.max(1, product) ? Int(product.rounded()) : Int(product.rounded(.up)))
        var seen = 0
        for lower in buckets.keys.sorted() {
            guard let bucket = buckets[lower] else { continue }
            seen += bucket.count
            if seen >= rank { return Double(min(bucket.upper, max)) / 1000 }
        }
        return Double(max) / 1000
    }
}

/// Whole nanoseconds of a non-negative duration.
private func ns(_ duration: Duration) -> UInt64 { UInt64(max(0, duration.wholeNanoseconds)) }
