import CTimerShims
import Glibc
import TimerKit

/// The `floor` baseline: a periodic absolute timerfd read in a blocking loop, with no
/// TimerKit code at all. It is as close to the machine's timer latency as software gets,
/// so every backend's lateness is read against it.
@Sendable
func runTimerfdFloor(interval: Duration, seconds: Double, recorder: LatencyRecorder) throws {
    let fd = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_CLOEXEC))
    guard fd >= 0 else { throw TimerError.systemCall(call: "timerfd_create", errno: errno) }
    defer { close(fd) }
    let period = UInt64(interval.saturatingNanoseconds)
    let start = MonotonicInstant.now().nanoseconds + period
    let end = start + UInt64(seconds * 1e9)
    func spec(_ ns: UInt64) -> timespec { timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000)) }
    var timer = itimerspec(it_interval: spec(period), it_value: spec(start))
    guard timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME), &timer, nil) == 0 else {
        throw TimerError.systemCall(call: "timerfd_settime", errno: errno)
    }
    var fired: UInt64 = 0
    while true {
        var expirations: UInt64 = 0
        let got = read(fd, &expirations, 8)
        let now = MonotonicInstant.now()
        if got < 0 && errno == EINTR { continue }
        guard got == 8 else { throw TimerError.systemCall(call: "read(timerfd)", errno: errno) }
        fired += expirations
        let scheduled = start + (fired - 1) * period
        recorder.record(scheduled: scheduled, actual: now.nanoseconds, missed: Int(expirations - 1))
        if now.nanoseconds >= end { break }
    }
}
