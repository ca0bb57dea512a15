import CBenchSystem
import Dispatch
import Foundation
import Histogram
import TimerKit

/// `fanout`: 10,000 repeating timers at 100 ms with random phases.
struct FanoutResult: Codable {
    var scenario = "fanout"
    var backend: String
    var timers: Int
    var fires: Int
    /// Process CPU time (user + system) per handler call, ns.
    var cpuNsPerFire: Double
    var latenessUs: Percentiles
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
        return FanoutResult(
            backend: backend.name, timers: timers, fires: fires,
            cpuNsPerFire: fires > 0 ? Double(cpu) / Double(fires) : 0,
            latenessUs: Percentiles(state.histogram))
    }
}
