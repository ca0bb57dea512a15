import BenchStatistics
import Foundation
import Testing

/// The statistics behind every interval and verdict, on samples whose answers are known.
@Suite("Bench statistics")
struct EstimateTests {
    @Test func tenSlicesGiveTheSecondAndNinthAt97Point9Percent() {
        let estimate = Estimate(slices: [10, 1, 9, 2, 8, 3, 7, 4, 6, 5])
        #expect(estimate.median == 5.5)
        #expect(estimate.ci95Low == 2)
        #expect(estimate.ci95High == 9)
        // 1 − 2·(1 + 10)/1024
        #expect(abs(estimate.confidence - (1 - 22.0 / 1024)) < 1e-12)
    }

    @Test func fiveSlicesOrFewerGiveTheRangeAtItsOwnConfidence() {
        let five = Estimate(slices: [3, 1, 2, 5, 4])
        #expect(five.median == 3)
        #expect((five.ci95Low, five.ci95High) == (1, 5))
        #expect(abs(five.confidence - 0.9375) < 1e-12)
        let one = Estimate(slices: [7])
        #expect((one.median, one.ci95Low, one.ci95High, one.confidence) == (7, 7, 7, 0))
        #expect(Estimate(slices: []).median == 0)
    }

    @Test func manySlicesGiveATightIntervalAboutTheMedian() {
        // 1,000 slices 0…999: k = 469 (P(B ≤ 468) ≤ 2.5 % < P(B ≤ 469)), so the interval is the
        // 469th and 532nd values, 468 and 531, at 95.37 % (exact binomial sums).
        let estimate = Estimate(slices: (0..<1_000).map(Double.init).shuffled())
        #expect(estimate.median == 499.5)
        #expect(estimate.ci95Low == 468)
        #expect(estimate.ci95High == 531)
        #expect(abs(estimate.confidence - 0.953_708_8) < 1e-6)
    }

    @Test func verdictsOnlyBeyondTheNoise() {
        let a = Estimate(slices: [10, 11, 12, 10, 11, 12, 10, 11])
        let overlapping = Estimate(slices: [11, 12, 13, 11, 12, 13, 11, 12])
        let far = Estimate(slices: [20, 21, 22, 20, 21, 22, 20, 21])
        #expect(Verdict(from: a, to: overlapping) == .noDifference)
        #expect(Verdict(from: a, to: far) == .higher)
        #expect(Verdict(from: far, to: a) == .lower)
        let change = Change(figure: "x", old: a, new: far)
        #expect(abs(change.percent - (21 - 11) / 11.0 * 100) < 1e-9)
        #expect(change.isRegression(beyond: 50))
        #expect(!change.isRegression(beyond: 100))
        #expect(!Change(figure: "x", old: a, new: overlapping).isRegression(beyond: 0), "within the noise is never a regression")
    }

    @Test func theSameNoiseMeasuredTwiceIsNoDifferenceMostOfTheTime() {
        // Two labels, one distribution (a self-comparison): with 95 % intervals of 20 slices
        // each, overlapping intervals are the rule. A seeded generator keeps this exact.
        var generator = SplitMix(seed: 2026)
        var same = 0
        for _ in 0..<200 {
            let first = Estimate(slices: (0..<20).map { _ in 100 + generator.noise() })
            let second = Estimate(slices: (0..<20).map { _ in 100 + generator.noise() })
            if Verdict(from: first, to: second) == .noDifference { same += 1 }
        }
        #expect(same >= 190, "\(same) of 200 self-comparisons said no measurable difference")
    }
}

/// SplitMix64, for repeatable noise: skewed, as a busy machine's is.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// 0…30, mostly small, sometimes large.
    mutating func noise() -> Double {
        let u = Double(next() >> 11) / Double(1 << 53)
        return 30 * u * u * u
    }
}

extension EstimateTests {
    static func run(kernel: String, epollP50: [Double]) -> Data {
        let slices = epollP50.map { "\($0)" }.joined(separator: ", ")
        return Data(
            """
            {"machine": {"cpu": "AMD EPYC", "cores": 2, "kernel": "\(kernel)", "clock_source": "tsc", "build": "release",
                         "compiler": "Swift 6.3", "date": "today", "load_average_before": 0.5, "load_average_after": 0.7},
             "results": [{"scenario": "latency", "backend": "epoll", "load": "none",
                          "p50_us": {"median": 0, "ci95_low": 0, "ci95_high": 0, "confidence": 0, "slices": [\(slices)]}}]}
            """.utf8)
    }

    @Test func aSavedRunGivesItsFiguresAndWarnsOfAnotherMachine() throws {
        let old = try #require(SavedRun(json: Self.run(kernel: "6.18", epollP50: [10, 11, 12, 10, 11, 12])))
        let new = try #require(SavedRun(json: Self.run(kernel: "6.19", epollP50: [30, 31, 32, 30, 31, 32])))
        let figure = "latency none epoll p50 µs"
        #expect(old.figures.keys.sorted() == [figure])
        #expect(old.figures[figure]?.slices == [10, 11, 12, 10, 11, 12])
        #expect(old.load == "0.5 → 0.7")
        #expect(old.machineDifferences(from: new) == ["the runs differ in kernel: '6.18' vs '6.19'"])
        #expect(old.machineDifferences(from: old) == [], "the date and the load are not warned about")
        let change = Change(figure: figure, old: try #require(old.figures[figure]), new: try #require(new.figures[figure]))
        #expect(change.verdict == .higher)
        #expect(change.isRegression(beyond: 10))
        #expect(SavedRun(json: Data("[1, 2]".utf8)) == nil)
    }
}

extension EstimateTests {
    @Test func aSavedRunComparesEveryScenarioThatHasRounds() throws {
        let estimate = #"{"median": 0, "ci95_low": 0, "ci95_high": 0, "confidence": 0, "slices": [1, 2, 3]}"#
        let single = #"{"median": 0, "ci95_low": 0, "ci95_high": 0, "confidence": 0, "slices": [1]}"#
        let json = """
            {"machine": {}, "results": [
              {"scenario": "first-fire", "backend": "epoll", "p50_us": \(estimate)},
              {"scenario": "fanout", "backend": "libevent", "tolerance_us": 0, "jitter_us": 0, "herd": true, "cpu_ns_per_fire_estimate": \(estimate)},
              {"scenario": "idle", "backend": "dispatch", "wakeups_per_second_above_baseline": \(estimate)},
              {"scenario": "display", "backend": "floor", "refresh_hz": 60, "lateness_p50_us": \(estimate)},
              {"scenario": "async", "backend": "nio", "mode": "ticks", "executor": "loop", "p50_us": \(estimate)},
              {"scenario": "first-fire", "backend": "runloop", "p50_us": \(single)},
              {"scenario": "drift", "backend": "epoll", "first_tenth_p50_us": 1}]}
            """
        let run = try #require(SavedRun(json: Data(json.utf8)))
        #expect(
            run.figures.keys.sorted() == [
                "async nio ticks on loop p50 µs", "display 60 Hz floor lateness p50 µs",
                "fanout libevent (tolerance 0.0 µs, jitter 0.0 µs, herd) CPU ns per fire", "first-fire epoll p50 µs",
                "first-fire runloop p50 µs", "idle dispatch wake-ups per s above baseline",
            ], "one slice is a figure without an interval; drift has none")
        #expect(run.figures["first-fire runloop p50 µs"]?.hasInterval == false)
        #expect(run.scenarios == ["async", "display", "drift", "fanout", "first-fire", "idle"])
        #expect(run.figures["first-fire epoll p50 µs"]?.median == 2, "recomputed from the slices, not read")
    }
}
