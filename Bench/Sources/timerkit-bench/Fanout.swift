import BenchStatistics
import CBenchSystem
import CLibevent
import Dispatch
import Foundation
import Histogram
import TimerKit

/// `fanout`: 10,000 repeating timers at 100 ms with random phases.
struct FanoutResult: Codable {
    var scenario = "fanout"
    var backend: String
    var timers: Int
    /// The tolerance each timer was given (0 for libevent-raw, which has none).
    var toleranceUs: Double
    /// The jitter each timer was given (0: none).
    var jitterUs: Double = 0
    /// Every timer on one phase (a herd of clients started together), not random phases.
    var herd = false
    var fires: Int
    /// Fires in the busiest millisecond of the 100 ms period, per period: how much the
    /// timers bunch up (with 10,000 spread evenly: 100).
    var peakFiresPerMs: Double = 0
    /// Process CPU time (user + system) per handler call, ns.
    var cpuNsPerFire: Double
    var latenessUs: Percentiles
    /// The latest fire beyond what its tolerance allows (≤ 0: every fire was within it).
    var maxLatenessOverToleranceUs: Double
    /// CPU ns per fire of each round (rounds interleaved with the other backends'), their
    /// median and 95 % interval: what the verdicts and `compare` read.
    var cpuNsPerFireEstimate: Estimate
}

func processCPUNanoseconds() -> UInt64 {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func ns(_ t: timeval) -> UInt64 { UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_usec) * 1000 }
    return ns(usage.ru_utime) + ns(usage.ru_stime)
}

private let fanoutPeriod: Int64 = 100_000_000

/// The raw baselines that also run the fan-out (with no --backend filter and no --no-raw).
let rawFanoutBaselines: Set<String> = [
    "libevent-raw", PWait2RawFanout.timerfdName, PWait2RawFanout.name, URingRawFanout.name, NIOPeer.name,
]

/// One subject of the fan-out: sets its timers up and runs one measured slice.
private struct FanoutSubject {
    let name: String
    let toleranceUs: Double
    let runSlice: (_ seconds: Double, _ tally: FanoutTally) throws -> Void
}

/// What a subject's measured slices add up to, and each slice's CPU per fire.
final class FanoutTally {
    let recorder = LatencyRecorder()
    var cpuNs: UInt64 = 0
    var fires = 0
    var seconds = 0.0
    /// Fires by the millisecond of the period they came in, over the measured windows.
    var phases = [Int](repeating: 0, count: LatencyRecorder.phaseBuckets)
    var cpuNsPerFireBySlice: [Double] = []
}

/// 10,000 (`timers`) repeating timers on every backend, in `rounds` interleaved rounds of
/// `seconds / rounds` each; every round sets the timers up on a fresh instance.
func runFanout(
    backends: [BenchBackend], timers: Int, seconds: Double, rounds: Int, tolerance: Duration, jitter: Duration = .zero,
    herd: Bool = false, includeRaw: Bool
) throws -> [FanoutResult] {
    var subjects: [FanoutSubject] = backends.compactMap { backend in
        guard let make = backend.make else { return nil }
        return FanoutSubject(name: backend.name, toleranceUs: tolerance.microseconds) { seconds, tally in
            let instance = try make(TimerRegistry())
            defer { instance.shutdown() }
            let now = instance.now()
            for _ in 0..<timers {
                let phase = herd ? .zero : Duration.nanoseconds(Int64.random(in: 0..<fanoutPeriod))
                try instance.schedule(
                    .every(.nanoseconds(fanoutPeriod), startingAt: now + .milliseconds(50) + phase, jitter: jitter), tolerance: tolerance,
                    handler: tally.recorder.record)
            }
            measureFanoutSlice(seconds: seconds, into: tally) { instance.shutdown() }
        }
    }
    if includeRaw {
        subjects.append(
            FanoutSubject(name: "libevent-raw", toleranceUs: 0) { try runRawLibeventFanout(timers: timers, seconds: $0, into: $1) })
        subjects.append(
            FanoutSubject(name: PWait2RawFanout.timerfdName, toleranceUs: 0) {
                try PWait2RawFanout.run(timers: timers, period: UInt64(fanoutPeriod), seconds: $0, timerfd: true, into: $1)
            })
        if unavailableBackends[PWait2RawFanout.name] == nil {
            subjects.append(
                FanoutSubject(name: PWait2RawFanout.name, toleranceUs: 0) {
                    try PWait2RawFanout.run(timers: timers, period: UInt64(fanoutPeriod), seconds: $0, into: $1)
                })
        }
        if unavailableBackends[URingRawFanout.name] == nil {
            subjects.append(
                FanoutSubject(name: URingRawFanout.name, toleranceUs: 0) {
                    try URingRawFanout.run(timers: timers, period: UInt64(fanoutPeriod), seconds: $0, into: $1)
                })
        }
        subjects.append(
            FanoutSubject(name: NIOPeer.name, toleranceUs: 0) {
                try NIOPeer.fanout(timers: timers, period: fanoutPeriod, seconds: $0, into: $1)
            })
    }
    let tallies = Dictionary(uniqueKeysWithValues: subjects.map { ($0.name, FanoutTally()) })
    let slice = seconds / Double(max(1, rounds))
    try inRounds(subjects, rounds: max(1, rounds), scenario: "fanout", name: \.name) { subject in
        guard let tally = tallies[subject.name] else { return }
        try subject.runSlice(slice, tally)
    }
    return subjects.compactMap { subject in
        guard let tally = tallies[subject.name] else { return nil }
        let lateness = Percentiles(tally.recorder.state.current.histogram)
        let periods = tally.seconds * 1e9 / Double(fanoutPeriod)
        return FanoutResult(
            backend: subject.name, timers: timers, toleranceUs: subject.toleranceUs,
            jitterUs: rawFanoutBaselines.contains(subject.name) ? 0 : jitter.microseconds, herd: herd,
            fires: tally.fires, peakFiresPerMs: periods > 0 ? Double(tally.phases.max() ?? 0) / periods : 0,
            cpuNsPerFire: tally.fires > 0 ? Double(tally.cpuNs) / Double(tally.fires) : 0, latenessUs: lateness,
            maxLatenessOverToleranceUs: lateness.max - subject.toleranceUs,
            cpuNsPerFireEstimate: Estimate(slices: tally.cpuNsPerFireBySlice))
    }
}

/// Lets the timers settle, then counts the process's CPU time and the fires over `seconds`,
/// adds them to `tally`, and stops the subject.
func measureFanoutSlice(seconds: Double, into tally: FanoutTally, stop: () -> Void) {
    pause(0.2)
    let cpuBefore = processCPUNanoseconds()
    let before = tally.recorder.state.current
    pause(seconds)
    let cpu = processCPUNanoseconds() - cpuBefore
    let after = tally.recorder.state.current
    stop()
    let fires = after.fires - before.fires
    tally.cpuNs += cpu
    tally.fires += fires
    tally.seconds += seconds
    for bucket in tally.phases.indices { tally.phases[bucket] += after.phases[bucket] - before.phases[bucket] }
    if fires > 0 { tally.cpuNsPerFireBySlice.append(Double(cpu) / Double(fires)) }
}

/// The timers of a raw fan-out loop (pwait2-raw, io_uring-raw): each one's deadline on the grid of
/// `period`, from random phases 50 ms ahead, and what a fire of one records.
struct RawFanoutGrid {
    private(set) var deadlines: [UInt64]
    let period: UInt64
    let recorder: LatencyRecorder

    init(timers: Int, period: UInt64, recorder: LatencyRecorder) {
        let start = MonotonicInstant.now().nanoseconds + 50_000_000
        deadlines = (0..<timers).map { _ in start + UInt64.random(in: 0..<period) }
        self.period = period
        self.recorder = recorder
    }

    /// Records timer `index`'s fire at `now` and moves it to its first deadline on the grid
    /// after `now`.
    mutating func fire(_ index: Int, at now: UInt64) {
        recorder.record(scheduled: deadlines[index], actual: now, missed: 0)
        repeat { deadlines[index] += period } while deadlines[index] <= now
    }
}

/// One timer of the libevent-raw fan-out: what a C program keeps per timer.
private final class RawFanoutTimer {
    var deadline: UInt64
    let recorder: LatencyRecorder
    var event: OpaquePointer?

    init(deadline: UInt64, recorder: LatencyRecorder) {
        self.deadline = deadline
        self.recorder = recorder
    }
}

/// The fan-out as a libevent program without TimerKit writes it: one event per timer, each
/// re-added from its callback for its next deadline on the grid (a persistent event would
/// drift by its callbacks' lateness). The base reads the precise clock, as TimerKit's does.
private func runRawLibeventFanout(timers: Int, seconds: Double, into tally: FanoutTally) throws {
    evthread_use_pthreads()
    guard let config = event_config_new() else { throw TimerError.nativeFailure(backend: "libevent", call: "event_config_new") }
    event_config_set_flag(config, Int32(EVENT_BASE_FLAG_PRECISE_TIMER.rawValue))
    let made = event_base_new_with_config(config)
    event_config_free(config)
    guard let base = made else { throw TimerError.nativeFailure(backend: "libevent", call: "event_base_new_with_config") }
    defer { event_base_free(base) }
    let recorder = tally.recorder
    let start = MonotonicInstant.now().nanoseconds + 50_000_000
    let entries = (0..<timers).map { _ in
        RawFanoutTimer(deadline: start + UInt64.random(in: 0..<UInt64(fanoutPeriod)), recorder: recorder)
    }
    defer { for entry in entries { entry.event.map { event_free($0) } } }
    let callback: event_callback_fn = { _, _, argument in
        guard let argument else { return }
        let timer = Unmanaged<RawFanoutTimer>.fromOpaque(argument).takeUnretainedValue()
        let now = MonotonicInstant.now().nanoseconds
        timer.recorder.record(scheduled: timer.deadline, actual: now, missed: 0)
        repeat { timer.deadline += UInt64(fanoutPeriod) } while timer.deadline <= now
        // libevent adds relative timeouts to the time it cached before this batch of callbacks.
        event_base_update_cache_time(event_get_base(timer.event))
        addRawTimeout(timer, after: timer.deadline - MonotonicInstant.now().nanoseconds)
    }
    for entry in entries {
        guard let event = event_new(base, -1, 0, callback, Unmanaged.passUnretained(entry).toOpaque()) else {
            throw TimerError.nativeFailure(backend: "libevent", call: "event_new")
        }
        entry.event = event
        addRawTimeout(entry, after: entry.deadline - MonotonicInstant.now().nanoseconds)
    }
    let loopEnded = DispatchSemaphore(value: 0)
    let loopBase = UncheckedBase(base: base)
    Thread.detachNewThread {
        event_base_loop(loopBase.base, EVLOOP_NO_EXIT_ON_EMPTY)
        loopEnded.signal()
    }
    measureFanoutSlice(seconds: seconds, into: tally) {
        event_base_loopbreak(base)
        loopEnded.wait()
    }
    withExtendedLifetime(entries) {}
}

/// Adds `timer`'s event to fire `nanoseconds` from now.
private func addRawTimeout(_ timer: RawFanoutTimer, after nanoseconds: UInt64) {
    var timeout = timeval(tv_sec: Int(nanoseconds / 1_000_000_000), tv_usec: Int(nanoseconds % 1_000_000_000 / 1000))
    event_add(timer.event, &timeout)
}

/// An `event_base` handed to the thread that runs its loop.
private struct UncheckedBase: @unchecked Sendable {
    // @unchecked: libevent's own locks (evthread_use_pthreads) guard the base across threads.
    let base: OpaquePointer
}
