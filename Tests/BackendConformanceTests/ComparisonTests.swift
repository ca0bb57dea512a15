import Testing
import TimerKit
import TimerKitConformance
import TimerKitTestSupport

/// `ConformanceComparison`: what it reports and the input it refuses. It is never asserted as
/// a timing (the figures move with the machine's load), only its shape and its arithmetic.
@Suite("Comparing a backend with another")
struct ComparisonTests {
    @Test func aComparisonReportsEachFigureWithItsIntervalAndVerdict() throws {
        let comparison = try withWatchdog {
            try ConformanceComparison.measure(
                BackendKind.pumped.underTest, against: .epoll, rounds: 6, timersPerRound: 10, pairsPerRound: 500)
        }
        #expect(comparison.backendName == "pumped" && comparison.referenceName == "epoll" && comparison.rounds == 6)
        #expect(comparison.figures.map(\.name) == ["lateness p50 (µs)", "schedule + cancel (ns)"])
        for figure in comparison.figures {
            for estimate in [figure.backend, figure.reference] {
                #expect(estimate.low <= estimate.median && estimate.median <= estimate.high, "\(figure.name)")
                #expect(estimate.low >= 0)
            }
            #expect(figure.reference.median > 0 || figure.name.hasPrefix("lateness"))
        }
        let lines = comparison.description.split(separator: "\n")
        #expect(lines.count == 4)  // title, header, a row per figure
        print(comparison)
        #expect(lines.first?.contains("pumped against epoll: medians of 6 interleaved rounds") == true)
    }

    @Test func theVerdictNamesAWinnerOnlyWhenTheIntervalsDoNotOverlap() {
        let low = ConformanceComparison.Estimate(median: 10, low: 9, high: 11)
        let high = ConformanceComparison.Estimate(median: 20, low: 18, high: 22)
        let overlapping = ConformanceComparison.Estimate(median: 12, low: 10.5, high: 19)
        #expect(ConformanceComparison.Figure(name: "x", backend: low, reference: high).verdict == .lower)
        #expect(ConformanceComparison.Figure(name: "x", backend: high, reference: low).verdict == .higher)
        #expect(ConformanceComparison.Figure(name: "x", backend: low, reference: overlapping).verdict == .noClearDifference)
    }

    /// The interval is the k-th smallest to the k-th largest round, with k from the binomial
    /// distribution: with 6 rounds the extremes (96.9 %), with 9 the second from each end (96.1 %).
    @Test func theIntervalIsDistributionFreeOrderStatistics() {
        let six = ConformanceComparison.estimate([6, 1, 5, 2, 4, 3])
        #expect((six.low, six.median, six.high) == (1, 3.5, 6))
        let nine = ConformanceComparison.estimate([9, 1, 8, 2, 7, 3, 6, 4, 5])
        #expect((nine.low, nine.median, nine.high) == (2, 5, 8))
        let twenty = ConformanceComparison.estimate((1...20).map(Double.init))
        #expect((twenty.low, twenty.high) == (6, 15))
    }

    @Test func tooFewRoundsAndVirtualTimeAreRefusedByName() {
        #expect(throws: ConformanceComparison.Failure.tooFewRounds(5)) { try ConformanceComparison.measure(.dispatch, rounds: 5) }
        #expect(throws: ConformanceComparison.Failure.virtualTime(backend: "manual")) {
            try ConformanceComparison.measure(.manual, against: .epoll)
        }
        #expect(throws: ConformanceComparison.Failure.virtualTime(backend: "manual")) {
            try ConformanceComparison.measure(.epoll, against: .manual)
        }
    }
}
