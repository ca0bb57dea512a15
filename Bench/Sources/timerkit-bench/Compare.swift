import ArgumentParser
import BenchStatistics
import Foundation

/// `compare OLD.json NEW.json`: each figure with an interval in both runs, old against new,
/// the change of its median, and a verdict only where the intervals do not overlap.
struct CompareRuns: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compare",
        abstract: "Compares two runs saved with --json: old against new, figure by figure, beyond the noise or not.",
        discussion: """
            Figures compared: each backend's latency p50 (over its slices) and throughput schedule, \
            reset and cancel ns (over their batches). Every one is a cost: lower is better. A change \
            is reported only when the two 95 % intervals do not overlap; otherwise "no measurable \
            difference". Warns when the two runs come from different machines or builds.
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
        print("load average (1 min, start → end): old \(before.load), new \(after.load)")
        for warning in before.machineDifferences(from: after) { print("warning: \(warning)") }
        let changes = before.figures.keys.sorted().compactMap { figure -> Change? in
            guard let was = before.figures[figure], let now = after.figures[figure] else { return nil }
            return Change(figure: figure, old: was, new: now)
        }
        guard !changes.isEmpty else {
            throw ValidationError("the two runs have no figure in common (run the same scenarios with --json)")
        }
        print(aligned([["figure", "old [95 %]", "new [95 %]", "change", "verdict"]] + changes.map(\.row)))
        let regressions = failOnRegression.map { limit in changes.filter { $0.isRegression(beyond: limit) } } ?? []
        if let limit = failOnRegression {
            guard regressions.isEmpty else {
                print(
                    "\(regressions.count) figure(s) worse beyond the noise by more than \(format(limit)) %: \(regressions.map(\.figure).joined(separator: ", "))"
                )
                throw ExitCode(1)
            }
            print("no figure worse beyond the noise by more than \(format(limit)) %")
        }
    }
}

extension Change {
    var row: [String] {
        func show(_ estimate: Estimate) -> String {
            "\(format(estimate.median)) [\(format(estimate.ci95Low)), \(format(estimate.ci95High))]"
        }
        let verdictText: String =
            switch verdict {
            case .noDifference: "no measurable difference"
            case .lower: "better (lower)"
            case .higher: "worse (higher)"
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
