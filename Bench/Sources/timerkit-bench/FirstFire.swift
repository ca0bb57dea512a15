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
}

func runFirstFire(backends: [BenchBackend], samples: Int) throws -> [FirstFireResult] {
    var results = try runFirstFireOnTimerKit(backends: backends, samples: samples)
    for backend in backends {
        guard let baseline = backend.baselineFirstFire else { continue }
        progress("first-fire: \(backend.name)")
        let recorder = LatencyRecorder()
        try baseline(samples, recorder)
        results.append(FirstFireResult(backend: backend.name, samples: samples, latenessUs: Percentiles(recorder.state.current.histogram)))
    }
    progressDone()
    return results
}

private func runFirstFireOnTimerKit(backends: [BenchBackend], samples: Int) throws -> [FirstFireResult] {
    try eachInstance(of: backends, scenario: "first-fire") { backend, instance in
        let recorder = LatencyRecorder()
        for _ in 0..<samples {
            let fired = DispatchSemaphore(value: 0)
            try instance.schedule(.after(.milliseconds(1))) { tick in
                recorder.record(tick)
                fired.signal()
            }
            _ = fired.wait(timeout: .now() + .seconds(5))
            pause(0.002)  // the next sample starts from an idle loop
        }
        return FirstFireResult(backend: backend.name, samples: samples, latenessUs: Percentiles(recorder.state.current.histogram))
    }
}
