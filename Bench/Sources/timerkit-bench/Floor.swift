import CBenchSystem
import Glibc
import TimerKit

/// A bare periodic absolute timerfd read in a blocking loop, with no TimerKit code at all:
/// as close to the machine's timer latency as software gets. Calls `onTick(scheduled,
/// actual, missed)` for each read, in CLOCK_MONOTONIC ns, until `seconds` have passed.
func runPeriodicTimerfd(period: UInt64, seconds: Double, onTick: (UInt64, UInt64, Int) -> Void) throws {
    let fd = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_CLOEXEC))
    guard fd >= 0 else { throw TimerError.systemCall(call: "timerfd_create", errno: errno) }
    defer { close(fd) }
    let start = MonotonicInstant.now().nanoseconds + period
    let end = start + UInt64(seconds * 1e9)
    var timer = itimerspec(it_interval: monotonicTimespec(period), it_value: monotonicTimespec(start))
    guard timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME), &timer, nil) == 0 else {
        throw TimerError.systemCall(call: "timerfd_settime", errno: errno)
    }
    var fired: UInt64 = 0
    while true {
        var expirations: UInt64 = 0
        let got = read(fd, &expirations, 8)
        let now = MonotonicInstant.now().nanoseconds
        if got < 0 && errno == EINTR { continue }
        guard got == 8 else { throw TimerError.systemCall(call: "read(timerfd)", errno: errno) }
        fired += expirations
        // Several expirations in one read: the loop was late and missed the earlier ones.
        onTick(start + (fired - 1) * period, now, Int(expirations - 1))
        if now >= end { break }
    }
}

/// The `floor` baseline of the latency scenario: every backend's lateness is read against it.
@Sendable
func runTimerfdFloor(interval: Duration, seconds: Double, recorder: LatencyRecorder) throws {
    try runPeriodicTimerfd(period: UInt64(interval.wholeNanoseconds), seconds: seconds) { scheduled, actual, missed in
        recorder.record(scheduled: scheduled, actual: actual, missed: missed)
    }
}
