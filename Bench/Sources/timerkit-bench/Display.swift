import BenchStatistics
import CBenchSystem
import Dispatch
import Foundation
import Glibc
import Histogram
import TimerKit
import TimerKitEpoll

/// `display`: a full-rate DisplayLink at 60 and 120 Hz against a bare timerfd loop at the
/// same period and priority.
struct DisplayResult: Codable {
    var scenario = "display"
    /// "display" (a DisplayLink) or "floor" (a bare periodic timerfd at the same priority).
    var backend: String
    var refreshHz: Int
    var frames: Int
    var dropped: Int
    /// The priority the vsync (or floor) thread obtained.
    var priority: String
    /// |actual frame interval − period|, µs.
    var jitterUs: Percentiles
    /// Callback start − vsync deadline, µs.
    var latenessUs: Percentiles
    /// The lateness p50 of each round (rounds interleaved with the floor's), their median and
    /// 95 % interval: what the verdicts and `compare` read.
    var latenessP50Us: Estimate
}

/// Frame starts, as seen by a callback.
final class FrameRecorder: Sendable {
    let state = Locked(
        (
            jitter: makeHistogram(), lateness: makeHistogram(), previous: UInt64(0), frames: 0, dropped: 0, slice: makeHistogram(),
            sliceP50sUs: [Double]()
        ))
    let period: UInt64
    init(period: UInt64) { self.period = period }

    /// A new slice starts: the gap since the last one is not a frame interval.
    func startSlice() { state.withLock { $0.previous = 0 } }

    /// Ends a slice: its lateness p50 joins `sliceP50sUs`.
    func endSlice() {
        state.withLock {
            if $0.slice.totalCount > 0 { $0.sliceP50sUs.append(Double($0.slice.valueAtPercentile(50)) / 1000) }
            $0.slice.reset()
        }
    }

    func record(scheduled: UInt64, actual: UInt64, dropped: Int) {
        state.withLock { s in
            _ = s.lateness.record(actual >= scheduled ? actual - scheduled : 0)
            _ = s.slice.record(actual >= scheduled ? actual - scheduled : 0)
            if s.previous != 0 && dropped == 0 {
                let interval = actual - s.previous
                _ = s.jitter.record(interval > period ? interval - period : period - interval)
            }
            s.previous = actual
            s.frames += 1
            s.dropped += dropped
        }
    }
}

/// Each rate in `rounds` rounds of `seconds / rounds`, the floor and the DisplayLink taking
/// turns in every round.
func runDisplay(rates: [Int], seconds: Double, rounds: Int) throws -> [DisplayResult] {
    let rounds = max(1, rounds)
    let slice = seconds / Double(rounds)
    var results: [String: (FrameRecorder, String)] = [:]
    for round in 0..<rounds {
        for rate in rates {
            let period = 1_000_000_000 / UInt64(rate)
            progress("display: round \(round + 1)/\(rounds) \(rate) Hz")
            // The floor, on a thread at the priority the vsync thread asks for.
            let floorKey = "floor@\(rate)"
            let floor = results[floorKey]?.0 ?? FrameRecorder(period: period)
            floor.startSlice()
            let floorPriority = Locked("")
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                let priority = ThreadPriority.realtime(80).applyToCurrentThread(minimalTimerSlack: true)
                floorPriority.withLock { $0 = priority.description }
                try? runPeriodicTimerfd(period: period, seconds: slice, onTick: floor.record)
                done.signal()
            }
            done.wait()
            floor.endSlice()
            results[floorKey] = (floor, floorPriority.current)

            let displayKey = "display@\(rate)"
            let display = results[displayKey]?.0 ?? FrameRecorder(period: period)
            display.startSlice()
            let source = try DisplaySource(refreshRate: rate, priority: .realtime(80), registry: TimerRegistry())
            let link = try source.addLink { frame in
                display.record(scheduled: frame.timestamp.nanoseconds, actual: frame.actual.nanoseconds, dropped: frame.dropped)
            }
            _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .nanoseconds(Int(slice * 1e9)))
            link.invalidate()
            display.endSlice()
            results[displayKey] = (display, source.obtainedPriority.description)
            source.shutdown()
        }
    }
    progressDone()
    return rates.flatMap { rate in
        ["floor", "display"].compactMap { kind -> DisplayResult? in
            guard let (recorder, priority) = results["\(kind)@\(rate)"] else { return nil }
            let s = recorder.state.current
            return DisplayResult(
                backend: kind, refreshHz: rate, frames: s.frames, dropped: s.dropped, priority: priority,
                jitterUs: Percentiles(s.jitter), latenessUs: Percentiles(s.lateness), latenessP50Us: Estimate(slices: s.sliceP50sUs))
        }
    }
}
