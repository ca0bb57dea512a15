import Foundation
import TimerKit

/// How a backend compares with another, measured on this machine in one run: an answer to
/// "is my backend as good as epoll" that says when the difference is only noise.
///
/// ``measure(_:against:rounds:)`` takes turns: each round measures both backends, in an order
/// that alternates from round to round, so that a machine that gets busier part-way through
/// slows both. Each figure is the median of the rounds' values with a 95 % interval for that
/// median. A verdict names a winner only when the two intervals do not overlap.
///
/// It is a report, not a test: print it or attach it to a test, and never assert a timing
/// with it (a busy machine moves every figure).
///
/// ```swift
/// @Test func pumpedComparedWithEpoll() throws {
///     let comparison = try ConformanceComparison.measure(.pumped)
///     Attachment.record(comparison.description, named: "pumped-vs-epoll.txt")
///     print(comparison)
/// }
/// ```
public struct ConformanceComparison: Sendable, CustomStringConvertible {
    /// Why a comparison cannot be made.
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// Fewer rounds than a 95 % interval of a median needs.
        case tooFewRounds(Int)
        /// The backend named runs on virtual time, where nothing can be measured.
        case virtualTime(backend: String)
        /// The timers of one round did not all fire within 10 seconds.
        case timersDidNotFire(backend: String, fired: Int, of: Int)

        public var description: String {
            switch self {
            case .tooFewRounds(let rounds):
                "a comparison needs at least \(ConformanceComparison.minimumRounds) rounds for a 95 % interval (got \(rounds))"
            case .virtualTime(let backend): "\(backend) runs on virtual time: there is no real time to measure"
            case .timersDidNotFire(let backend, let fired, let total): "\(backend): \(fired) of \(total) timers fired within 10 s"
            }
        }
    }

    /// A figure's median over the rounds and a 95 % interval for it.
    public struct Estimate: Sendable {
        /// The median of the rounds' values.
        public let median: Double
        /// The interval that holds the median of the distribution the rounds came from with
        /// 95 % confidence (order statistics: no assumption about its shape).
        public let low: Double
        public let high: Double

        package init(median: Double, low: Double, high: Double) {
            self.median = median
            self.low = low
            self.high = high
        }
    }

    /// What one figure says.
    public enum Verdict: Sendable, Equatable {
        /// The backend's figure is lower than the reference's beyond the noise.
        case lower
        /// The backend's figure is higher than the reference's beyond the noise.
        case higher
        /// The intervals overlap: this run cannot tell them apart.
        case noClearDifference
    }

    /// One measured quantity, for both backends.
    public struct Figure: Sendable {
        /// What was measured, with its unit.
        public let name: String
        /// The backend's estimate.
        public let backend: Estimate
        /// The reference's estimate.
        public let reference: Estimate

        package init(name: String, backend: Estimate, reference: Estimate) {
            self.name = name
            self.backend = backend
            self.reference = reference
        }

        /// The backend's figure against the reference's. Lower is better for every figure here.
        public var verdict: Verdict {
            if backend.high < reference.low { return .lower }
            if backend.low > reference.high { return .higher }
            return .noClearDifference
        }
    }

    /// The backend compared.
    public let backendName: String
    /// The backend it was compared with.
    public let referenceName: String
    /// Rounds measured.
    public let rounds: Int
    /// The median lateness of one-shot timers (µs), then the cost of a schedule and a cancel
    /// with 10,000 timers live (ns per pair).
    public let figures: [Figure]

    /// The fewest rounds a 95 % interval of a median can be drawn from.
    public static let minimumRounds = 6

    static let timersPerRound = 50
    static let pairsPerRound = 10_000

    /// Measures `backend` against `reference`, in `rounds` interleaved rounds of a few
    /// milliseconds each.
    ///
    /// - Throws: ``Failure/tooFewRounds(_:)`` for fewer than ``minimumRounds`` rounds,
    ///   ``Failure/virtualTime(backend:)`` for a backend on virtual time, what making either
    ///   backend throws, and what scheduling on it throws.
    public static func measure(
        _ backend: BackendUnderTest, against reference: BackendUnderTest = .epoll, rounds: Int = 9
    ) throws -> ConformanceComparison {
        try measure(backend, against: reference, rounds: rounds, timersPerRound: timersPerRound, pairsPerRound: pairsPerRound)
    }

    /// ``measure(_:against:rounds:)`` with a smaller workload per round: the test of its shape
    /// runs beside the whole suite under ThreadSanitizer, where 6 rounds of 10,000 pairs outlasted
    /// its 300 s watchdog in a CI run.
    package static func measure(
        _ backend: BackendUnderTest, against reference: BackendUnderTest, rounds: Int, timersPerRound: Int, pairsPerRound: Int
    ) throws -> ConformanceComparison {
        guard rounds >= minimumRounds else { throw Failure.tooFewRounds(rounds) }
        for subject in [backend, reference] where !subject.isRealTime { throw Failure.virtualTime(backend: subject.name) }
        var lateness: [[Double]] = [[], []]
        var pairCost: [[Double]] = [[], []]
        for round in 0..<rounds {
            let order = round.isMultiple(of: 2) ? [0, 1] : [1, 0]
            for index in order {
                let subject = index == 0 ? backend : reference
                let harness = try subject.makeHarness()
                defer { harness.shutdown() }
                lateness[index].append(try medianLatenessMicroseconds(harness.backend, name: subject.name, timers: timersPerRound))
                pairCost[index].append(try scheduleCancelNanoseconds(harness.backend, pairs: pairsPerRound))
            }
        }
        return ConformanceComparison(
            backendName: backend.name, referenceName: reference.name, rounds: rounds,
            figures: [
                Figure(name: "lateness p50 (µs)", backend: estimate(lateness[0]), reference: estimate(lateness[1])),
                Figure(name: "schedule + cancel (ns)", backend: estimate(pairCost[0]), reference: estimate(pairCost[1])),
            ])
    }

    /// One-shot timers 1 ms apart, each 2 ms after it is scheduled; their median lateness.
    private static func medianLatenessMicroseconds(_ backend: any TimerBackend, name: String, timers timersPerRound: Int) throws -> Double {
        let late = Locked<[Double]>([])
        for index in 0..<timersPerRound {
            try backend.schedule(.after(.microseconds(2_000 + 100 * index))) { tick in
                let lateness = tick.actual - tick.scheduled
                late.withLock { $0.append(Double(lateness.saturatingNanoseconds) / 1_000) }
            }
        }
        guard waitFor(.seconds(10), { late.current.count == timersPerRound }) else {
            throw Failure.timersDidNotFire(backend: name, fired: late.current.count, of: timersPerRound)
        }
        return median(late.current)
    }

    /// Schedules `pairs` far timers, then cancels them all: the time per schedule + cancel.
    private static func scheduleCancelNanoseconds(_ backend: any TimerBackend, pairs pairsPerRound: Int) throws -> Double {
        var timers: [TimerHandle] = []
        timers.reserveCapacity(pairsPerRound)
        let began = MonotonicInstant.now()
        for _ in 0..<pairsPerRound { timers.append(try backend.schedule(.after(.seconds(3600))) { _ in }) }
        for timer in timers { timer.cancel() }
        let elapsed = MonotonicInstant.now() - began
        return Double(elapsed.saturatingNanoseconds) / Double(pairsPerRound)
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return .nan }
        let middle = sorted.count / 2
        return sorted.count.isMultiple(of: 2) ? (sorted[middle - 1] + sorted[middle]) / 2 : sorted[middle]
    }

    /// The median with its distribution-free 95 % interval: the k-th smallest and k-th largest
    /// values, with k the largest for which P(Binomial(n, ½) < k) ≤ 2.5 %.
    package static func estimate(_ values: [Double]) -> Estimate {
        let sorted = values.sorted()
        let n = sorted.count
        var k = 0
        var below = 0.0  // P(X < k + 1) = P(X <= k)
        var term = pow(0.5, Double(n))  // P(X = 0)
        while k < n / 2 {
            below += term
            if below > 0.025 { break }
            k += 1
            term *= Double(n - k + 1) / Double(k)
        }
        let rank = max(k, 1) - 1
        return Estimate(median: median(sorted), low: sorted[rank], high: sorted[n - 1 - rank])
    }

    public var description: String {
        func format(_ estimate: Estimate) -> String {
            String(format: "%.1f [%.1f, %.1f]", estimate.median, estimate.low, estimate.high)
        }
        func say(_ verdict: Verdict) -> String {
            switch verdict {
            case .lower: "\(backendName) lower"
            case .higher: "\(backendName) higher"
            case .noClearDifference: "no clear difference"
            }
        }
        let header = ["figure", backendName, referenceName, "verdict"]
        let rows = [header] + figures.map { [$0.name, format($0.backend), format($0.reference), say($0.verdict)] }
        let widths = (0..<header.count).map { column in rows.map { $0[column].count }.max() ?? 0 }
        let lines = rows.map { row in
            let padded = zip(row, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
            return String(padded.reversed().drop { $0 == " " }.reversed())
        }
        let title = "\(backendName) against \(referenceName): medians of \(rounds) interleaved rounds, [95 % interval]; lower is better"
        return ([title] + lines).joined(separator: "\n")
    }
}
