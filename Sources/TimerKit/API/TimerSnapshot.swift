/// A point-in-time view of one registered timer.
public struct TimerSnapshot: Sendable, CustomStringConvertible {
    /// The registered name.
    public let name: String
    /// The backend's name ("dispatch", "epoll", ...).
    public let backend: String
    /// The timer's state when the snapshot was taken.
    public let state: TimerState
    /// Handler calls so far.
    public let fires: Int
    /// When it will next fire; nil when suspended or ended.
    public let nextDeadline: MonotonicInstant?
    /// The repeat interval; nil for one-shots.
    public let interval: Duration?
    /// How late its latest handler call began (from the tick's due time); nil before its first.
    public let lastLateness: Duration?
    /// The most any of its handler calls was late; nil before its first.
    public let maxLateness: Duration?
    /// Grid points it missed (skipped by `.skip`, passed over by a `.delay` restart).
    public let missedTicks: Int

    public var description: String {
        let late = lastLateness.map { " late=\($0) max=\(maxLateness ?? $0)" } ?? ""
        return "\(name) [\(backend)] \(state) fires=\(fires)\(late) missed=\(missedTicks) next=\(nextDeadline.map(\.description) ?? "-")"
    }
}
