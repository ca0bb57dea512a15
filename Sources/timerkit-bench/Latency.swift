import Dispatch
import Histogram
import TimerKit

/// `latency`: one repeating timer per backend; how late each handler starts.
struct LatencyResult: Codable {
    var scenario = "latency"
    var backend: String
    var interval_us: Double
    var fires: Int
    var missed: Int
    var lateness_us: Percentiles
}

/// Collects lateness samples from handlers on a backend's loop thread.
final class LatencyRecorder: Sendable {
    let state = Locked((histogram: makeHistogram(), fires: 0, missed: 0))

    func record(_ tick: Tick) {
        record(scheduled: tick.scheduled.nanoseconds, actual: tick.actual.nanoseconds, missed: tick.missed)
    }

    func record(scheduled: UInt64, actual: UInt64, missed: Int) {
        state.withLock {
            _ = $0.histogram.record(actual >= scheduled ? actual - scheduled : 0)
            $0.fires += 1
            $0.missed += missed
        }
    }
}

/// Runs each backend in turn for slices of at most one second until each has had
/// `seconds`, so that the machine's noise falls on every backend alike.
func runLatency(backends: [BenchBackend], interval: Duration, seconds: Double) throws -> [LatencyResult] {
    let slice = min(1.0, seconds)
    let rounds = max(1, Int((seconds / slice).rounded()))
    var recorders: [String: LatencyRecorder] = [:]
    for backend in backends { recorders[backend.name] = LatencyRecorder() }
    for round in 0..<rounds {
        for backend in backends {
            progress("latency: round \(round + 1)/\(rounds) \(backend.name)")
            guard let recorder = recorders[backend.name] else { continue }
            if let baseline = backend.baselineLatency {
                try baseline(interval, slice, recorder)
            } else if let make = backend.make {
                let instance = try make(TimerRegistry())
                try instance.schedule(.every(interval), name: "latency-probe", handler: recorder.record)
                _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .nanoseconds(Int(slice * 1e9)))
                instance.shutdown()
            }
        }
    }
    progressDone()
    return backends.compactMap { backend in
        guard let state = recorders[backend.name]?.state.current else { return nil }
        return LatencyResult(backend: backend.name, interval_us: interval.microseconds, fires: state.fires,
                             missed: state.missed, lateness_us: Percentiles(state.histogram))
    }
}
