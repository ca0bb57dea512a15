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

    func validate() throws(TimerError) {
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

/// Applies `requested` to the calling thread, falling back as `ThreadPriority` describes.
package func applyPriority(_ requested: ThreadPriority) -> ObtainedPriority {
    func describe(_ call: String, _ rc: Int32) -> String {
        "\(call) failed: errno \(-rc) (\(String(cString: strerror(-rc))))"
    }
    switch requested {
    case .normal:
        return ObtainedPriority(priority: .normal, fallbackReason: nil)
    case let .nice(value):
        let rc = ctk_set_thread_nice(value)
        return rc == 0 ? ObtainedPriority(priority: requested, fallbackReason: nil)
                       : ObtainedPriority(priority: .normal, fallbackReason: describe("setpriority(\(value))", rc))
    case let .realtime(priority):
        let fifo = ctk_set_fifo(priority)
        if fifo == 0 { return ObtainedPriority(priority: requested, fallbackReason: nil) }
        let reason = describe("SCHED_FIFO \(priority)", fifo)
        if ctk_set_thread_nice(-20) == 0 { return ObtainedPriority(priority: .nice(-20), fallbackReason: reason) }
        return ObtainedPriority(priority: .normal, fallbackReason: reason + "; nice -20 refused too")
    }
}

/// Sets the calling thread's timer slack (the kernel's default is 50 µs; 1 ns is the least).
func applyTimerSlack(_ slack: Duration) throws(TimerError) {
    let ns = max(1, slack.saturatingNanoseconds)
    let rc = ctk_set_timer_slack(UInt(ns))
    if rc != 0 { throw .systemCall(call: "prctl(PR_SET_TIMERSLACK)", errno: -rc) }
}
