import BenchStatistics
import CBenchSystem
import Dispatch
import Foundation
import Histogram
import TimerKit

/// `first-fire`: lateness of the first (only) fire of fresh 1 ms one-shots.
struct FirstFireResult: Codable {
    var scenario = "first-fire"
    var backend: String
    var samples: Int
    var latenessUs: Percentiles
    /// The p50 of each round's samples (rounds interleaved with the other backends'), their
    /// median and 95 % interval: what the verdicts and `compare` read.
    var p50Us: Estimate
}

/// Takes `samples` one-shots from every backend in `rounds` interleaved rounds, each round on
/// a fresh instance (TimerKit backends) or the baseline's own loop (nio-raw).
func runFirstFire(backends: [BenchBackend], samples: Int, rounds: Int) throws -> [FirstFireResult] {
    let subjects = backends.filter { $0.make != nil || $0.baselineFirstFire != nil }
    let perRound = max(1, samples / max(1, rounds))
    let recorders = Dictionary(uniqueKeysWithValues: subjects.map { ($0.name, LatencyRecorder()) })
    try inRounds(subjects, rounds: rounds, scenario: "first-fire", name: \.name) { backend in
        guard let recorder = recorders[backend.name] else { return }
        if let make = backend.make {
            let instance = try make(TimerRegistry())
            defer { instance.shutdown() }
            try sampleFirstFires(on: instance, count: perRound, into: recorder)
        } else if let baseline = backend.baselineFirstFire {
            try baseline(perRound, recorder)
        }
        recorder.endSlice()
    }
    return subjects.compactMap { backend in
        guard let state = recorders[backend.name]?.state.current else { return nil }
        return FirstFireResult(
            backend: backend.name, samples: state.fires, latenessUs: Percentiles(state.histogram),
            p50Us: Estimate(slices: state.sliceP50sUs))
    }
}

private func sampleFirstFires(on instance: any TimerBackend, count: Int, into recorder: LatencyRecorder) throws {
    for _ in 0..<count {
        let fired = DispatchSemaphore(value: 0)
        try instance.schedule(.after(.milliseconds(1))) { tick in
            recorder.record(tick)
            fired.signal()
        }
        _ = fired.wait(timeout: .now() + .seconds(5))
        pause(0.002)  // the next sample starts from an idle loop
    }
}
