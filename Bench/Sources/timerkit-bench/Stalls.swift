import BenchStatistics
import TimerKit

/// `stalls`: the longest single schedule, reset and cancel among N live timers: what a
/// store's growth (a table copied to a bigger one) or a pass over every entry costs the one
/// operation that pays for it, and so how long it holds the lock other threads wait on.
///
/// Each operation is timed on its own (the clock reads add some 20–40 ns to every figure;
/// `throughput` gives the per-operation costs). A long operation may be the machine's doing
/// (the thread preempted) rather than the store's, so each subject runs twice with the same
/// workload: a stall of the store comes back at the same operation, the machine's rarely
/// does. The figure to read is `recurringMaxNs`, the longest operation both runs agree on
/// (for each operation the shorter of its two times, then the longest of those).
struct StallsResult: Codable {
    var scenario = "stalls"
    var backend: String
    var timers: Int
    var phases: [StallPhase]
}

struct StallPhase: Codable {
    /// "schedule", "reset" or "cancel".
    var phase: String
    /// The longest operation of each run (ns): may be the machine's noise.
    var maxNs: [Double]
    /// The longest operation both runs agree on (ns), and which it was (0-based, in the
    /// phase's order).
    var recurringMaxNs: Double
    var recurringIndex: Int
    /// Operations at least 50 µs long in both runs.
    var recurringOver50Us: Int
    /// The 99.99th percentile of the operations both runs agree on (ns).
    var recurringP9999Ns: Double
}

/// The threshold the store's goal names: no operation holds the lock longer.
let stallThresholdNs = 50_000.0

func runStalls(backends: [BenchBackend], timers count: Int, includeRaw: Bool) throws -> [StallsResult] {
    var rng = SystemRandomNumberGenerator()
    let delays = workloadDelays(count: count, using: &rng)
    let resetOrder = Array(0..<count).shuffled(using: &rng)
    let cancelOrder = Array(0..<count).shuffled(using: &rng)
    var makers: [(name: String, make: () throws -> any ThroughputSubject)] = backends.compactMap { backend in
        backend.make.map { make in
            (backend.name, { TimerKitSubject(name: backend.name, instance: try make(TimerRegistry()), delays: delays) })
        }
    }
    if includeRaw {
        // Not foundation-raw: its cancel is O(n), a stall by design at any size.
        makers += rawBaselines.filter { count <= $0.maxTimers && $0.name != "foundation-raw" }.map { baseline in
            (baseline.name, { try baseline.make(delays) })
        }
    }
    let phases: [(name: String, run: (any ThroughputSubject, Int) throws -> Void)] = [
        ("schedule", { try $0.schedule($1) }),
        ("reset", { try $0.reset(resetOrder[$1]) }),
        ("cancel", { try $0.cancel(cancelOrder[$1]) }),
    ]
    var results: [StallsResult] = []
    for maker in makers {
        // [run][phase][operation] in ns.
        var runs: [[[UInt32]]] = []
        for run in 0..<2 {
            progress("stalls: \(maker.name), \(count) timers, run \(run + 1)/2")
            let subject = try maker.make()
            var times: [[UInt32]] = []
            for phase in phases {
                var phaseTimes = [UInt32](repeating: 0, count: count)
                for i in 0..<count {
                    let start = MonotonicInstant.now().nanoseconds
                    try phase.run(subject, i)
                    phaseTimes[i] = UInt32(clamping: MonotonicInstant.now().nanoseconds - start)
                }
                times.append(phaseTimes)
            }
            subject.finish()
            runs.append(times)
        }
        results.append(
            StallsResult(
                backend: maker.name, timers: count,
                phases: phases.indices.map { p in
                    let first = runs[0][p]
                    let second = runs[1][p]
                    let agreed = zip(first, second).map { Double(min($0, $1)) }
                    let longest = agreed.indices.max { agreed[$0] < agreed[$1] } ?? 0
                    return StallPhase(
                        phase: phases[p].name, maxNs: [Double(first.max() ?? 0), Double(second.max() ?? 0)],
                        recurringMaxNs: agreed.isEmpty ? 0 : agreed[longest], recurringIndex: longest,
                        recurringOver50Us: agreed.count { $0 >= stallThresholdNs },
                        recurringP9999Ns: quantile(agreed, 0.9999))
                }))
    }
    progressDone()
    return results
}
