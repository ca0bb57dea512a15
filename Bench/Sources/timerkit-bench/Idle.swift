import CBenchSystem
import Dispatch
import Foundation
import Histogram
import TimerKit

/// `idle`: how often a backend wakes while its only timer is an hour away. The goal is 0.
struct IdleResult: Codable {
    var scenario = "idle"
    var backend: String
    var seconds: Double
    /// Voluntary context switches in that window, summed over the process's other threads.
    var wakeups: Int
    /// `wakeups` minus the same window measured with no backend alive (the bench's own
    /// leftover threads, such as parked Dispatch workers): what the backend itself added.
    var wakeupsAboveBaseline: Int
}

/// Voluntary context switches of each of the process's threads, except the calling one.
func voluntarySwitchesByThread() -> [Int32: Int] {
    let me = bench_gettid()
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    var switches: [Int32: Int] = [:]
    for task in tasks {
        guard let tid = Int32(task), tid != me,
            let status = try? String(contentsOfFile: "/proc/self/task/\(task)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("voluntary_ctxt_switches") }),
            let value = Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces))
        else { continue }
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
        pause(0.2)  // let start-up and the first arming settle
        let before = voluntarySwitchesByThread()
        pause(seconds)
        let woke = wakeups(from: before, to: voluntarySwitchesByThread())
        return IdleResult(backend: backend.name, seconds: seconds, wakeups: woke, wakeupsAboveBaseline: max(0, woke - baseline))
    }
}
