import TimerKit

/// `throughput`: schedule N timers with random deadlines through the public API, then
/// cancel them in random order.
struct ThroughputResult: Codable {
    var scenario = "throughput"
    var backend: String
    var timers: Int
    /// Median over batches of 1,000 operations of the mean ns per schedule.
    var scheduleNs: Double
    /// Median over batches of 1,000 operations of the mean ns per cancel.
    var cancelNs: Double
    /// Mean ns per schedule over the whole run (includes the rare expensive batches the median skips).
    var scheduleNsMean: Double
    /// Mean ns per cancel over the whole run (includes heap compactions).
    var cancelNsMean: Double
    /// Resident memory added per live timer (registry, heap and timer all included).
    var bytesPerTimer: Double
    /// Allocator bytes in use per live timer (mallinfo2), a steadier cross-check of the RSS figure.
    var heapBytesPerTimer: Double
}

func mean(_ values: [Double]) -> Double {
    values.isEmpty ? 0 : values.reduce(0, +) / Double(values.count)
}

func median(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

func runThroughput(backends: [BenchBackend], timers count: Int, includeRaw: Bool = true) throws -> [ThroughputResult] {
    var rng = SystemRandomNumberGenerator()
    // The workload is made before any measurement so its memory is not counted.
    let delays: [Duration] = (0..<count).map { _ in .nanoseconds(Int64.random(in: 1_000_000_000...60_000_000_000, using: &rng)) }
    let cancelOrder = Array(0..<count).shuffled(using: &rng)
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
                let cancel = try timeBatches(count, batch) { i in handles[cancelOrder[i]]?.cancel() }
                instance.shutdown()
                return (schedule, cancel)
            })
        handles = []
    }
    for baseline in rawBaselines where includeRaw && count <= baseline.maxTimers {
        progress("throughput: \(baseline.name) \(count) timers")
        results.append(try measure(baseline.name, count) { atPeak in try baseline.run(delays, cancelOrder, batch, atPeak) })
    }
    progressDone()
    return results
}

/// Runs one subject from a trimmed heap, as a fresh process would start: `run` times its
/// schedules and cancels in batches and calls `atPeak` in between, when memory is read.
func measure(
    _ name: String, _ count: Int,
    _ run: (_ atPeak: () -> Void) throws -> (schedule: [Double], cancel: [Double])
) throws -> ThroughputResult {
    releaseFreeMemory()
    let rssBefore = residentBytes()
    let heapBefore = heapBytesInUse()
    var rssAfter = rssBefore
    var heapAfter = heapBefore
    let (schedule, cancel) = try run {
        rssAfter = residentBytes()
        heapAfter = heapBytesInUse()
    }
    return ThroughputResult(
        backend: name, timers: count,
        scheduleNs: median(schedule), cancelNs: median(cancel),
        scheduleNsMean: mean(schedule), cancelNsMean: mean(cancel),
        bytesPerTimer: Double(rssAfter - rssBefore) / Double(count),
        heapBytesPerTimer: Double(heapAfter - heapBefore) / Double(count))
}

func nanoseconds(since start: MonotonicInstant) -> Double {
    Double(MonotonicInstant.now().nanoseconds - start.nanoseconds)
}
