import ArgumentParser
import BenchStatistics
import Foundation

/// `compare OLD.json NEW.json`: each figure of both runs, old against new, the change of its
/// median, and a verdict only where both have intervals and they do not overlap.
struct CompareRuns: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compare",
        abstract: "Compares two runs saved with --json: old against new, figure by figure, beyond the noise or not.",
        discussion: """
            Figures compared: each backend's p50 in latency, first-fire, display and async (over its \
            rounds), fan-out CPU ns per fire and idle wake-ups (over their rounds), and throughput \
            schedule, reset and cancel ns (over their 1,000-operation batches). Every one is a cost: \
            lower is better. A change is reported only when the two 95 % intervals do not overlap; \
            otherwise "no measurable difference". A figure measured once (throughput at 1,000 timers \
            is one batch) has no interval: its change is shown, "not judged". Warns when the two runs \
            come from different machines or builds.
            """)

    @Argument(help: "The earlier run's JSON (timerkit-bench --json > old.json).")
    var old: String

    @Argument(help: "The later run's JSON.")
    var new: String

    @Option(help: "Exit with status 1 when a figure got worse beyond its noise by more than this many percent.")
    var failOnRegression: Double?

    func validate() throws {
        if let failOnRegression, !(failOnRegression >= 0) {
            throw ValidationError("--fail-on-regression must be a percentage, 0 or more (got \(failOnRegression))")
        }
    }

    func run() throws {
        let before = try savedRun(old)
        let after = try savedRun(new)
        let comparison: Comparison
        do {
            comparison = try Comparison(old: before, at: old, new: after, at: new)
        } catch {
            throw ValidationError(error.description)
        }
        print("load average (1 min, start → end): old \(before.load), new \(after.load)")
        for warning in before.machineDifferences(from: after) { print("warning: \(warning)") }
        let changes = comparison.changes
        print(aligned([["figure", "old [95 %]", "new [95 %]", "change", "verdict"]] + changes.map(\.row)))
        let unjudged = comparison.unjudged.count
        if unjudged > 0 {
            print(
                "\(unjudged) of \(changes.count) figure(s) have no interval in one run or both (measured once: throughput at "
                    + "1,000 timers is a single batch of 1,000 operations): their change is shown, not judged")
        }
        for (path, figures) in [(old, comparison.onlyInOld), (new, comparison.onlyInNew)] where !figures.isEmpty {
            print("only in '\(path)', not compared: \(figures.joined(separator: "; "))")
        }
        let regressions = failOnRegression.map { limit in changes.filter { $0.isRegression(beyond: limit) } } ?? []
        if let limit = failOnRegression {
            guard regressions.isEmpty else {
                print(
                    "\(regressions.count) figure(s) worse beyond the noise by more than \(format(limit)) %: \(regressions.map(\.figure).joined(separator: ", "))"
                )
                throw ExitCode(1)
            }
            if unjudged == changes.count {
                print("--fail-on-regression judged no figure: none has an interval in both runs")
            } else {
                let judged = unjudged > 0 ? " (of the \(changes.count - unjudged) with an interval in both runs)" : ""
                print("no figure worse beyond the noise by more than \(format(limit)) %\(judged)")
            }
        }
    }
}

extension Change {
    var row: [String] {
        func show(_ estimate: Estimate) -> String {
            guard estimate.hasInterval else { return "\(format(estimate.median)) (no interval)" }
            return "\(format(estimate.median)) [\(format(estimate.ci95Low)), \(format(estimate.ci95High))]"
        }
        let verdictText: String =
            switch verdict {
            case .noDifference: "no measurable difference"
            case .lower: "better (lower)"
            case .higher: "worse (higher)"
            case .noInterval: "not judged: no interval"
            }
        return [figure, show(old), show(new), String(format: "%+.1f %%", percent), verdictText]
    }
}

/// The run saved at `path`, or a validation error naming it.
func savedRun(_ path: String) throws -> SavedRun {
    guard let data = FileManager.default.contents(atPath: path) else { throw ValidationError("cannot read '\(path)'") }
    guard let run = SavedRun(json: data) else { throw ValidationError("'\(path)' is not a timerkit-bench --json run") }
    return run
}
