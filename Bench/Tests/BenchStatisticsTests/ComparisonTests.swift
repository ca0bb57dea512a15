import BenchStatistics
import Foundation
import Testing

/// `timerkit-bench compare`: what it compares, what it judges, and what it refuses.
@Suite("Comparing saved runs")
struct ComparisonTests {
    /// A throughput run of one backend: each phase's estimate has `slices` (at 1,000 timers,
    /// the one batch there is).
    static func throughput(timers: Int, backend: String = "epoll", slices: [Double]) -> SavedRun? {
        let estimate = #"{"median": 0, "ci95_low": 0, "ci95_high": 0, "confidence": 0, "slices": \#(slices)}"#
        let json = """
            {"machine": {}, "results": [{"scenario": "throughput", "backend": "\(backend)", "timers": \(timers),
              "schedule_ns_estimate": \(estimate), "reset_ns_estimate": \(estimate), "cancel_ns_estimate": \(estimate)}]}
            """
        return SavedRun(json: Data(json.utf8))
    }

    /// Two `throughput --timers 1000` runs: every figure is one batch, so none has an interval.
    /// They were refused ("no figure in common"); they are compared, with no verdict.
    @Test func runsOfAThousandTimersAreComparedWithTheirChangeAndNoVerdict() throws {
        let old = try #require(Self.throughput(timers: 1000, slices: [900]))
        let new = try #require(Self.throughput(timers: 1000, slices: [1800]))
        let names = ["throughput epoll 1000 cancel ns", "throughput epoll 1000 reset ns", "throughput epoll 1000 schedule ns"]
        #expect(old.figures.keys.sorted() == names, "a figure measured once is kept")
        let comparison = try Comparison(old: old, at: "old.json", new: new, at: "new.json")
        #expect(comparison.changes.map(\.figure) == names)
        for change in comparison.changes {
            #expect(change.old.median == 900 && change.new.median == 1800)
            #expect(change.percent == 100)
            #expect(change.verdict == .noInterval, "two points: whether they differ beyond the noise is unknown")
            #expect(!change.isRegression(beyond: 10), "no verdict, so no regression")
        }
        #expect(comparison.unjudged.count == 3)
        #expect(comparison.onlyInOld.isEmpty && comparison.onlyInNew.isEmpty)
    }

    @Test func aPointAgainstAnIntervalIsNotJudgedEither() {
        let point = Estimate(slices: [100])
        let interval = Estimate(slices: [10, 11, 12, 10, 11, 12])
        #expect(!point.hasInterval && interval.hasInterval)
        #expect(Verdict(from: point, to: interval) == .noInterval)
        #expect(Verdict(from: interval, to: point) == .noInterval)
        #expect(Verdict(from: interval, to: Estimate(slices: [20, 21, 22, 20, 21, 22])) == .higher, "intervals on both sides are judged")
    }

    @Test func figuresOfOneRunOnlyAreListedApart() throws {
        let old = try #require(Self.throughput(timers: 10_000, slices: [1, 2, 3, 4, 5, 6]))
        let estimate = #"{"median": 0, "ci95_low": 0, "ci95_high": 0, "confidence": 0, "slices": [1, 2, 3, 4, 5, 6]}"#
        let json = """
            {"machine": {}, "results": [
              {"scenario": "throughput", "backend": "epoll", "timers": 10000, "schedule_ns_estimate": \(estimate)},
              {"scenario": "idle", "backend": "epoll", "wakeups_per_second_above_baseline": \(estimate)}]}
            """
        let new = try #require(SavedRun(json: Data(json.utf8)))
        let comparison = try Comparison(old: old, at: "old.json", new: new, at: "new.json")
        #expect(comparison.changes.map(\.figure) == ["throughput epoll 10000 schedule ns"])
        #expect(comparison.changes.first?.verdict == .noDifference)
        #expect(comparison.onlyInOld == ["throughput epoll 10000 cancel ns", "throughput epoll 10000 reset ns"])
        #expect(comparison.onlyInNew == ["idle epoll wake-ups per s above baseline"])
    }

    @Test func runsThatCannotBeComparedAreRefusedNamingWhatEachHolds() throws {
        let thousand = try #require(Self.throughput(timers: 1000, slices: [900]))
        let tenThousand = try #require(Self.throughput(timers: 10_000, slices: [1, 2, 3]))
        let drift = try #require(
            SavedRun(json: Data(#"{"machine": {}, "results": [{"scenario": "drift", "backend": "epoll", "first_tenth_p50_us": 1}]}"#.utf8)))
        let empty = try #require(SavedRun(json: Data(#"{"results": []}"#.utf8)))

        #expect(throws: Comparison.Failure.noFigure(path: "drift.json", scenarios: ["drift"])) {
            try Comparison(old: drift, at: "drift.json", new: thousand, at: "new.json")
        }
        #expect(
            Comparison.Failure.noFigure(path: "drift.json", scenarios: ["drift"]).description
                == "'drift.json' has no figure to compare: its results are drift, and compare reads latency, throughput, "
                + "first-fire, fanout, idle, display, async")
        #expect(throws: Comparison.Failure.noFigure(path: "empty.json", scenarios: [])) {
            try Comparison(old: thousand, at: "old.json", new: empty, at: "empty.json")
        }
        #expect(
            Comparison.Failure.noFigure(path: "empty.json", scenarios: []).description
                == "'empty.json' has no figure to compare: it has no results")
        // Results of a compared scenario with no estimate in them (or none that reads).
        let bare = try #require(
            SavedRun(json: Data(#"{"results": [{"scenario": "idle", "backend": "epoll", "wakeups_per_second_above_baseline": 0.5}]}"#.utf8))
        )
        #expect(throws: Comparison.Failure.noFigure(path: "bare.json", scenarios: ["idle"])) {
            try Comparison(old: bare, at: "bare.json", new: thousand, at: "new.json")
        }
        #expect(
            Comparison.Failure.noFigure(path: "bare.json", scenarios: ["idle"]).description
                == "'bare.json' has no figure to compare: its idle results hold no estimate with slices")

        let names = { (timers: Int) in ["cancel", "reset", "schedule"].map { "throughput epoll \(timers) \($0) ns" } }
        let apart = Comparison.Failure.noFigureInCommon(
            old: "1k.json", oldFigures: names(1000), new: "10k.json", newFigures: names(10_000))
        #expect(throws: apart) { try Comparison(old: thousand, at: "1k.json", new: tenThousand, at: "10k.json") }
        #expect(
            apart.description
                == "no figure is in both runs: '1k.json' has 3 (throughput epoll 1000 cancel ns; throughput epoll 1000 reset ns; "
                + "throughput epoll 1000 schedule ns), '10k.json' has 3 (throughput epoll 10000 cancel ns; throughput epoll 10000 "
                + "reset ns; throughput epoll 10000 schedule ns) (run the same scenarios, backends and --timers in both)")
    }
}
