import TimerKit

/// `throughput`: schedule N timers with random deadlines through the public API, then
/// cancel them in random order.
struct ThroughputResult: Codable {
    var scenario = "throughput"
    var backend: String
    var timers: Int
    /// Median over batches of 1,000 operations of the mean ns per schedule.
    var schedule_ns: Double
    /// Median over batches of 1,000 operations of the mean ns per cancel.
    var cancel_ns: Double
    /// Mean ns per schedule over the whole run (includes the rare expensive batches the median skips).
    var schedule_ns_mean: Double
    /// Mean ns per cancel over the whole run (includes heap compactions).
    var cancel_ns_mean: Double
    /// Resident memory added per live timer (registry, heap and timer all included).
    var bytes_per_timer: Double
    /// Allocator bytes in use per live timer (mallinfo2), a steadier cross-check of the RSS figure.
    var heap_bytes_per_timer: Double
}

func mean(_ values: [Double]) -> Double {
    values.isEmpty ? 0 : values.reduce(0, +) / Double(values.count)
}

func median(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

func runThroughput(backends: [BenchBackend], timers count: Int) throws -> [ThroughputResult] {
    var rng = SystemRandomNumberGenerator()
    // The workload is made before any measurement so its memory is not counted.
    let delays: [Duration] = (0..<count).map { _ in .nanoseconds(Int64.random(in: 1_000_000_000...60_000_000_000, using: &rng)) }
    let cancelOrder = Array(0..<count).shuffled(using: &rng)
    let batch = 1000
    var results: [ThroughputResult] = []
    for backend in backends {
        guard let make = backend.make else { continue }
        progress("throughput: \(backend.name) \(count) timers")
        let instance = try make(TimerRegistry())
        var handles: [TimerHandle?] = Array(repeating: nil, count: count)

        // Each backend starts from a trimmed heap, as a fresh process would: memory, then time.
        releaseFreeMemory()
        let rssBefore = residentBytes()
        let heapBefore = heapBytesInUse()
        var scheduleBatches: [Double] = []
        var cancelBatches: [Double] = []
        scheduleBatches.reserveCapacity(count / batch + 1)
        cancelBatches.reserveCapacity(count / batch + 1)
        var index = 0
        while index < count {
            let end = min(index + batch, count)
            let start = MonotonicInstant.now()
            for i in index..<end { handles[i] = try instance.schedule(.after(delays[i])) { _ in } }
            scheduleBatches.append(nanoseconds(since: start) / Double(end - index))
            index = end
        }
        let rssAfter = residentBytes()
        let heapAfter = heapBytesInUse()
        index = 0
        while index < count {
            let end = min(index + batch, count)
            let start = MonotonicInstant.now()
            for i in index..<end { handles[cancelOrder[i]]?.cancel() }
            cancelBatches.append(nanoseconds(since: start) / Double(end - index))
            index = end
        }
        instance.shutdown()
        results.append(ThroughputResult(
            backend: backend.name, timers: count,
            schedule_ns: median(scheduleBatches), cancel_ns: median(cancelBatches),
            schedule_ns_mean: mean(scheduleBatches), cancel_ns_mean: mean(cancelBatches),
            bytes_per_timer: Double(rssAfter - rssBefore) / Double(count),
            heap_bytes_per_timer: Double(heapAfter - heapBefore) / Double(count)))
        handles = []
    }
    progressDone()
    return results
}

func nanoseconds(since start: MonotonicInstant) -> Double {
    Double(MonotonicInstant.now().nanoseconds - start.nanoseconds)
}
