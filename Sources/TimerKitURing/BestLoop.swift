import TimerKit
import TimerKitEpoll

/// TimerKit's best loop of its own that this process may run, made in one call: an
/// ``IOURingBackend`` where io_uring may run, else an `EpollBackend` waiting in `epoll_pwait2`
/// where the kernel has it, else an `EpollBackend` on a timerfd. It says which it took and why
/// it passed the better ones over.
///
/// ```swift
/// let best = try BestLoop.make()
/// for skipped in best.passedOver { log("not \(skipped.kind): \(skipped.reason)") }
/// try best.backend.schedule(.every(.seconds(1))) { _ in heartbeat() }
/// ```
///
/// A loop is passed over only because it cannot run here (`TimerError.unavailable`). Any other
/// failure to make one (a priority out of range, say) is thrown as it is, not hidden behind a
/// weaker loop.
public struct BestLoop: Sendable {
    /// One of TimerKit's loops, from the best.
    public enum Kind: String, Sendable, CaseIterable, CustomStringConvertible {
        /// ``IOURingBackend``: one `io_uring_enter` per wake-up, and wall and continuous
        /// timers armed on their own clocks.
        case ioURing = "io_uring"
        /// `EpollBackend` in `.epollPwait2` mode: one `epoll_pwait2` per wake-up.
        case epollPwait2 = "epoll_pwait2"
        /// `EpollBackend` in `.timerfd` mode: a timerfd set and read around each wait.
        case epollTimerfd = "epoll (timerfd)"

        public var description: String { rawValue }
    }

    /// A better loop that was not taken, and why it cannot run here.
    public struct PassedOver: Sendable, Equatable {
        public let kind: Kind
        /// The reason its backend gave (`TimerError.unavailable`'s).
        public let reason: String
    }

    /// The backend made: an ``IOURingBackend`` or an `EpollBackend`. Yours to shut down.
    public let backend: any TimerBackend
    /// Which loop it is.
    public let kind: Kind
    /// The better loops passed over, best first: empty when the best of all was taken.
    public let passedOver: [PassedOver]

    /// Makes the best loop that may run here, with the loop thread's `priority` and `timerSlack`
    /// (nil: each backend's default) and the name each backend gives its thread unless
    /// `threadName` is set.
    /// - Throws: what the chosen backend's `init` throws other than `TimerError.unavailable`
    ///   (`TimerError.systemCall` naming the call and errno, `TimerError.invalidOption` for a
    ///   priority out of range); nothing is leaked.
    public static func make(
        threadName: String? = nil, priority: ThreadPriority = .normal, timerSlack: Duration? = nil,
        registry: TimerRegistry = .shared
    ) throws(TimerError) -> BestLoop {
        var passedOver: [PassedOver] = []
        // The backend `make` makes, or nil if it cannot run here (its reason kept).
        func attempt(_ kind: Kind, _ make: () throws(TimerError) -> any TimerBackend) throws(TimerError) -> BestLoop? {
            do {
                return BestLoop(backend: try make(), kind: kind, passedOver: passedOver)
            } catch {
                guard case .unavailable(_, let reason) = error else { throw error }
                passedOver.append(PassedOver(kind: kind, reason: reason))
                return nil
            }
        }
        var uringOptions = IOURingBackend.Options(priority: priority, timerSlack: timerSlack)
        if let threadName { uringOptions.threadName = threadName }
        if let best = try attempt(.ioURing, { () throws(TimerError) in try IOURingBackend(options: uringOptions, registry: registry) }) {
            return best
        }
        var epollOptions = EpollBackend.Options(priority: priority, timerSlack: timerSlack, waitMode: .epollPwait2)
        if let threadName { epollOptions.threadName = threadName }
        if let best = try attempt(.epollPwait2, { () throws(TimerError) in try EpollBackend(options: epollOptions, registry: registry) }) {
            return best
        }
        epollOptions.waitMode = .timerfd
        let backend = try EpollBackend(options: epollOptions, registry: registry)
        return BestLoop(backend: backend, kind: .epollTimerfd, passedOver: passedOver)
    }
}
