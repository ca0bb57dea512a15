internal import CTimerShims
import Glibc
@_spi(BackendImplementation) import TimerKit

/// The scheduling priority a loop thread asks for.
public enum ThreadPriority: Sendable, Equatable {
    /// The default time-sharing policy.
    case normal
    /// Time-sharing with a nice value (-20 highest ... 19 lowest). Below 0 needs privilege.
    case nice(Int32)
    /// SCHED_FIFO at `priority` (1...99), falling back to nice -20, then to normal, when
    /// the process is not permitted (SCHED_FIFO needs root or CAP_SYS_NICE).
    case realtime(Int32)

    package func validate() throws(TimerError) {
        switch self {
        case .normal: break
        case let .nice(value) where !(-20...19).contains(value):
            throw .invalidOption(name: "nice", value: "\(value)", allowed: "-20...19")
        case let .realtime(priority) where !(1...99).contains(priority):
            throw .invalidOption(name: "realtime priority", value: "\(priority)", allowed: "1...99")
        default: break
        }
    }
}

/// The priority a thread actually got: ask for `.realtime` and read this to learn whether
/// the fallback was taken, and why.
public struct ObtainedPriority: Sendable, Equatable, CustomStringConvertible {
    /// What the thread runs at.
    public let priority: ThreadPriority
    /// Why it is not what was asked for (e.g. "SCHED_FIFO: errno 1 (EPERM)"), nil if it is.
    public let fallbackReason: String?

    package init(priority: ThreadPriority, fallbackReason: String?) {
        self.priority = priority
        self.fallbackReason = fallbackReason
    }

    public var description: String {
        let base: String
        switch priority {
        case .normal: base = "normal"
        case let .nice(value): base = "nice \(value)"
        case let .realtime(value): base = "SCHED_FIFO \(value)"
        }
        return fallbackReason.map { "\(base) (fallback: \($0))" } ?? base
    }
}

extension ThreadPriority {
    /// Applies this priority to the calling thread, with the fallback `.realtime` describes,
    /// and returns what the thread got. With `minimalTimerSlack`, the thread's timer slack
    /// also drops to 1 ns (the kernel's default is 50 µs), as a `DisplaySource` does for its
    /// vsync thread: for threads of your own that must keep time as closely.
    public func applyToCurrentThread(minimalTimerSlack: Bool = false) -> ObtainedPriority {
        if minimalTimerSlack { _ = ctk_set_timer_slack(1) }
        return applyPriority(self)
    }
}

/// Applies `requested` to the calling thread, falling back as `ThreadPriority` describes.
func applyPriority(_ requested: ThreadPriority) -> ObtainedPriority {
    func describe(_ call: String, _ code: Int32) -> String {
        "\(call) failed: errno \(code) (\(String(cString: strerror(code))))"
    }
    /// setpriority(2) on this thread alone (a thread id, not the process): 0 or the errno.
    func setNice(_ value: Int32) -> Int32 {
        setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(ctk_gettid()), value) == 0 ? 0 : errno
    }
    switch requested {
    case .normal:
        return ObtainedPriority(priority: .normal, fallbackReason: nil)
    case let .nice(value):
        let code = setNice(value)
        return code == 0
            ? ObtainedPriority(priority: requested, fallbackReason: nil)
            : ObtainedPriority(priority: .normal, fallbackReason: describe("setpriority(\(value))", code))
    case let .realtime(priority):
        var parameters = sched_param()
        parameters.sched_priority = priority
        let code = pthread_setschedparam(pthread_self(), SCHED_FIFO, &parameters)
        if code == 0 { return ObtainedPriority(priority: requested, fallbackReason: nil) }
        let reason = describe("SCHED_FIFO \(priority)", code)
        if setNice(-20) == 0 { return ObtainedPriority(priority: .nice(-20), fallbackReason: reason) }
        return ObtainedPriority(priority: .normal, fallbackReason: reason + "; nice -20 refused too")
    }
}

/// Sets the calling thread's timer slack (the kernel's default is 50 µs; 1 ns is the least).
package func applyTimerSlack(_ slack: Duration) throws(TimerError) {
    let ns = max(1, slack.saturatingNanoseconds)
    let rc = ctk_set_timer_slack(UInt(ns))
    if rc != 0 { throw .systemCall(call: "prctl(PR_SET_TIMERSLACK)", errno: -rc) }
}
