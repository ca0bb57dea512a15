import BenchStatistics
import Dispatch
import Foundation
import Histogram
import TimerKit

/// `latency`: one repeating timer per backend; how late each handler starts.
struct LatencyResult: Codable {
    var scenario = "latency"
    var backend: String
    /// The load during the run: none, busy-loop (work on the backend's own loop), cpu.
    var load: String
    var intervalUs: Double
    var fires: Int
    var missed: Int
    var latenessUs: Percentiles
    /// The p50 of each slice (≤ 1 s, interleaved with the other backends'), its median and
    /// its 95 % interval: what `compare` and the verdicts read.
    var p50Us: Estimate
    /// The lateness distribution: [percentile, µs] pairs, for CDF charts.
    var cdfUs: [[Double]]
    /// What the backend's own `statistics` said over the same slices; nil for the floor and
    /// raw peers, which are not TimerKit backends.
    var statistics: BackendFigures?
    /// Lateness p50 (µs) of the same repeating timer on each clock, run beside each other on
    /// the backend (phases a third of an interval apart): `monotonic`, `continuous`, `wall`.
    /// Nil for the floor and raw peers.
    var clockP50Us: [String: Double]?
}

/// [percentile, µs] points of a nanosecond histogram, dense where the tail is.
func cdfPoints(_ histogram: Histogram<UInt64>) -> [[Double]] {
    guard histogram.totalCount > 0 else { return [] }
    let percentiles: [Double] =
        [0, 1, 5] + stride(from: 10, through: 90, by: 10).map(Double.init)
        + [95, 97.5, 99, 99.5, 99.9, 99.95, 99.99, 100]
    return percentiles.map { [$0, Double(histogram.valueAtPercentile($0)) / 1000] }
}

/// Collects lateness samples from handlers on a backend's loop thread.
final class LatencyRecorder: Sendable {
    let state = Locked(
        (
            histogram: makeHistogram(), fires: 0, missed: 0, phases: [Int](repeating: 0, count: phaseBuckets), slice: makeHistogram(),
            sliceP50sUs: [Double]()
        ))
    /// Fires counted by the millisecond of a 100 ms period they came in (fan-out's spread).
    static let phaseBuckets = 100

    func record(_ tick: Tick) {
        record(scheduled: tick.scheduled.nanoseconds, actual: tick.actual.nanoseconds, missed: tick.missed)
    }

    func record(scheduled: UInt64, actual: UInt64, missed: Int) {
        state.withLock {
            _ = $0.histogram.record(actual >= scheduled ? actual - scheduled : 0)
            _ = $0.slice.record(actual >= scheduled ? actual - scheduled : 0)
            $0.fires += 1
            $0.missed += missed
            $0.phases[Int(actual / 1_000_000 % UInt64(Self.phaseBuckets))] += 1
        }
    }

    /// Ends a slice of the measurement: its p50 joins `sliceP50sUs`.
    func endSlice() {
        state.withLock {
            if $0.slice.totalCount > 0 { $0.sliceP50sUs.append(Double($0.slice.valueAtPercentile(50)) / 1000) }
            $0.slice.reset()
        }
    }
}

/// Extra work during a latency run.
enum Load: String, CaseIterable, Sendable {
    /// Nothing else runs.
    case none
    /// Periodic busy work on the backend's own loop: 80% of each interval, every interval.
    case busyLoop = "busy-loop"
    /// A spinning thread on every core.
    case cpu
}

/// Spins for `duration` of real time: the busy work of `--load busy-loop`.
@Sendable func spin(for duration: Duration) {
    let end = MonotonicInstant.now() + duration
    while MonotonicInstant.now() < end {}
}

/// Spinning threads on every core until `stop()`.
final class CPULoad: Sendable {
    private let running = Locked(true)
    private let done = DispatchGroup()

    init() {
        for _ in 0..<ProcessInfo.processInfo.activeProcessorCount {
            done.enter()
            Thread.detachNewThread { [running, done] in
                var x: UInt64 = 1
                while running.current { for _ in 0..<10_000 { x = x &* 6_364_136_223_846_793_005 &+ 1 } }
                withExtendedLifetime(x) {}
                done.leave()
            }
        }
    }

    func stop() {
        running.withLock { $0 = false }
        done.wait()
    }
}

/// Each backend's repeating timer for `seconds`, in `rounds` interleaved slices (10 give a
/// 95 % interval of the median from ranks 2 and 9, at 97.9 %).
func runLatency(backends: [BenchBackend], interval: Duration, seconds: Double, rounds: Int, load: Load = .none) throws -> [LatencyResult] {
    let cpuLoad = load == .cpu ? CPULoad() : nil
    defer { cpuLoad?.stop() }
    let rounds = max(1, rounds)
    let slice = seconds / Double(rounds)
    var recorders: [String: LatencyRecorder] = [:]
    var figures: [String: BackendFiguresCollector] = [:]
    // Per backend: the continuous and wall probes, and every probe's fires together (what the
    // backend's statistics saw).
    var clockRecorders: [String: [DeadlineClock: LatencyRecorder]] = [:]
    var allProbes: [String: LatencyRecorder] = [:]
    for backend in backends {
        recorders[backend.name] = LatencyRecorder()
        clockRecorders[backend.name] = [.continuous: LatencyRecorder(), .wall: LatencyRecorder()]
        allProbes[backend.name] = LatencyRecorder()
    }
    for round in 0..<rounds {
        // Interleaved, in an order rotated each round, so that no backend always follows the same one.
        let shift = round % max(1, backends.count)
        for backend in backends[shift...] + backends[..<shift] {
            progress("latency: round \(round + 1)/\(rounds) \(backend.name)")
            guard let recorder = recorders[backend.name] else { continue }
            if let baseline = backend.baselineLatency {
                try baseline(interval, slice, recorder)
            } else if let make = backend.make {
                let instance = try make(TimerRegistry())
                if load == .busyLoop {
                    let work = interval * 8 / 10
                    try instance.schedule(.every(interval, firstAfter: interval / 2), name: "busy-work") { _ in spin(for: work) }
                }
                let all = allProbes[backend.name]
                try instance.schedule(.every(interval), name: "latency-probe") { tick in
                    recorder.record(tick)
                    all?.record(tick)
                }
                for (index, clock) in [DeadlineClock.continuous, .wall].enumerated() {
                    guard let probe = clockRecorders[backend.name]?[clock] else { continue }
                    try instance.schedule(
                        .every(interval, on: clock, firstAfter: interval * (index + 1) / 3), name: "latency-probe-\(clock)"
                    ) { tick in
                        probe.record(tick)
                        all?.record(tick)
                    }
                }
                _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .nanoseconds(Int(slice * 1e9)))
                instance.shutdown()
                figures[backend.name, default: BackendFiguresCollector()].add(instance.statistics)
            }
            recorder.endSlice()
        }
    }
    progressDone()
    return backends.compactMap { backend in
        guard let state = recorders[backend.name]?.state.current else { return nil }
        // With no load, the probe is the backend's only timer: its statistics saw the bench's fires.
        let every = allProbes[backend.name]?.state.current
        let histogram = every?.histogram ?? state.histogram
        let bench: ((Double) -> Double)? = load == .none ? { Double(histogram.valueAtPercentile($0)) / 1000 } : nil
        let own = figures[backend.name].flatMap { $0.isEmpty ? nil : $0.figures(bench: bench, benchFires: every?.fires ?? state.fires) }
        var byClock: [String: Double]?
        if own != nil, let probes = clockRecorders[backend.name] {
            byClock = ["monotonic": Double(state.histogram.valueAtPercentile(50)) / 1000]
            for (clock, probe) in probes {
                let probeState = probe.state.current
                if probeState.fires > 0 { byClock?[clock.rawValue] = Double(probeState.histogram.valueAtPercentile(50)) / 1000 }
            }
        }
        return LatencyResult(
            backend: backend.name, load: backend.baselineLatency != nil && load == .busyLoop ? "none" : load.rawValue,
            intervalUs: interval.microseconds, fires: state.fires,
            missed: state.missed, latenessUs: Percentiles(state.histogram), p50Us: Estimate(slices: state.sliceP50sUs),
            cdfUs: cdfPoints(state.histogram), statistics: own, clockP50Us: byClock)
    }
}
