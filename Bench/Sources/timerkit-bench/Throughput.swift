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
let resetPush: Duration = .seconds(60)

func runThroughput(backends: [BenchBackend], timers count: Int, includeRaw: Bool = true) throws -> [ThroughputResult] {
    var rng = SystemRandomNumberGenerator()
    // The workload is made before any measurement so its memory is not counted.
    let delays: [Duration] = (0..<count).map { _ in .nanoseconds(Int64.random(in: 60_000_000_000...120_000_000_000, using: &rng)) }
    let resetOrder = Array(0..<count).shuffled(using: &rng)
    let cancelOrder = Array(0..<count).shuffled(using: &rng)
    let order = RunOrder(reset: resetOrder, cancel: cancelOrder)
    let batch = 1000
    var results: [ThroughputResult] = []
    // An unmeasured pass first: the first subject in a process otherwise pays one-off costs
    // (the allocator growing its arenas, the kernel faulting them in) that later ones do not.
    do {
        progress("throughput: warm-up")
        let warmUp = ManualBackend(registry: TimerRegistry())
        let handles = try delays.map { try warmUp.schedule(.after($0)) { _ in } }
        for i in cancelOrder { handles[i].cancel() }
        warmUp.shutdown()
    }
    for backend in backends {
        guard let make = backend.make else { continue }
        progress("throughput: \(backend.name) \(count) timers")
        let instance = try make(TimerRegistry())
        var handles: [TimerHandle?] = Array(repeating: nil, count: count)

        results.append(
            try measure(backend.name, count) { atPeak in
                let schedule = try timeBatches(count, batch) { i in
                    handles[i] = try instance.schedule(.after(delays[i])) { _ in }
                }
                atPeak()
                let reset = try timeBatches(count, batch) { i in
                    let index = resetOrder[i]
                    try handles[index]?.reschedule(.after(delays[index] + resetPush))
                }
                let cancel = try timeBatches(count, batch) { i in handles[cancelOrder[i]]?.cancel() }
                instance.shutdown()
                return PhaseTimings(schedule: schedule, reset: reset, cancel: cancel)
            })
        handles = []
    }
    for baseline in rawBaselines where includeRaw && count <= baseline.maxTimers {
        progress("throughput: \(baseline.name) \(count) timers")
        results.append(try measure(baseline.name, count) { atPeak in try baseline.run(delays, order, batch, atPeak) })
    }
    progressDone()
    return results
}

/// The random orders in which a throughput run resets and cancels its timers.
struct RunOrder: Sendable {
    let reset: [Int]
    let cancel: [Int]
}

/// Runs one subject from a trimmed heap, as a fresh process would start: `run` times its
/// schedules, resets and cancels in batches and calls `atPeak` after scheduling, when memory
/// is read.
func measure(
    _ name: String, _ count: Int,
    _ run: (_ atPeak: () -> Void) throws -> PhaseTimings
) throws -> ThroughputResult {
    releaseFreeMemory()
    let rssBefore = residentBytes()
    let heapBefore = heapBytesInUse()
    var rssAfter = rssBefore
    var heapAfter = heapBefore
    let timings = try run {
        rssAfter = residentBytes()
        heapAfter = heapBytesInUse()
    }
    return ThroughputResult(
        backend: name, timers: count,
        scheduleNs: median(timings.schedule), resetNs: median(timings.reset), cancelNs: median(timings.cancel),
        scheduleNsP99: quantile(timings.schedule, 0.99), resetNsP99: quantile(timings.reset, 0.99),
        cancelNsP99: quantile(timings.cancel, 0.99),
        scheduleNsMean: mean(timings.schedule), resetNsMean: mean(timings.reset), cancelNsMean: mean(timings.cancel),
        scheduleNsEstimate: Estimate(slices: timings.schedule), resetNsEstimate: Estimate(slices: timings.reset),
        cancelNsEstimate: Estimate(slices: timings.cancel),
        bytesPerTimer: Double(rssAfter - rssBefore) / Double(count),
        heapBytesPerTimer: Double(heapAfter - heapBefore) / Double(count))
}

func nanoseconds(since start: MonotonicInstant) -> Double {
    Double(MonotonicInstant.now().nanoseconds - start.nanoseconds)
}
