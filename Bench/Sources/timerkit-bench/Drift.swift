import CBenchSystem
import Dispatch
import Foundation
import Histogram
import TimerKit

/// `drift`: a repeating timer for a long run; lateness of its last tenth against its first.
/// On a drift-free grid they are the same; a "last fire + interval" timer drifts.
struct DriftResult: Codable {
    var scenario = "drift"
    var backend: String
    var seconds: Double
    var firstTenthP50Us: Double
    var lastTenthP50Us: Double
    /// Where the last fire's grid deadline is against start + k·interval (0 = no drift), µs.
    var gridErrorUs: Double
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
    let period = UInt64(interval.wholeNanoseconds)
    return runs.compactMap { run in
        let all = run.ticks.current
        guard all.count >= 10, let last = all.last else { return nil }
        func p50(_ part: ArraySlice<Sample>) -> Double { Double(part.map(\.late).sorted()[part.count / 2]) / 1000 }
        let tenth = all.count / 10
        let offset = (last.scheduled - (run.start.nanoseconds + period)) % period
        return DriftResult(
            backend: run.name, seconds: seconds, firstTenthP50Us: p50(all.prefix(tenth)),
            lastTenthP50Us: p50(all.suffix(tenth)), gridErrorUs: Double(offset) / 1000)
    }
}
