import BenchStatistics
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
    /// Wake-ups per second above the baseline in each round (rounds interleaved with the other
    /// backends' and the baseline's own), their median and 95 % interval.
    var wakeupsPerSecondAboveBaseline: Estimate
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

/// Each backend with one timer an hour away, in `rounds` interleaved rounds of
/// `seconds / rounds`, beside a baseline with no backend alive measured in the same rounds.
func runIdle(backends: [BenchBackend], seconds: Double, rounds: Int) throws -> [IdleResult] {
    let slice = seconds / Double(max(1, rounds))
    // The baseline is the same window with no backend alive (no `make`).
    typealias Subject = (name: String, make: (@Sendable (TimerRegistry) throws -> any TimerBackend)?)
    let subjects: [Subject] = [("", nil)] + backends.compactMap { backend in backend.make.map { (backend.name, $0) } }
    var counts: [String: [Int]] = [:]
    try inRounds(subjects, rounds: max(1, rounds), scenario: "idle", name: \.name) { subject in
        let instance = try subject.make?(TimerRegistry())
        defer { instance?.shutdown() }
        try instance?.schedule(.after(.seconds(3600))) { _ in }
        pause(0.2)  // let start-up and the first arming settle
        let before = voluntarySwitchesByThread()
        pause(slice)
        counts[subject.name, default: []].append(wakeups(from: before, to: voluntarySwitchesByThread()))
    }
    let baseline = counts[""] ?? []
    return backends.compactMap { backend in
        guard let woke = counts[backend.name] else { return nil }
        let above = zip(woke, baseline).map { max(0, $0 - $1) }
        return IdleResult(
            backend: backend.name, seconds: slice * Double(woke.count), wakeups: woke.reduce(0, +),
            wakeupsAboveBaseline: above.reduce(0, +),
            wakeupsPerSecondAboveBaseline: Estimate(slices: above.map { Double($0) / slice }))
    }
}
