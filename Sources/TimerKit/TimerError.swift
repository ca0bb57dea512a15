/// Every failure TimerKit reports. Each case names the value that was wrong.
public enum TimerError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A duration parameter was negative.
    case negativeDuration(parameter: String, value: Duration)
    /// A duration given in seconds was NaN or infinite.
    case nonFiniteSeconds(parameter: String, value: Double)
    /// A repeat interval was zero: the timer would fire in a busy loop.
    case zeroInterval(parameter: String)
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
    /// The backend was shut down.
    case backendShutDown(backend: String)
    /// A frame rate was zero, negative, NaN or above the supported maximum.
    case invalidFrameRate(Double)
    /// An option was outside its allowed range.
    case invalidOption(name: String, value: String, allowed: String)
    /// An operating-system call failed.
    case systemCall(call: String, errno: Int32)
    /// A backend's native library reported a failure.
    case nativeFailure(backend: String, call: String)

    public var description: String {
        switch self {
        case let .negativeDuration(parameter, value): "\(parameter) must not be negative (got \(value))"
        case let .nonFiniteSeconds(parameter, value): "\(parameter) must be a finite number of seconds (got \(value))"
        case let .zeroInterval(parameter): "\(parameter) must be greater than zero"
        case let .invalidCount(count): "repeat count must be at least 1 (got \(count))"
        case .emptyName: "timer name must not be empty"
        case let .reservedName(name): "timer name '\(name)' starts with 'timer#', which is kept for generated names; choose another"
        case let .duplicateName(name): "a timer named '\(name)' is already registered"
        case let .noSuchTimer(name): "no timer named '\(name)' is registered"
        case let .timerEnded(name, state): "timer '\(name)' is \(state); it cannot be changed"
        case let .backendShutDown(backend): "the \(backend) backend has been shut down"
        case let .invalidFrameRate(rate): "frame rate must be in 1...1000 Hz (got \(rate))"
        case let .invalidOption(name, value, allowed): "\(name) must be in \(allowed) (got \(value))"
        case let .systemCall(call, errno): "\(call) failed: errno \(errno) (\(String(cString: strerror(errno))))"
        case let .nativeFailure(backend, call): "\(backend): \(call) failed"
        }
    }
}

import Glibc
