/// A timer that ends with its owner: a non-copyable value that cancels its timer when it is
/// destroyed, so a timer kept in a stored property or a local lives exactly as long as it.
///
/// ```swift
/// final class Poller {
///     private var refresh: OwnedTimer?
///
///     func start(on backend: some TimerBackend) throws {
///         refresh = try OwnedTimer(backend.schedule(.every(.seconds(5))) { _ in poll() })
///     }
///     // No deinit needed: releasing the poller cancels its timer.
/// }
/// ```
///
/// Which to use: a weak target (`TimerBackend/schedule(_:target:name:tolerance:missedTicks:action:)`)
/// when the timer should end once its target is gone, whoever else holds the timer; an
/// `OwnedTimer` when one owner decides, and leaving scope (or being reassigned, or set to nil)
/// should end it. Both keep the handler from holding its owner alive. An `OwnedTimer`'s
/// handler may still capture its owner strongly: that would keep both alive, as any closure
/// stored in its owner does.
public struct OwnedTimer: ~Copyable, Sendable {
    /// The timer this value owns. Copies of the handle do not extend its life: the timer ends
    /// when this value does.
    public let handle: TimerHandle
    private var cancelsOnDeinit = true

    /// Takes ownership of `handle`: the timer is cancelled when this value is destroyed.
    public init(_ handle: TimerHandle) { self.handle = handle }

    deinit { if cancelsOnDeinit { handle.cancel() } }

    /// Gives up ownership without cancelling: the timer runs on, and `handle` is returned.
    public consuming func release() -> TimerHandle {
        cancelsOnDeinit = false
        return handle
    }
}
