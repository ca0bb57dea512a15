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

    public var description: String {
        "\(name) [\(backend)] \(state) fires=\(fires) next=\(nextDeadline.map(\.description) ?? "-")"
    }
}
