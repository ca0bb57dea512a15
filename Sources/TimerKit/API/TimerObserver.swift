/// Hooks run around every handler call: for a single timer or a whole registry.
/// Use them to record lateness, trace, or count, without touching the handlers (the
/// seeds' AOP proxy).
public struct TimerObserver: Sendable {
    /// Runs on the backend's loop just before the handler.
    public var willFire: (@Sendable (Tick) -> Void)?
    /// Runs on the backend's loop just after the handler, with how long it ran.
    public var didFire: (@Sendable (Tick, Duration) -> Void)?

    /// Creates an observer from its two optional hooks.
    public init(willFire: (@Sendable (Tick) -> Void)? = nil, didFire: (@Sendable (Tick, Duration) -> Void)? = nil) {
        self.willFire = willFire
        self.didFire = didFire
    }
}
