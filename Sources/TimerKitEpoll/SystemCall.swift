internal import CTimerShims
import Glibc
@_spi(BackendImplementation) import TimerKit

/// Runs a system call until it is not interrupted and returns its result, or throws its
/// errno as `TimerError.systemCall`. `body` returns a count, or `-errno` on failure (the
/// convention of CTimerShims; wrap libc calls with `errnoResult`).
///
/// EBADF and EFAULT trap, as SwiftNIO's `syscall(blocking:)` does: they mean TimerKit used
/// a descriptor or buffer it does not own, a bug that no input can cause and that must not
/// be papered over (the descriptor number may belong to someone else by now).
@discardableResult
package func retryingInterrupts(_ call: String, _ body: () -> Int) throws(TimerError) -> Int {
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = Int32(truncatingIfNeeded: -result)
        if code == EINTR { continue }
        precondition(
            code != EBADF && code != EFAULT, "TimerKit: \(call) failed with errno \(code) on a descriptor or buffer it does not own")
        throw .systemCall(call: call, errno: code)
    }
}

/// A libc call's result in the `-errno` convention `retryingInterrupts` takes.
@inline(__always)
package func errnoResult(_ result: Int) -> Int { result < 0 ? -Int(errno) : result }

/// Arms an absolute CLOCK_MONOTONIC timerfd for `deadline`, repeating every `period` if
/// given; `.distantFuture` disarms it.
func armTimerFD(_ fd: Int32, at deadline: MonotonicInstant, period: UInt64 = 0) throws(TimerError) {
    var spec = itimerspec()
    if deadline != .distantFuture {
        // 0 would disarm: a deadline at the clock's origin is "now", and 1 ns will do.
        spec.it_value = kernelTime(nanoseconds: max(deadline.nanoseconds, 1))
        spec.it_interval = kernelTime(nanoseconds: period)
    }
    try retryingInterrupts("timerfd_settime") { errnoResult(Int(timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME), &spec, nil))) }
}
