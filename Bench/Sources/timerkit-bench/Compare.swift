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
        let before = try SavedRun(path: old)
        let after = try SavedRun(path: new)
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

/// The figures with intervals, and the machine, of a run saved with `--json`.
struct SavedRun {
    var figures: [String: Estimate] = [:]
    var machine: [String: String] = [:]
    /// The 1-minute load average at the run's start and end.
    var load = "?"

    init(path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else { throw ValidationError("cannot read '\(path)'") }
        guard let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any], let results = root["results"] as? [[String: Any]]
        else { throw ValidationError("'\(path)' is not a timerkit-bench --json run") }
        if let machine = root["machine"] as? [String: Any] {
            // The date and the load differ from run to run by nature: shown, not warned about.
            for (key, value) in machine where !["date", "load_average_before", "load_average_after"].contains(key) {
                self.machine[key] = "\(value)"
            }
            load = "\(machine["load_average_before"] ?? "?") → \(machine["load_average_after"] ?? "?")"
        }
        func estimate(_ object: Any?) -> Estimate? {
            guard let object, let data = try? JSONSerialization.data(withJSONObject: object) else { return nil }
            let decoder = JSONDecoder()
            decoder.keyDecodingStrategy = .convertFromSnakeCase
            return try? decoder.decode(Estimate.self, from: data)
        }
        for result in results {
            guard let scenario = result["scenario"] as? String, let backend = result["backend"] as? String else { continue }
            switch scenario {
            case "latency":
                let load = result["load"] as? String ?? "none"
                if let p50 = estimate(result["p50_us"]), p50.slices.count > 1 { figures["latency \(load) \(backend) p50 µs"] = p50 }
            case "throughput":
                let timers = result["timers"] as? Int ?? 0
                for phase in ["schedule", "reset", "cancel"] {
                    if let value = estimate(result["\(phase)_ns_estimate"]), value.slices.count > 1 {
                        figures["throughput \(backend) \(timers) \(phase) ns"] = value
                    }
                }
            default:
                continue
            }
        }
    }

    /// What differs between the two runs' machines and builds, which moves the numbers.
    func machineDifferences(from other: SavedRun) -> [String] {
        Set(machine.keys).union(other.machine.keys).sorted().compactMap { key in
            let (mine, theirs) = (machine[key] ?? "-", other.machine[key] ?? "-")
            return mine == theirs ? nil : "the runs differ in \(key): '\(mine)' vs '\(theirs)'"
        }
    }
}
