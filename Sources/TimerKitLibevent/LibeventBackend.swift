import CLibevent
import Glibc
import Synchronization
import TimerKit

/// A backend on libevent: ONE timer event on an `event_base` wakes the core scheduler,
/// however many timers are scheduled.
///
/// Two ways to run:
/// - **owned** (`init(options:registry:)`): it makes a base with
///   `EVENT_BASE_FLAG_PRECISE_TIMER` (a default base reads a ~4 ms coarse clock and fires
///   1 ms timers about 3.5 ms late) and runs it on a thread of its own;
/// - **attached** (`init(attachedTo:registry:)`): it adds its event to a base that your
///   program already runs, and its handlers run on your loop's thread.
///
/// Repeats stay on TimerKit's drift-free grid: the core re-arms a one-shot event for each
/// next deadline instead of using `EV_PERSIST`, which drifts after a late fire.
public final class LibeventBackend: TimerBackend, TimerDriver, @unchecked Sendable {
    // @unchecked: `base`, `event`, `context` and `thread` are set in init and never change;
    // libevent's own lock (evthread_use_pthreads) guards the event across threads, and
    // `shutdownOnce` makes shutdown run once.

    /// How an owned base is made and run.
    public struct Options: Sendable {
        /// Use CLOCK_MONOTONIC (not the coarse clock) for timeouts. On by default.
        public var preciseTimer: Bool
        /// Back-end methods the base must not use ("epoll", "poll", "select").
        public var avoidMethods: [String]

        /// Defaults: precise timer, any method.
        public init(preciseTimer: Bool = true, avoidMethods: [String] = []) {
            self.preciseTimer = preciseTimer
            self.avoidMethods = avoidMethods
        }
    }

    /// What libevent calls back: holds the scheduler for the event's lifetime. It is
    /// released only once libevent can no longer call it (after the loop thread is joined,
    /// or from `event_free_finalize`'s callback for an attached base).
    private final class Context: Sendable {
        let scheduler: TimerScheduler
        init(_ scheduler: TimerScheduler) { self.scheduler = scheduler }
    }

    /// The core scheduler.
    public let scheduler: TimerScheduler
    /// libevent's name for the method the base uses ("epoll", ...).
    public let method: String
    /// Whether this backend made (and runs) its base, or was attached to the caller's.
    public let isAttached: Bool
    private let base: OpaquePointer
    private let event: OpaquePointer
    private let context: Unmanaged<Context>
    private let thread: LoopThread?
    /// Activated by shutdown; its callback breaks the owned loop from inside. (A plain
    /// `event_base_loopbreak` from another thread is lost if it lands before the loop has
    /// started: `event_base_loop` clears the flag on entry. An activation is not.)
    private let stopEvent: OpaquePointer?
    /// Set when shutdown runs inside one of our handlers: the loop thread then frees the
    /// event and the base itself once its loop has returned.
    private let exit = LoopExit()
    private let shutdownOnce = OnceFlag()

    /// libevent must know about threads before any base is made, or adding an event from
    /// another thread does not wake the loop.
    private static let threadsEnabled: Bool = evthread_use_pthreads() == 0

    /// Makes a base and runs it on a thread of its own.
    /// - Throws: `TimerError.nativeFailure` naming the libevent call that failed (e.g. no
    ///   method is left after `avoidMethods`), `.systemCall` if the thread cannot start.
    public init(options: Options = Options(), registry: TimerRegistry = .shared) throws(TimerError) {
        guard Self.threadsEnabled else { throw .nativeFailure(backend: "libevent", call: "evthread_use_pthreads") }
        guard let config = event_config_new() else { throw .nativeFailure(backend: "libevent", call: "event_config_new") }
        defer { event_config_free(config) }
        if options.preciseTimer { event_config_set_flag(config, Int32(EVENT_BASE_FLAG_PRECISE_TIMER.rawValue)) }
        for method in options.avoidMethods { event_config_avoid_method(config, method) }
        guard let base = event_base_new_with_config(config) else {
            throw .nativeFailure(backend: "libevent", call: "event_base_new_with_config")
        }
        let scheduler = TimerScheduler(backendName: "libevent", registry: registry)
        let context = Unmanaged.passRetained(Context(scheduler))
        guard let event = event_new(base, -1, 0, Self.trampoline, context.toOpaque()) else {
            context.release()
            event_base_free(base)
            throw .nativeFailure(backend: "libevent", call: "event_new")
        }
        guard let stopEvent = event_new(base, -1, 0, Self.breakLoop, UnsafeMutableRawPointer(base)) else {
            event_free(event)
            context.release()
            event_base_free(base)
            throw .nativeFailure(backend: "libevent", call: "event_new")
        }
        self.stopEvent = stopEvent
        self.scheduler = scheduler
        self.base = base
        self.event = event
        self.context = context
        self.method = String(cString: event_base_get_method(base))
        self.isAttached = false
        let exit = self.exit
        // libevent's handles are not Sendable; the thread gets their addresses.
        let (baseAddress, eventAddress, stopAddress) = (UInt(bitPattern: base), UInt(bitPattern: event), UInt(bitPattern: stopEvent))
        do throws(TimerError) {
            thread = try LoopThread {
                guard let base = OpaquePointer(bitPattern: baseAddress),
                      let event = OpaquePointer(bitPattern: eventAddress),
                      let stopEvent = OpaquePointer(bitPattern: stopAddress) else { return }
                // Runs until the stop event breaks it; an empty base would return at once.
                event_base_loop(base, Int32(EVLOOP_NO_EXIT_ON_EMPTY))
                if exit.freeOnLoopThread.load(ordering: .acquiring) {
                    Self.free(event: event, stopEvent: stopEvent, base: base, context: context)
                }
            }
        } catch {
            event_free(stopEvent)
            event_free(event)
            event_base_free(base)
            context.release()
            throw error
        }
        scheduler.attach(self)
    }

    /// Adds this backend's event to `base`, a loop the caller runs (a C program or library
    /// with its own libevent loop). Handlers run on that loop's thread.
    ///
    /// The caller must have called `evthread_use_pthreads()` before making `base` (TimerKit
    /// calls it on first use of this type, which is too late for a base made earlier):
    /// without it, timers added from other threads do not wake the loop. For on-time 1 ms
    /// timers, make the base with `EVENT_BASE_FLAG_PRECISE_TIMER`. After `shutdown()`, keep
    /// running the loop (or free the base): libevent releases this backend's event there.
    public init(attachedTo base: OpaquePointer, registry: TimerRegistry = .shared) throws(TimerError) {
        guard Self.threadsEnabled else { throw .nativeFailure(backend: "libevent", call: "evthread_use_pthreads") }
        let scheduler = TimerScheduler(backendName: "libevent-attached", registry: registry)
        let context = Unmanaged.passRetained(Context(scheduler))
        guard let event = event_new(base, -1, 0, Self.trampoline, context.toOpaque()) else {
            context.release()
            throw .nativeFailure(backend: "libevent", call: "event_new")
        }
        self.scheduler = scheduler
        self.base = base
        self.event = event
        self.context = context
        self.method = String(cString: event_base_get_method(base))
        self.isAttached = true
        self.thread = nil
        self.stopEvent = nil
        scheduler.attach(self)
    }

    deinit { shutdown() }

    private static let trampoline: event_callback_fn = { _, _, argument in
        guard let argument else { return }
        Unmanaged<Context>.fromOpaque(argument).takeUnretainedValue().scheduler.fireDueTimers()
    }

    // MARK: TimerDriver

    public func wake(at deadline: MonotonicInstant) throws(TimerError) {
        if deadline == .distantFuture {
            event_del(event)
            return
        }
        // event_add takes a relative timeout; the base measures it on CLOCK_MONOTONIC.
        let now = MonotonicInstant.now().nanoseconds
        let delta = deadline.nanoseconds > now ? deadline.nanoseconds - now : 0
        var timeout = timeval(tv_sec: Int(delta / 1_000_000_000), tv_usec: Int((delta % 1_000_000_000) / 1000))
        if event_add(event, &timeout) != 0 {
            throw .nativeFailure(backend: "libevent", call: "event_add")
        }
    }

    /// Cancels every timer and stops. Owned: breaks the loop, joins its thread (unless
    /// called from one of its handlers) and frees the event and the base. Attached: removes
    /// the event; libevent frees it from the caller's loop once no callback can be running.
    public func shutdown() {
        guard shutdownOnce.claim() else { return }
        scheduler.shutdown()
        let context = self.context
        if let thread, let stopEvent {
            event_active(stopEvent, 0, 0)
            if thread.isCurrent {
                // Inside a handler: the loop returns after it; the loop thread frees.
                exit.freeOnLoopThread.store(true, ordering: .releasing)
                thread.detach()
            } else {
                thread.join()
                Self.free(event: event, stopEvent: stopEvent, base: base, context: context)
            }
        } else {
            // The caller's loop may be inside our callback right now: let libevent decide
            // when the event, and the context it points to, can go.
            event_free_finalize(0, event, Self.finalizer)
        }
    }

    private static func free(event: OpaquePointer, stopEvent: OpaquePointer, base: OpaquePointer, context: Unmanaged<Context>) {
        event_free(event)
        event_free(stopEvent)
        event_base_free(base)
        context.release()
    }

    private static let breakLoop: event_callback_fn = { _, _, argument in
        guard let base = OpaquePointer(argument) else { return }
        event_base_loopbreak(base)
    }

    private final class LoopExit: Sendable {
        let freeOnLoopThread = Atomic<Bool>(false)
    }

    private static let finalizer: event_finalize_callback_fn = { _, argument in
        guard let argument else { return }
        Unmanaged<Context>.fromOpaque(argument).release()
    }
}
