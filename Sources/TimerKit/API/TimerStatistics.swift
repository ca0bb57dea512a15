/// What a backend's timers have done since it started or since `resetStatistics()`: how many
/// are live, how late they fire, how long their handlers run and how busy that keeps the loop.
///
/// Read it with ``TimerBackend/statistics``. The backend keeps these figures as it fires,
/// always, in memory of fixed size: recording allocates nothing (in a release build, where
/// `make bench-check` counts the allocations of the fire path, statistics included).
public struct TimerStatistics: Sendable, CustomStringConvertible {
    /// The backend's name.
    public let backend: String
    /// Timers of this backend that are live now (scheduled or suspended).
    public let liveTimers: Int
    /// Handler calls.
    public let fires: Int
    /// Timers ended by a cancel: by handle, by name, by `cancelAll`, or because their target
    /// was released. (Those ended by the backend's shutdown are not counted.)
    public let cancels: Int
    /// How late handler calls began: the time from a tick's due time to the call.
    public let lateness: DurationHistogram
    /// How long handler calls ran, observers' hooks included.
    public let handlerTime: DurationHistogram
    /// Grid points that repeating timers missed, by the policy that handled them: skipped by
    /// `.skip`, or passed over by a `.delay` restart. (`.burst` misses none: it fires them all.)
    public let missedTicks: [MissedTickPolicy: Int]
    /// The share of the time since ``since`` that the loop spent in handlers and in tasks run
    /// on it (`taskExecutor`), from 0 to 1.
    public let busyFraction: Double
    /// Steps of the wall clock and suspends of the machine seen while timers on those clocks
    /// were live (each a `TimerBackendEvent.clockChanged`).
    public let clockChanges: Int
    /// The longest handler call, with its timer's name; nil before the first call.
    public let longestHandler: (name: String, duration: Duration)?
    /// When these figures began: the backend's start, or the last `resetStatistics()`.
    public let since: MonotonicInstant
    /// When they were read.
    public let at: MonotonicInstant

    public var description: String {
        let longest = longestHandler.map { "\($0.name) \($0.duration)" } ?? "-"
        return """
            \(backend): \(liveTimers) live, \(fires) fires, \(cancels) cancels; lateness \(lateness); \
            handler time \(handlerTime); busy \(Double(Int(busyFraction * 10_000)) / 100) %; longest handler \(longest)
            """
    }
}

/// A distribution of durations, kept in logarithmic buckets: each power of two split in eight,
/// so a percentile is known to within an eighth of its value (a bucket's width), whatever the
/// range, in fixed memory.
public struct DurationHistogram: Sendable, CustomStringConvertible {
    /// Durations recorded.
    public let count: Int
    /// The longest one recorded, exactly; zero when none was.
    public let max: Duration
    /// Durations recorded in each bucket, by bucket index.
    let counts: [UInt64]

    /// The recorded durations bucket by bucket, in increasing order, each with the range of
    /// durations it covers (never wider than an eighth of its lower bound); empty buckets are
    /// left out. For exporting the distribution to a metrics system.
    public var buckets: [(range: ClosedRange<Duration>, count: Int)] {
        counts.enumerated().compactMap { index, count in
            guard count > 0 else { return nil }
            let lower = Duration.nanoseconds(Int64(clamping: DurationBuckets.lowerBound(of: index)))
            let upper = Duration.nanoseconds(Int64(clamping: DurationBuckets.upperBound(of: index)))
            return (lower...upper, Int(clamping: count))
        }
    }

    /// The duration that `percent` % of the recorded ones do not exceed, to within a bucket's
    /// width: the upper bound of the bucket that holds it (never above ``max``). Zero when
    /// nothing was recorded.
    /// - Parameter percent: From 0 to 100; values outside are clamped.
    public func percentile(_ percent: Double) -> Duration {
        guard count > 0 else { return .zero }
        let share = percent.isNaN ? 0 : Swift.min(Swift.max(percent, 0), 100) / 100
        let rank = Swift.max(1, UInt64(Self.rank(share, of: count)))
        var seen: UInt64 = 0
        for (index, inBucket) in counts.enumerated() where inBucket > 0 {
            seen += inBucket
            if seen >= rank {
                let upper = DurationBuckets.upperBound(of: index)
                return Swift.min(.nanoseconds(Int64(clamping: upper)), max)
            }
        }
        return max
    }

    /// The rank (1-based, unclamped below) of the `share` percentile of `count` values: the
    /// smallest k with k ≥ share·count. A product that floating point puts a hair above a whole
    /// number (0.07 · 100 = 7.000000000000001) is that whole number.
    static func rank(_ share: Double, of count: Int) -> Int {
        let product = share * Double(count)
        let nearest = product.rounded()
        return abs(product - nearest) <= 1e-9 * Swift.max(1, product) ? Int(nearest) : Int(product.rounded(.up))
    }

    /// The median: `percentile(50)`.
    public var p50: Duration { percentile(50) }
    /// `percentile(90)`.
    public var p90: Duration { percentile(90) }
    /// `percentile(99)`.
    public var p99: Duration { percentile(99) }

    /// The width of the bucket that holds `duration`: how far a percentile near it may lie
    /// from the exact value.
    public static func bucketWidth(at duration: Duration) -> Duration {
        let nanoseconds = UInt64(clamping: duration.saturatingNanoseconds)
        let index = DurationBuckets.index(of: nanoseconds)
        return .nanoseconds(Int64(clamping: DurationBuckets.upperBound(of: index) - DurationBuckets.lowerBound(of: index) + 1))
    }

    public var description: String { count == 0 ? "none" : "p50 \(p50) p90 \(p90) p99 \(p99) max \(max) (\(count))" }
}

/// The bucket arithmetic of `DurationHistogram`: values below 8 ns have a bucket each; above,
/// each power of two [2^e, 2^(e+1)) is split in eight buckets of width 2^(e-3).
enum DurationBuckets {
    static let count = 8 + 61 * 8

    @inline(__always)
    static func index(of nanoseconds: UInt64) -> Int {
        guard nanoseconds >= 8 else { return Int(nanoseconds) }
        let exponent = 63 - nanoseconds.leadingZeroBitCount
        let sub = Int((nanoseconds >> UInt64(exponent - 3)) & 7)
        return (exponent - 2) * 8 + sub
    }

    static func lowerBound(of index: Int) -> UInt64 {
        guard index >= 8 else { return UInt64(index) }
        let exponent = index / 8 + 2
        let sub = UInt64(index % 8)
        return (8 + sub) << UInt64(exponent - 3)
    }

    static func upperBound(of index: Int) -> UInt64 {
        guard index >= 8 else { return UInt64(index) }
        let exponent = index / 8 + 2
        return lowerBound(of: index) + (UInt64(1) << UInt64(exponent - 3)) - 1
    }
}

/// A handler (or a task on the loop) that ran longer than the backend's
/// `slowHandlerThreshold`: the loop could run nothing else meanwhile.
public struct SlowHandlerReport: Sendable, CustomStringConvertible {
    /// What ran long.
    public enum Source: Sendable, Equatable {
        /// The handler of the timer named.
        case handler(timer: String)
        /// A job of a task running on the loop (`taskExecutor`).
        case task
    }

    /// The backend's name.
    public let backend: String
    /// What ran long.
    public let source: Source
    /// How long it ran.
    public let duration: Duration
    /// Other timers of the backend that were due by the time it returned, and waited for it.
    /// (A repeating handler that overran its own next tick does not count itself.)
    public let delayedTimers: Int

    public var description: String {
        let what =
            switch source {
            case .handler(let timer): "the handler of \(timer)"
            case .task: "a task on the loop"
            }
        return "\(backend): \(what) ran for \(duration) and delayed \(delayedTimers) timers"
    }
}

/// Something that happened to a backend as a whole, told to its event observers
/// (``TimerBackend/addEventObserver(_:)``).
public enum TimerBackendEvent: Sendable {
    /// A handler or a task on the loop ran longer than the backend's `slowHandlerThreshold`.
    case slowHandler(SlowHandlerReport)
    /// The backend's loop stopped on an error; the backend shut down with it.
    case loopFailed(backend: String, cause: TimerError)
    /// The backend shut down; `endedTimers` live timers were ended by it.
    case shutDown(backend: String, endedTimers: Int)
    /// The wall clock stepped by `step` (`clock` is `.wall`), or the machine was suspended for
    /// `step` (`.continuous`; the wall clock moves with it): the backend's timers on that clock
    /// were re-evaluated at once.
    case clockChanged(backend: String, clock: DeadlineClock, step: Duration)
}
