import Glibc

/// Every failure TimerKit reports. Each case names the value that was wrong.
///
/// Errors compare equal when they name the same values; NaN counts as equal to NaN here,
/// so `#expect(throws: TimerError.nonFiniteSeconds(parameter: "delay", value: .nan))` matches.
public enum TimerError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A duration parameter was negative.
    case negativeDuration(parameter: String, value: Duration)
    /// A duration given in seconds was NaN or infinite.
    case nonFiniteSeconds(parameter: String, value: Double)
    /// A repeat interval was zero: the timer would fire in a busy loop.
    case zeroInterval(parameter: String)
    /// A repeat interval was positive but shorter than the 1 ns the clocks resolve.
    case intervalBelowOneNanosecond(parameter: String, seconds: Double)
    /// A repeat count was zero or negative.
    case invalidCount(Int)
    /// A timer name was empty.
    case emptyName
    /// A caller's timer name starts with `timer#`, the prefix of generated names.
    case reservedName(String)
    /// A timer of this name is already registered.
    case duplicateName(String)
    /// No timer of this name is registered.
    case noSuchTimer(String)
    /// The timer was cancelled or has finished; it cannot be suspended, resumed or rescheduled.
    case timerEnded(name: String, state: TimerState)
    /// The timer `key` named has ended (how, its callback heard:
    /// `TimerCallback/timerEnded(_:reason:fires:)`); the key cannot suspend, resume or
    /// reschedule anything any more.
    case keyEnded(TimerKey)
    /// The backend was shut down.
    case backendShutDown(backend: String)
    /// The backend's loop stopped on an error it could not recover from; its timers were
    /// cancelled. `cause` is what the loop reported.
    indirect case loopFailed(backend: String, cause: TimerError)
    /// A frame rate was zero, negative, NaN or above the supported maximum.
    case invalidFrameRate(Double)
    /// An option was outside its allowed range.
    case invalidOption(name: String, value: String, allowed: String)
    /// An operating-system call failed.
    case systemCall(call: String, errno: Int32)
    /// A backend's native library reported a failure.
    case nativeFailure(backend: String, call: String)
    /// Scheduling would pass a cap on live timers (`TimerBackend/limitLiveTimers(to:)`,
    /// `TimerRegistry/limitLiveTimers(to:)`). `scope` is whose cap: "epoll backend",
    /// "registry", …
    case liveTimerLimit(scope: String, limit: Int)
    /// The backend cannot run on this machine: `reason` says what is missing (a kernel without
    /// io_uring, io_uring disabled by `/proc/sys/kernel/io_uring_disabled` or forbidden by a
    /// sandbox, `epoll_pwait2` before Linux 5.11). Nothing was started and nothing is leaked.
    case unavailable(backend: String, reason: String)

    public var description: String {
        switch self {
        case let .negativeDuration(parameter, value): "\(parameter) must not be negative (got \(value))"
        case let .nonFiniteSeconds(parameter, value): "\(parameter) must be a finite number of seconds (got \(value))"
        case let .zeroInterval(parameter): "\(parameter) must be greater than zero"
        case let .intervalBelowOneNanosecond(parameter, seconds):
            "\(parameter) must be at least 1 ns, the clocks' resolution (got \(seconds) s)"
        case let .invalidCount(count): "repeat count must be at least 1 (got \(count))"
        case .emptyName: "timer name must not be empty"
        case let .reservedName(name): "timer name '\(name)' starts with 'timer#', which is kept for generated names; choose another"
        case let .duplicateName(name): "a timer named '\(name)' is already registered"
        case let .noSuchTimer(name): "no timer named '\(name)' is registered"
        case let .timerEnded(name, state): "timer '\(name)' is \(state); it cannot be changed"
        case let .keyEnded(key): "the timer of \(key) has ended; the key cannot change it"
        case let .backendShutDown(backend): "the \(backend) backend has been shut down"
        case let .loopFailed(backend, cause): "the \(backend) backend's loop stopped: \(cause)"
        case let .invalidFrameRate(rate): "frame rate must be in 1...1000 Hz (got \(rate))"
        case let .invalidOption(name, value, allowed): "\(name) must be in \(allowed) (got \(value))"
        case let .systemCall(call, errno): "\(call) failed: errno \(errno) (\(String(cString: strerror(errno))))"
        case let .nativeFailure(backend, call): "\(backend): \(call) failed"
        case let .liveTimerLimit(scope, limit): "the \(scope) already has its limit of \(limit) live timers"
        case let .unavailable(backend, reason): "the \(backend) backend cannot run here: \(reason)"
        }
    }

    public static func == (lhs: TimerError, rhs: TimerError) -> Bool {
        func same(_ a: Double, _ b: Double) -> Bool { a == b || (a.isNaN && b.isNaN) }
        switch (lhs, rhs) {
        case let (.negativeDuration(p1, v1), .negativeDuration(p2, v2)): return p1 == p2 && v1 == v2
        case let (.nonFiniteSeconds(p1, v1), .nonFiniteSeconds(p2, v2)): return p1 == p2 && same(v1, v2)
        case let (.zeroInterval(p1), .zeroInterval(p2)): return p1 == p2
        case let (.intervalBelowOneNanosecond(p1, v1), .intervalBelowOneNanosecond(p2, v2)): return p1 == p2 && same(v1, v2)
        case let (.invalidCount(c1), .invalidCount(c2)): return c1 == c2
        case (.emptyName, .emptyName): return true
        case let (.reservedName(n1), .reservedName(n2)): return n1 == n2
        case let (.duplicateName(n1), .duplicateName(n2)): return n1 == n2
        case let (.noSuchTimer(n1), .noSuchTimer(n2)): return n1 == n2
        case let (.timerEnded(n1, s1), .timerEnded(n2, s2)): return n1 == n2 && s1 == s2
        case let (.keyEnded(k1), .keyEnded(k2)): return k1 == k2
        case let (.backendShutDown(b1), .backendShutDown(b2)): return b1 == b2
        case let (.loopFailed(b1, c1), .loopFailed(b2, c2)): return b1 == b2 && c1 == c2
        case let (.invalidFrameRate(r1), .invalidFrameRate(r2)): return same(r1, r2)
        case let (.invalidOption(n1, v1, a1), .invalidOption(n2, v2, a2)): return n1 == n2 && v1 == v2 && a1 == a2
        case let (.systemCall(c1, e1), .systemCall(c2, e2)): return c1 == c2 && e1 == e2
        case let (.nativeFailure(b1, c1), .nativeFailure(b2, c2)): return b1 == b2 && c1 == c2
        case let (.liveTimerLimit(s1, l1), .liveTimerLimit(s2, l2)): return s1 == s2 && l1 == l2
        case let (.unavailable(b1, r1), .unavailable(b2, r2)): return b1 == b2 && r1 == r2
        default: return false
        }
    }
}
