import Foundation

/// The figures with intervals, and the machine, of a run saved with `--json`.
public struct SavedRun: Sendable {
    /// Each figure with an interval, by a name such as "latency none epoll p50 µs".
    public var figures: [String: Estimate] = [:]
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
            guard let object, let data = try? JSONSerialization.data(withJSONObject: object) else { return nil }
            let decoder = JSONDecoder()
            decoder.keyDecodingStrategy = .convertFromSnakeCase
            // Recomputed from the slices, so that every interval compared is made the same way.
            return (try? decoder.decode(Estimate.self, from: data)).map { Estimate(slices: $0.slices) }
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
    public func machineDifferences(from other: SavedRun) -> [String] {
        Set(machine.keys).union(other.machine.keys).sorted().compactMap { key in
            let (mine, theirs) = (machine[key] ?? "-", other.machine[key] ?? "-")
            return mine == theirs ? nil : "the runs differ in \(key): '\(mine)' vs '\(theirs)'"
        }
    }
}
