import Foundation

/// The figures with intervals, and the machine, of a run saved with `--json`.
public struct SavedRun: Sendable {
    /// Each figure, by a name such as "latency none epoll p50 µs". A figure measured once (a
    /// throughput phase at 1,000 timers is a single batch) has no interval: it is shown and its
    /// change given, but no verdict.
    public var figures: [String: Estimate] = [:]
    /// The scenarios of the run's results, whether or not they give figures.
    public var scenarios: [String] = []
    /// The scenarios whose results give figures to compare.
    public static let comparedScenarios = ["latency", "throughput", "first-fire", "fanout", "idle", "display", "async"]
    /// What the run's machine and build were (its date and load left out).
    public var machine: [String: String] = [:]
    /// The 1-minute load average at the run's start and end.
    public var load = "?"

    /// Reads a `timerkit-bench --json` report; nil if `json` is not one.
    public init?(json: Data) {
        guard let root = try? JSONSerialization.jsonObject(with: json) as? [String: Any], let results = root["results"] as? [[String: Any]]
        else { return nil }
        if let machine = root["machine"] as? [String: Any] {
            // The date and the load differ from run to run by nature: shown, not warned about.
            for (key, value) in machine where !["date", "load_average_before", "load_average_after"].contains(key) {
                self.machine[key] = "\(value)"
            }
            load = "\(machine["load_average_before"] ?? "?") → \(machine["load_average_after"] ?? "?")"
        }
        func estimate(_ object: Any?) -> Estimate? {
            // Only an object: serializing anything else (a plain number where an estimate was
            // expected) traps in Foundation.
            guard let object = object as? [String: Any], let data = try? JSONSerialization.data(withJSONObject: object) else { return nil }
            let decoder = JSONDecoder()
            decoder.keyDecodingStrategy = .convertFromSnakeCase
            // Recomputed from the slices, so that every interval compared is made the same way.
            return (try? decoder.decode(Estimate.self, from: data)).map { Estimate(slices: $0.slices) }
        }
        var scenarios: Set<String> = []
        for result in results {
            guard let scenario = result["scenario"] as? String, let backend = result["backend"] as? String else { continue }
            scenarios.insert(scenario)
            for (name, key) in Self.figureKeys(scenario: scenario, result: result) {
                if let value = estimate(result[key]), !value.slices.isEmpty { figures["\(scenario) \(name(backend))"] = value }
            }
        }
        self.scenarios = scenarios.sorted()
    }

    /// The figures of one result: a name (given the backend) and the JSON key of its estimate.
    /// Results of one scenario that measure different things (a load, a number of timers, a
    /// mode of waiting, a refresh rate) carry that in the name.
    static func figureKeys(scenario: String, result: [String: Any]) -> [(name: (String) -> String, key: String)] {
        switch scenario {
        case "latency":
            let load = result["load"] as? String ?? "none"
            return [({ "\(load) \($0) p50 µs" }, "p50_us")]
        case "throughput":
            let timers = result["timers"] as? Int ?? 0
            return ["schedule", "reset", "cancel"].map { phase in ({ "\($0) \(timers) \(phase) ns" }, "\(phase)_ns_estimate") }
        case "first-fire":
            return [({ "\($0) p50 µs" }, "p50_us")]
        case "fanout":
            let tolerance = result["tolerance_us"] as? Double ?? 0
            let jitter = result["jitter_us"] as? Double ?? 0
            let herd = result["herd"] as? Bool ?? false
            let setup = "tolerance \(tolerance) µs, jitter \(jitter) µs\(herd ? ", herd" : "")"
            return [({ "\($0) (\(setup)) CPU ns per fire" }, "cpu_ns_per_fire_estimate")]
        case "idle":
            return [({ "\($0) wake-ups per s above baseline" }, "wakeups_per_second_above_baseline")]
        case "display":
            let rate = result["refresh_hz"] as? Int ?? 0
            return [({ "\(rate) Hz \($0) lateness p50 µs" }, "lateness_p50_us")]
        case "async":
            let mode = result["mode"] as? String ?? "?"
            let executor = result["executor"] as? String ?? "?"
            return [({ "\($0) \(mode) on \(executor) p50 µs" }, "p50_us")]
        default:
            return []
        }
    }

    /// What differs between the two runs' machines and builds, which moves the numbers.
    public func machineDifferences(from other: SavedRun) -> [String] {
        Set(machine.keys).union(other.machine.keys).sorted().compactMap { key in
            let (mine, theirs) = (machine[key] ?? "-", other.machine[key] ?? "-")
            return mine == theirs ? nil : "the runs differ in \(key): '\(mine)' vs '\(theirs)'"
        }
    }
}
