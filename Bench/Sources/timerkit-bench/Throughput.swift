import BenchStatistics
import TimerKit

/// `throughput`: schedule N timers with random deadlines through the public API, reset each
/// once to a later deadline (an idle timeout moved on a read), in random order, then cancel
/// them in random order.
struct ThroughputResult: Codable {
    var scenario = "throughput"
    var backend: String
    var timers: Int
    /// Median over batches of 1,000 operations of the mean ns per schedule.
    var scheduleNs: Double
    /// Median over batches of 1,000 operations of the mean ns per reset (a reschedule to a
    /// later deadline of a timer that is waiting).
    var resetNs: Double
    /// Median over batches of 1,000 operations of the mean ns per cancel.
    var cancelNs: Double
    /// The 99th percentile of the batches' ns per operation: what the slow batches cost.
    var scheduleNsP99: Double
    var resetNsP99: Double
    var cancelNsP99: Double
    /// Mean ns per schedule over the whole run (includes the rare expensive batches the median skips).
    var scheduleNsMean: Double
    /// Mean ns per reset over the whole run.
    var resetNsMean: Double
    /// Mean ns per cancel over the whole run (includes heap compactions).
    var cancelNsMean: Double
    /// The batches' ns per operation of each phase: median and 95 % interval over the batches
    /// (what `compare` reads), with every batch's figure.
    var scheduleNsEstimate: Estimate
    var resetNsEstimate: Estimate
    var cancelNsEstimate: Estimate
    /// Resident memory added per live timer (registry, heap and timer all included).
    var bytesPerTimer: Double
    /// Allocator bytes in use per live timer (mallinfo2), a steadier cross-check of the RSS figure.
    var heapBytesPerTimer: Double
}

func mean(_ values: [Double]) -> Double {
    values.isEmpty ? 0 : values.reduce(0, +) / Double(values.count)
}

func median(_ values: [Double]) -> Double { quantile(values, 0.5) }

/// The value below which a fraction `q` of `values` lie (nearest rank); 0 when empty.
func quantile(_ values: [Double], _ q: Double) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int((Double(sorted.count) * q).rounded(.down)))]
}

/// Batches of ns per operation for each phase of a throughput run.
struct PhaseTimings {
    var schedule: [Double]
    var reset: [Double]
    var cancel: [Double]
}

/// How far a reset moves a deadline: past every deadline of the run, so each reset is later.
let resetPush: Duration = .seconds(3600)

/// The deadlines of a throughput or stalls run: 1–2 hours away, in random order, so that no
/// timer comes due before the run is over, however slow its slowest subject (a million
/// resets of nio-raw take minutes), and every schedule, reset and cancel acts on a waiting one.
func workloadDelays(count: Int, using rng: inout some RandomNumberGenerator) -> [Duration] {
    (0..<count).map { _ in .nanoseconds(Int64.random(in: 3_600_000_000_000...7_200_000_000_000, using: &rng)) }
}

/// Every subject (the TimerKit backends, then the raw baselines) holds `count` timers at once,
/// and the subjects take turns batch by batch — schedule batch k of each, in an order rotated
/// every batch, then the resets, then the cancels — so the machine's noise falls on all of
/// them alike. Memory is the growth of the process's RSS and allocator use across each
/// subject's own schedule batches.
func runThroughput(backends: [BenchBackend], timers count: Int, includeRaw: Bool = true) throws -> [ThroughputResult] {
    var rng = SystemRandomNumberGenerator()
    // The workload is made before any measurement so its memory is not counted.
    let delays = workloadDelays(count: count, using: &rng)
    let resetOrder = Array(0..<count).shuffled(using: &rng)
    let cancelOrder = Array(0..<count).shuffled(using: &rng)
    let batch = 1000
    // An unmeasured pass first: the first subject in a process otherwise pays one-off costs
    // (the allocator growing its arenas, the kernel faulting them in) that later ones do not.
    do {
        progress("throughput: warm-up")
        let warmUp = ManualBackend(registry: TimerRegistry())
        let handles = try delays.map { try warmUp.schedule(.after($0)) { _ in } }
        for i in cancelOrder { handles[i].cancel() }
        warmUp.shutdown()
    }
    releaseFreeMemory()
    var subjects: [any ThroughputSubject] = try backends.compactMap { backend in
        try backend.make.map { TimerKitSubject(name: backend.name, instance: try $0(TimerRegistry()), delays: delays) }
    }
    if includeRaw { subjects += try rawBaselines.filter { count <= $0.maxTimers }.map { try $0.make(delays) } }
    var timings = [PhaseTimings](repeating: PhaseTimings(schedule: [], reset: [], cancel: []), count: subjects.count)
    var rssGrowth = [Int](repeating: 0, count: subjects.count)
    var heapGrowth = [Int](repeating: 0, count: subjects.count)
    let batches = (count + batch - 1) / batch
    // Each phase: its name, where its batches go, and one operation on timer `i` of a subject.
    let phases: [(name: String, timings: WritableKeyPath<PhaseTimings, [Double]>, run: (any ThroughputSubject, Int) throws -> Void)] = [
        ("schedule", \.schedule, { try $0.schedule($1) }),
        ("reset", \.reset, { try $0.reset(resetOrder[$1]) }),
        ("cancel", \.cancel, { try $0.cancel(cancelOrder[$1]) }),
    ]
    for phase in phases {
        // Memory grows only while scheduling: read around those batches alone.
        let readsMemory = phase.name == "schedule"
        for k in 0..<batches {
            if k % 100 == 0 { progress("throughput: \(count) timers, \(phase.name) batch \(k + 1)/\(batches)") }
            let range = k * batch..<min((k + 1) * batch, count)
            let shift = k % subjects.count
            for s in Array(shift..<subjects.count) + Array(0..<shift) {
                let (rssBefore, heapBefore) = readsMemory ? (residentBytes(), heapBytesInUse()) : (0, 0)
                let start = MonotonicInstant.now()
                for i in range { try phase.run(subjects[s], i) }
                timings[s][keyPath: phase.timings].append(nanoseconds(since: start) / Double(range.count))
                if readsMemory {
                    rssGrowth[s] += residentBytes() - rssBefore
                    heapGrowth[s] += heapBytesInUse() - heapBefore
                }
            }
        }
    }
    let names = subjects.map(\.name)
    for subject in subjects { subject.finish() }
    subjects = []
    progressDone()
    return timings.indices.map { s in
        let t = timings[s]
        return ThroughputResult(
            backend: names[s], timers: count,
            scheduleNs: median(t.schedule), resetNs: median(t.reset), cancelNs: median(t.cancel),
            scheduleNsP99: quantile(t.schedule, 0.99), resetNsP99: quantile(t.reset, 0.99), cancelNsP99: quantile(t.cancel, 0.99),
            scheduleNsMean: mean(t.schedule), resetNsMean: mean(t.reset), cancelNsMean: mean(t.cancel),
            scheduleNsEstimate: Estimate(slices: t.schedule), resetNsEstimate: Estimate(slices: t.reset),
            cancelNsEstimate: Estimate(slices: t.cancel),
            bytesPerTimer: Double(rssGrowth[s]) / Double(count), heapBytesPerTimer: Double(heapGrowth[s]) / Double(count))
    }
}

func nanoseconds(since start: MonotonicInstant) -> Double {
    Double(MonotonicInstant.now().nanoseconds - start.nanoseconds)
}
