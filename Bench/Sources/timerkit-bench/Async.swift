import AsyncAlgorithms
import BenchStatistics
import Dispatch
import Foundation
import TimerKit

/// `async`: how late a task wakes on a 1 ms grid, awaiting each backend's clock
/// (`clock.sleep(until:)`) or a `ticks` loop — from a task on the global executor and from
/// one on the backend's loop (`taskExecutor`) — next to the backend's callback path and the
/// timerfd floor in the same run, and to the standard library's `Task.sleep` and
/// swift-async-algorithms' `AsyncTimerSequence` as baselines. Lateness is taken in the
/// task, after it resumed.
struct AsyncResult: Codable {
    var scenario = "async"
    var backend: String
    /// "sleep" (`clock.sleep(until:)`, `Task.sleep`) or "ticks" (a `ticks` loop,
    /// `AsyncTimerSequence`).
    var mode: String
    /// Where the task ran: "global" (the global concurrent executor) or "loop" (the
    /// backend's `taskExecutor`).
    var executor: String
    var intervalUs: Double
    var samples: Int
    var latenessUs: Percentiles
    /// The backend's callback path (a handler's lateness) in the same run; nil for baselines.
    var callbackP50Us: Double?
    /// The bare timerfd floor's p50 in the same run (nil when `floor` was not selected).
    var floorP50Us: Double?
    /// The lateness p50 of each round (rounds interleaved with every other subject's), their
    /// median and 95 % interval: what the verdicts and `compare` read.
    var p50Us: Estimate
}

/// One way of waiting for a grid of deadlines in a task, recording each one's lateness.
private struct AsyncSubject: Sendable {
    let backend: String
    let mode: String
    var executor = "global"
    let run: @Sendable (_ interval: Duration, _ seconds: Double, _ recorder: LatencyRecorder) async throws -> Void
}

func runAsync(backends: [BenchBackend], interval: Duration, seconds: Double, rounds: Int) throws -> [AsyncResult] {
    let rounds = max(1, rounds)
    let slice = seconds / Double(rounds)
    var subjects: [AsyncSubject] = []
    var callbacks: [(name: String, make: @Sendable (TimerRegistry) throws -> any TimerBackend)] = []
    for backend in backends where backend.realTime {
        guard let make = backend.make else { continue }
        callbacks.append((backend.name, make))
        for onLoop in [false, true] {
            let executor = onLoop ? "loop" : "global"
            subjects.append(
                AsyncSubject(backend: backend.name, mode: "sleep", executor: executor) { interval, seconds, recorder in
                    let instance = try make(TimerRegistry())
                    defer { instance.shutdown() }
                    try await inTask(on: onLoop ? instance.taskExecutor : nil) {
                        let clock = instance.clock
                        var deadline = clock.now.advanced(by: interval)
                        let end = clock.now.advanced(by: .nanoseconds(Int64(seconds * 1e9)))
                        while deadline < end {
                            try await clock.sleep(until: deadline)
                            recorder.record(scheduled: deadline.nanoseconds, actual: MonotonicInstant.now().nanoseconds, missed: 0)
                            deadline = deadline.advanced(by: interval)
                        }
                    }
                })
            subjects.append(
                AsyncSubject(backend: backend.name, mode: "ticks", executor: executor) { interval, seconds, recorder in
                    let instance = try make(TimerRegistry())
                    defer { instance.shutdown() }
                    try await inTask(on: onLoop ? instance.taskExecutor : nil) {
                        let end = instance.now().advanced(by: .nanoseconds(Int64(seconds * 1e9)))
                        for await tick in try instance.ticks(.every(interval)) {
                            recorder.record(
                                scheduled: tick.scheduled.nanoseconds, actual: MonotonicInstant.now().nanoseconds, missed: tick.missed)
                            if tick.scheduled >= end { break }
                        }
                    }
                })
        }
    }
    subjects.append(
        AsyncSubject(backend: "task-sleep", mode: "sleep") { interval, seconds, recorder in
            let clock = ContinuousClock()
            var deadline = clock.now.advanced(by: interval)
            let end = clock.now.advanced(by: .nanoseconds(Int64(seconds * 1e9)))
            while deadline < end {
                try await Task.sleep(until: deadline, clock: clock)
                let late = deadline.duration(to: clock.now)
                recorder.record(scheduled: 0, actual: UInt64(max(0, late.wholeNanoseconds)), missed: 0)
                deadline = deadline.advanced(by: interval)
            }
        })
    subjects.append(
        AsyncSubject(backend: "async-timer-sequence", mode: "ticks") { interval, seconds, recorder in
            // Its grid starts at the first `next()`: read just before, on the same clock.
            let clock = SuspendingClock()
            var deadline = clock.now.advanced(by: interval)
            let end = clock.now.advanced(by: .nanoseconds(Int64(seconds * 1e9)))
            for await woke in AsyncTimerSequence(interval: interval, clock: clock) {
                recorder.record(scheduled: 0, actual: UInt64(max(0, deadline.duration(to: woke).wholeNanoseconds)), missed: 0)
                deadline = deadline.advanced(by: interval)
                if deadline >= end { break }
            }
        })

    var recorders: [String: LatencyRecorder] = [:]
    for subject in subjects { recorders[subject.key] = LatencyRecorder() }
    for (name, _) in callbacks { recorders["\(name)/callback"] = LatencyRecorder() }
    let floor = backends.first { $0.name == "floor" }?.baselineLatency
    let floorRecorder = LatencyRecorder()
    // Every subject, the callbacks and the floor take turns in each round, in a rotated order.
    var turns: [(name: String, run: () throws -> Void)] = []
    if let floor { turns.append(("floor", { try floor(interval, slice, floorRecorder) })) }
    for (name, make) in callbacks {
        guard let recorder = recorders["\(name)/callback"] else { continue }
        turns.append(
            (
                "\(name) callback",
                {
                    let instance = try make(TimerRegistry())
                    try instance.schedule(.every(interval), handler: recorder.record)
                    pause(slice)
                    instance.shutdown()
                }
            ))
    }
    for subject in subjects {
        guard let recorder = recorders[subject.key] else { continue }
        turns.append(
            (
                subject.key,
                {
                    try awaitResult { try await subject.run(interval, slice, recorder) }
                    recorder.endSlice()
                }
            ))
    }
    try inRounds(turns, rounds: rounds, scenario: "async", name: \.name) { try $0.run() }
    let floorP50 = floor == nil ? nil : Percentiles(floorRecorder.state.current.histogram).p50
    return subjects.compactMap { subject in
        guard let state = recorders[subject.key]?.state.current else { return nil }
        let callback = recorders["\(subject.backend)/callback"]?.state.current
        return AsyncResult(
            backend: subject.backend, mode: subject.mode, executor: subject.executor, intervalUs: interval.microseconds,
            samples: state.fires, latenessUs: Percentiles(state.histogram),
            callbackP50Us: callback.map { Percentiles($0.histogram).p50 }, floorP50Us: floorP50, p50Us: Estimate(slices: state.sliceP50sUs))
    }
}

extension AsyncSubject {
    var key: String { "\(backend)/\(mode)/\(executor)" }
}

/// Runs `body` in a task that prefers `executor` (nil: the global executor), and waits for it.
private func inTask(on executor: (any TaskExecutor)?, _ body: @escaping @Sendable () async throws -> Void) async throws {
    try await Task(executorPreference: executor, operation: body).value
}

/// Runs `operation` in a task and blocks this (non-async) thread until it returns.
func awaitResult<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
    let outcome = Locked<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        let result: Result<T, any Error>
        do { result = .success(try await operation()) } catch { result = .failure(error) }
        outcome.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    guard let result = outcome.current else { throw CancellationError() }
    return try result.get()
}
