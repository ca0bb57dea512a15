/// Why a timer ended: what `TimerHandle/ended`, `TimerHandle/endReason` and
/// `TimerHandle/onEnd(_:)` report, so that callers need not infer it.
public enum TimerEndReason: Sendable, Equatable, CustomStringConvertible {
    /// It fired its last tick, and that call returned: a one-shot's, or a counted repeat's last.
    /// A timer is live until its last call returns: one cancelled, or whose backend shuts down,
    /// while that call runs ends for that reason, with the call counted in its fires.
    case completed
    /// It was cancelled: through its handle (`TimerHandle/cancel()`, `cancelAndWait()`, or
    /// code that holds it for you: a released `OwnedTimer`, a cancelled sleep or tick sequence).
    case cancelled
    /// It was cancelled by name, through the registry (`TimerRegistry/cancel(named:)`).
    case cancelledByName
    /// `TimerRegistry/cancelAll()` cancelled it with every other timer.
    case cancelledByCancelAll
    /// It was a target-action timer whose target was released.
    case targetReleased
    /// Its backend was shut down.
    case backendShutDown
    /// Its backend's loop stopped on this error, and shut the backend down.
    case loopFailed(TimerError)

    public var description: String {
        switch self {
        case .completed: "completed"
        case .cancelled: "cancelled"
        case .cancelledByName: "cancelled by name"
        case .cancelledByCancelAll: "cancelled by cancelAll"
        case .targetReleased: "target released"
        case .backendShutDown: "backend shut down"
        case let .loopFailed(error): "loop failed: \(error)"
        }
    }
}

/// How a timer ended, in a byte of its record (`TimerRecord.endCause`, and a handle's `endFacts`); the loop's error, for
/// `.shutDown`, is its scheduler's.
enum EndCause: UInt8 {
    case live, completed, cancelled, cancelledByName, cancelledByCancelAll, targetReleased, shutDown

    /// The reason of an ended timer (`.completed` for `.live`, which no ended timer has), made
    /// without an optional in between: a callback's end is told one on every cancel.
    /// `loopFailure` is the scheduler's, for `.shutDown`.
    func endedReason(loopFailure: TimerError?) -> TimerEndReason {
        switch self {
        case .live, .completed: .completed
        case .cancelled: .cancelled
        case .cancelledByName: .cancelledByName
        case .cancelledByCancelAll: .cancelledByCancelAll
        case .targetReleased: .targetReleased
        case .shutDown: if let loopFailure { .loopFailed(loopFailure) } else { .backendShutDown }
        }
    }

    /// The final state of a timer that ended for this cause: `.finished` after its last call,
    /// `.cancelled` for every other end. With `endedReason(loopFailure:)`, the one mapping from a
    /// stored end to what callers read.
    var endedState: TimerState { self == .completed ? .finished : .cancelled }

    /// The reason it stands for; nil while the timer is live. `loopFailure` is the
    /// scheduler's, for `.shutDown`.
    func reason(loopFailure: TimerError?) -> TimerEndReason? {
        self == .live ? nil : endedReason(loopFailure: loopFailure)
    }
}
