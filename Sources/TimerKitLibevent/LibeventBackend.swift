internal import CLibevent
import Glibc
import Synchronization
@_spi(BackendImplementation) import TimerKit

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
public final class LibeventBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: `base`, `event`, `context` and `loop` are set in init and never change;
    // libevent's own lock (evthread_use_pthreads) guards the event across threads, and
    // `wake` is serialised by the scheduler's lock.

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

    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    @_spi(BackendImplementation) public var unretainedScheduler: Unmanaged<TimerScheduler> { .passUnretained(scheduler) }
    /// libevent's name for the method the base uses ("epoll", ...).
    public let method: String
    /// Whether this backend made (and runs) its base, or was attached to the caller's.
    public let isAttached: Bool
    private let base: OpaquePointer
    private let event: OpaquePointer
    private let context: Unmanaged<Context>
    /// The scheduler's driver, which arms `event`.
    private let wakeUps: EventWakeUps
    /// Owned bases: the loop thread, and the event whose activation breaks the loop from
    /// inside. (A plain `event_base_loopbreak` from another thread is lost if it lands
    /// before the loop has started: `event_base_loop` clears the flag on entry.)
    private let owned: (loop: OwnedLoop, stopEvent: OpaquePointer)?
    private let shutdownOnce = OnceFlag()

    /// libevent must know about threads before any base is made, or adding an event from
    /// another thread does not wake the loop.
    private static let threadsEnabled: Bool = evthread_use_pthreads() == 0

    /// Descriptors a base needs: epoll, its timerfd (precise timers), the signal pipe (2)
    /// and the cross-thread notification eventfd.
    private static let descriptorsPerBase = 5
    /// Serialises base creation, so two backends do not count on the same free descriptors.
    private static let creation = FutexLock()

    /// Makes a base and runs it on a thread of its own.
    /// - Throws: `TimerError.systemCall(call: "event_base_new_with_config", errno: EMFILE)`
    ///   when fewer than the 5 descriptors a base needs are free (libevent would otherwise
    ///   end the process: it calls `exit(1)` when it cannot make its signal pipe);
    ///   `.nativeFailure` naming the libevent call that failed (e.g. no method is left after
    ///   `avoidMethods`); `.systemCall` if the thread cannot start.
    public convenience init(options: Options = Options(), registry: TimerRegistry = .shared) throws(TimerError) {
        guard Self.threadsEnabled else { throw .nativeFailure(backend: "libevent", call: "evthread_use_pthreads") }
        guard let config = event_config_new() else { throw .nativeFailure(backend: "libevent", call: "event_config_new") }
        defer { event_config_free(config) }
        var flags = EVENT_BASE_FLAG_NO_CACHE_TIME.rawValue
        if options.preciseTimer { flags |= EVENT_BASE_FLAG_PRECISE_TIMER.rawValue }
        event_config_set_flag(config, Int32(flags))
        for method in options.avoidMethods { event_config_avoid_method(config, method) }
        let base = try Self.creation.withLock { () throws(TimerError) -> OpaquePointer in
            try Self.checkDescriptorsAreFree(Self.descriptorsPerBase)
            guard let base = event_base_new_with_config(config) else {
                throw .nativeFailure(backend: "libevent", call: "event_base_new_with_config")
            }
            return base
        }
        let timer: TimerEvent
        do throws(TimerError) { timer = try TimerEvent(on: base, backendName: "libevent", registry: registry) } catch {
            event_base_free(base)
            throw error
        }
        guard let stopEvent = event_new(base, -1, 0, Self.breakLoop, UnsafeMutableRawPointer(base)) else {
            timer.free()
            event_base_free(base)
            throw .nativeFailure(backend: "libevent", call: "event_new")
        }
        // libevent's handles are not Sendable; the thread gets their addresses.
        let (baseAddress, stopAddress) = (UInt(bitPattern: base), UInt(bitPattern: stopEvent))
        let scheduler = timer.scheduler
        let loop: OwnedLoop
        do throws(TimerError) {
            loop = try OwnedLoop(
                { loop in
                    guard let base = OpaquePointer(bitPattern: baseAddress) else { return }
                    // Runs until the stop event breaks it; an empty base would return at once.
                    let result = event_base_loop(base, Int32(EVLOOP_NO_EXIT_ON_EMPTY))
                    if !loop.isStopping {
                        scheduler.fail(with: .nativeFailure(backend: "libevent", call: "event_base_loop (returned \(result))"))
                    }
                },
                release: {
                    guard let base = OpaquePointer(bitPattern: baseAddress), let stopEvent = OpaquePointer(bitPattern: stopAddress)
                    else { return }
                    timer.free()
                    event_free(stopEvent)
                    event_base_free(base)
                })
        } catch {
            event_free(stopEvent)
            timer.free()
            event_base_free(base)
            throw error
        }
        self.init(base: base, timer: timer, owned: (loop, stopEvent))
    }

    /// Adds this backend's event to `base`, a loop the caller runs (a C program or library
    /// with its own libevent loop). Handlers run on that loop's thread.
    ///
    /// The caller must have called `evthread_use_pthreads()` before making `base` (TimerKit
    /// calls it on first use of this type, which is too late for a base made earlier):
    /// without it, timers added from other threads do not wake the loop. For on-time 1 ms
    /// timers, make the base with `EVENT_BASE_FLAG_PRECISE_TIMER`. After `shutdown()`, keep
    /// running the loop (or free the base): libevent releases this backend's event there.
    public convenience init(attachedTo base: OpaquePointer, registry: TimerRegistry = .shared) throws(TimerError) {
        guard Self.threadsEnabled else { throw .nativeFailure(backend: "libevent", call: "evthread_use_pthreads") }
        self.init(base: base, timer: try TimerEvent(on: base, backendName: "libevent-attached", registry: registry), owned: nil)
    }

    private init(base: OpaquePointer, timer: TimerEvent, owned: (loop: OwnedLoop, stopEvent: OpaquePointer)?) {
        self.scheduler = timer.scheduler
        self.base = base
        self.event = timer.event
        self.context = timer.context
        self.method = String(cString: event_base_get_method(base))
        self.isAttached = owned == nil
        self.owned = owned
        wakeUps = EventWakeUps(base: base, event: timer.event)
        scheduler.attach(owning: wakeUps)
    }

    /// The scheduler, and the one libevent event that wakes it, with the context libevent
    /// calls back with (which holds the scheduler until the event can no longer fire).
    private struct TimerEvent: @unchecked Sendable {
        // @unchecked: `event` is a libevent handle, used under libevent's own lock (evthread)
        // or by the thread that frees it once the loop is gone.
        let scheduler: TimerScheduler
        let context: Unmanaged<Context>
        let event: OpaquePointer

        init(on base: OpaquePointer, backendName: String, registry: TimerRegistry) throws(TimerError) {
            scheduler = TimerScheduler(backendName: backendName, registry: registry)
            context = Unmanaged.passRetained(Context(scheduler))
            guard let event = event_new(base, -1, 0, LibeventBackend.trampoline, context.toOpaque()) else {
                context.release()
                throw .nativeFailure(backend: "libevent", call: "event_new")
            }
            self.event = event
        }

        /// Frees the event and lets the context go: only once the loop can no longer call it.
        func free() {
            event_free(event)
            context.release()
        }
    }

    deinit { shutdown() }

    /// The `event_base` this backend's event is on (for tests in this package).
    package var eventBase: OpaquePointer { base }

    /// Throws EMFILE unless `count` descriptors can be opened now. libevent ends the process
    /// when it runs out of descriptors half-way through making a base, so it is not asked to
    /// try. (A thread that opens descriptors between this check and the base can still take
    /// them; the check holds while base creation is the only thing racing for them.)
    private static func checkDescriptorsAreFree(_ count: Int) throws(TimerError) {
        var probes: [Int32] = []
        defer { for fd in probes { close(fd) } }
        for _ in 0..<count {
            let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
            if fd < 0 { throw .systemCall(call: "event_base_new_with_config", errno: errno) }
            probes.append(fd)
        }
    }

    private static let trampoline: event_callback_fn = { _, _, argument in
        guard let argument else { return }
        Unmanaged<Context>.fromOpaque(argument).takeUnretainedValue().scheduler.fireDueTimers()
    }

    /// Cancels every timer and stops. Owned: breaks the loop, joins its thread (unless
    /// called from one of its handlers) and frees the event and the base. Attached: removes
    /// the event; libevent frees it from the caller's loop once no callback can be running.
    /// From another thread it returns once no handler of this backend is running.
    public func shutdown() {
        guard shutdownOnce.claim() else { return }
        scheduler.shutdown()
        if let (loop, stopEvent) = owned {
            loop.stop { event_active(stopEvent, 0, 0) }
        } else {
            // The caller's loop may be inside our callback right now: let libevent decide
            // when the event, and the context it points to, can go.
            event_free_finalize(0, event, Self.finalizer)
        }
    }

    private static let breakLoop: event_callback_fn = { _, _, argument in
        guard let base = OpaquePointer(argument) else { return }
        event_base_loopbreak(base)
    }

    private static let finalizer: event_finalize_callback_fn = { _, argument in
        guard let argument else { return }
        Unmanaged<Context>.fromOpaque(argument).release()
    }
}

/// A libevent backend's driver: it arms the backend's one event. The scheduler owns it
/// (`attach(owning:)`; a driver held weakly costs the runtime's slow reference counting on every
/// wake-up request) and lets it go at shutdown, before the backend frees the event.
private final class EventWakeUps: TimerDriver, @unchecked Sendable {
    // @unchecked: `base` and `event` never change; libevent's own lock (evthread) guards the
    // event across threads, and the scheduler's lock serialises `wake`.
    let base: OpaquePointer
    let event: OpaquePointer

    init(base: OpaquePointer, event: OpaquePointer) {
        (self.base, self.event) = (base, event)
    }

    /// Never blocks: `event_del_noblock` does not wait for a callback running on the loop
    /// (plain `event_del` does, while the callback waits for the scheduler's lock that our
    /// caller holds), and `event_add` waits only for signal events.
    func wake(at deadline: MonotonicInstant) throws(TimerError) {
        if deadline == .distantFuture {
            event_del_noblock(event)
            return
        }
        // event_add adds the relative timeout to the base's cached time, which inside a
        // callback is the time the loop woke: refresh it first, or the event fires early.
        event_base_update_cache_time(base)
        let now = MonotonicInstant.now().nanoseconds
        let delta = deadline.nanoseconds > now ? deadline.nanoseconds - now : 0
        // Rounded up to whole µs: rounding down fires just before the deadline, to find
        // nothing due and re-arm.
        let micros = (delta + 999) / 1000
        var timeout = timeval(tv_sec: Int(micros / 1_000_000), tv_usec: Int(micros % 1_000_000))
        if event_add(event, &timeout) != 0 {
            throw .nativeFailure(backend: "libevent", call: "event_add")
        }
    }
}
