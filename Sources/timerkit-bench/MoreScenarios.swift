import CTimerShims
import Dispatch
import Foundation
import Histogram
import TimerKit

/// Runs `body` once per backend (baselines have no instance and are skipped) on a fresh
/// instance with a private registry, shut down afterwards.
func eachInstance<Result>(of backends: [BenchBackend], scenario: String,
                          _ body: (BenchBackend, any TimerBackend) throws -> Result?) throws -> [Result] {
    try backends.compactMap { backend in
        guard let make = backend.make else { return nil }
        progress("\(scenario): \(backend.name)")
        let instance = try make(TimerRegistry())
        defer { instance.shutdown() }
        return try body(backend, instance)
    }
}

// MARK: idle

/// `idle`: how often a backend wakes while its only timer is an hour away. The goal is 0.
struct IdleResult: Codable {
    var scenario = "idle"
    var backend: String
    var seconds: Double
    /// Voluntary context switches in that window, summed over the process's other threads.
    var wakeups: Int
    /// `wakeups` minus the same window measured with no backend alive (the bench's own
    /// leftover threads, such as parked Dispatch workers): what the backend itself added.
    var wakeups_above_baseline: Int
}

/// Voluntary context switches of each of the process's threads, except the calling one.
func voluntarySwitchesByThread() -> [Int32: Int] {
    let me = ctk_gettid()
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    var switches: [Int32: Int] = [:]
    for task in tasks {
        guard let tid = Int32(task), tid != me,
              let status = try? String(contentsOfFile: "/proc/self/task/\(task)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("voluntary_ctxt_switches") }),
              let value = Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) else { continue }
        switches[tid] = value
    }
    return switches
}

/// Wake-ups between two readings, over the threads alive at both (threads that exit in
/// between, such as idle Dispatch workers, take their counts with them).
func wakeups(from before: [Int32: Int], to after: [Int32: Int]) -> Int {
    after.reduce(0) { sum, entry in sum + max(0, entry.value - (before[entry.key] ?? entry.value)) }
}

func pause(_ seconds: Double) {
    _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .nanoseconds(Int(seconds * 1e9)))
}

func runIdle(backends: [BenchBackend], seconds: Double) throws -> [IdleResult] {
    progress("idle: baseline")
    let quiet = voluntarySwitchesByThread()
    pause(seconds)
    let baseline = wakeups(from: quiet, to: voluntarySwitchesByThread())
    return try eachInstance(of: backends, scenario: "idle") { backend, instance in
        try instance.schedule(.after(.seconds(3600))) { _ in }
        pause(0.2)   // let start-up and the first arming settle
        let before = voluntarySwitchesByThread()
        pause(seconds)
        let woke = wakeups(from: before, to: voluntarySwitchesByThread())
        return IdleResult(backend: backend.name, seconds: seconds, wakeups: woke, wakeups_above_baseline: max(0, woke - baseline))
    }
}

// MARK: first-fire

/// `first-fire`: lateness of the first (only) fire of fresh 1 ms one-shots.
struct FirstFireResult: Codable {
    var scenario = "first-fire"
    var backend: String
    var samples: Int
    var lateness_us: Percentiles
}

func runFirstFire(backends: [BenchBackend], samples: Int) throws -> [FirstFireResult] {
    try eachInstance(of: backends, scenario: "first-fire") { backend, instance in
        let recorder = LatencyRecorder()
        for _ in 0..<samples {
            let fired = DispatchSemaphore(value: 0)
            try instance.schedule(.after(.milliseconds(1))) { tick in
                recorder.record(tick)
                fired.signal()
            }
            _ = fired.wait(timeout: .now() + .seconds(5))
            pause(0.002)   // the next sample starts from an idle loop
        }
        return FirstFireResult(backend: backend.name, samples: samples, lateness_us: Percentiles(recorder.state.current.histogram))
    }
}

// MARK: drift

/// `drift`: a repeating timer for a long run; lateness of its last tenth against its first.
/// On a drift-free grid they are the same; a "last fire + interval" timer drifts.
struct DriftResult: Codable {
    var scenario = "drift"
    var backend: String
    var seconds: Double
    var first_tenth_p50_us: Double
    var last_tenth_p50_us: Double
    /// Where the last fire's grid deadline is against start + k·interval (0 = no drift), µs.
    var grid_error_us: Double
}

/// Every backend runs its repeating timer at the same time: drift compares a backend with
/// itself (first tenth against last), so sharing the machine biases none of them, and the
/// default 30 s costs 30 s in all rather than 30 s per backend.
func runDrift(backends: [BenchBackend], interval: Duration, seconds: Double) throws -> [DriftResult] {
    typealias Sample = (index: Int, scheduled: UInt64, late: UInt64)
    progress("drift: \(backends.count) backends at once for \(Int(seconds)) s")
    var runs: [(name: String, instance: any TimerBackend, start: MonotonicInstant, ticks: Locked<[Sample]>)] = []
    for backend in backends {
        guard let make = backend.make else { continue }
        let instance = try make(TimerRegistry())
        let ticks = Locked<[Sample]>([])
        let start = instance.now()
        try instance.schedule(.every(interval, startingAt: start + interval)) { tick in
            ticks.withLock { $0.append((tick.index, tick.scheduled.nanoseconds, tick.actual.nanoseconds - tick.scheduled.nanoseconds)) }
        }
        runs.append((backend.name, instance, start, ticks))
    }
    pause(seconds)
    for run in runs { run.instance.shutdown() }
    let period = UInt64(interval.saturatingNanoseconds)
    return runs.compactMap { run in
        let all = run.ticks.current
        guard all.count >= 10, let last = all.last else { return nil }
        func p50(_ part: ArraySlice<Sample>) -> Double { Double(part.map(\.late).sorted()[part.count / 2]) / 1000 }
        let tenth = all.count / 10
        let offset = (last.scheduled - (run.start.nanoseconds + period)) % period
        return DriftResult(backend: run.name, seconds: seconds, first_tenth_p50_us: p50(all.prefix(tenth)),
                           last_tenth_p50_us: p50(all.suffix(tenth)), grid_error_us: Double(offset) / 1000)
    }
}

// MARK: fanout

/// `fanout`: 10,000 repeating timers at 100 ms with random phases.
struct FanoutResult: Codable {
    var scenario = "fanout"
    var backend: String
    var timers: Int
    var fires: Int
    /// Process CPU time (user + system) per handler call, ns.
    var cpu_ns_per_fire: Double
    var lateness_us: Percentiles
}

func processCPUNanoseconds() -> UInt64 {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func ns(_ t: timeval) -> UInt64 { UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_usec) * 1000 }
    return ns(usage.ru_utime) + ns(usage.ru_stime)
}

func runFanout(backends: [BenchBackend], timers: Int, seconds: Double) throws -> [FanoutResult] {
    try eachInstance(of: backends, scenario: "fanout") { backend, instance in
        let recorder = LatencyRecorder()
        let now = instance.now()
        let period: Int64 = 100_000_000
        for _ in 0..<timers {
            let phase = Duration.nanoseconds(Int64.random(in: 0..<period))
            try instance.schedule(.every(.nanoseconds(period), startingAt: now + .milliseconds(50) + phase), handler: recorder.record)
        }
        pause(0.2)
        let cpuBefore = processCPUNanoseconds()
        let firesBefore = recorder.state.current.fires
        pause(seconds)
        let cpu = processCPUNanoseconds() - cpuBefore
        instance.shutdown()
        let state = recorder.state.current
        let fires = state.fires - firesBefore
        return FanoutResult(backend: backend.name, timers: timers, fires: fires,
                            cpu_ns_per_fire: fires > 0 ? Double(cpu) / Double(fires) : 0,
                            lateness_us: Percentiles(state.histogram))
    }
}
