import CoreFoundation
import Foundation

/// A backend on a Foundation `RunLoop`, with run-loop modes that behave as on iOS.
///
/// Each mode the backend uses gets one core scheduler and ONE native run-loop timer in that
/// mode (re-armed by moving its fire date), however many timers are scheduled: Foundation's
/// `invalidate()` is O(n) in a mode's timers, so a `Timer` per user timer does not scale.
///
/// A timer scheduled in `.default` waits while the loop runs in another mode (such as a
/// custom "tracking" mode, as UIKit's scrolling does) and fires when the loop returns to
/// `.default` (once, under the `.skip` policy). A timer in `.common` fires in every mode
/// registered as common, which a custom mode joins through `addCommonMode(_:)`.
///
/// ```swift
/// let backend = try RunLoopBackend()                       // its own thread
/// try backend.schedule(.every(.seconds(1))) { _ in ... }   // .default mode
/// try backend.mode(.common).schedule(.every(.seconds(1))) { _ in ... }
/// ```
public final class RunLoopBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: `runLoop` and `cfRunLoop` are thread-safe CF objects (adding timers,
    // setting fire dates, adding common modes and stopping all lock the loop internally);
    // `views` and `isShutDown` are guarded by `mutex`.

    /// Which run loop to attach to, from the thread that owns it.
    public enum Attachment: Sendable {
        /// The calling thread's run loop. Call `init(attachedTo:)` on that thread.
        case current
        /// The main thread's run loop.
        case main
    }

    /// The `.default` mode's scheduler.
    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    @_spi(BackendImplementation) public var unretainedScheduler: Unmanaged<TimerScheduler> { .passUnretained(scheduler) }
    /// Whether this backend runs its own thread (false: attached to the caller's loop).
    public let isAttached: Bool
    private let runLoop: RunLoop
    private let cfRunLoop: CFRunLoop
    private let registry: TimerRegistry
    private let loop: OwnedLoop?
    private let mutex = FutexLock()
    @exclusivity(unchecked) private var views: [RunLoop.Mode: ModeView] = [:]
    @exclusivity(unchecked) private var isShutDown = false

    /// Starts a thread running a run loop of its own, in `.default` mode.
    /// - Throws: `TimerError.systemCall` if the thread cannot start.
    public init(registry: TimerRegistry = .shared) throws(TimerError) {
        let started = StartSignal<LoopRefs>()
        let loop = try OwnedLoop(
            { loop in
                started.send(LoopRefs(runLoop: RunLoop.current, cfRunLoop: CFRunLoopGetCurrent()))
                // The default mode's native timer keeps the loop from returning at once; it is
                // invalidated only after this thread has been joined.
                while !loop.isStopping {
                    _ = RunLoop.current.run(mode: .default, before: .distantFuture)
                }
            }, release: {})
        guard let refs = started.receive() else { throw .systemCall(call: "pthread_create", errno: EAGAIN) }
        self.loop = loop
        self.runLoop = refs.runLoop
        self.cfRunLoop = refs.cfRunLoop
        self.registry = registry
        self.isAttached = false
        let view = ModeView(mode: .default, runLoop: refs.cfRunLoop, registry: registry)
        self.scheduler = view.scheduler
        views[.default] = view
    }

    /// Attaches to a run loop the caller runs: handlers run on that loop's thread, timers
    /// may be scheduled from any thread.
    public init(attachedTo attachment: Attachment, registry: TimerRegistry = .shared) {
        switch attachment {
        case .current:
            runLoop = .current
            cfRunLoop = CFRunLoopGetCurrent()
        case .main:
            runLoop = .main
            cfRunLoop = CFRunLoopGetMain()
        }
        self.loop = nil
        self.registry = registry
        self.isAttached = true
        let view = ModeView(mode: .default, runLoop: cfRunLoop, registry: registry)
        self.scheduler = view.scheduler
        views[.default] = view
    }

    deinit { shutdown() }

    /// The backend for timers in `mode`: schedule through it and they fire only while the
    /// loop runs in that mode (or, for `.common`, in any common mode).
    public func mode(_ mode: RunLoop.Mode) -> any TimerBackend {
        mutex.withLock {
            if let view = views[mode] { return view }
            let view = ModeView(mode: mode, runLoop: cfRunLoop, registry: registry)
            if isShutDown { view.shutdown() }
            views[mode] = view
            return view
        }
    }

    /// Makes `mode` one of the loop's common modes, so `.common` timers fire while the loop
    /// runs in it (Foundation offers no other way on Linux).
    public func addCommonMode(_ mode: RunLoop.Mode) {
        CFRunLoopAddCommonMode(cfRunLoop, cfMode(mode))
    }

    /// Cancels the timers of every mode and removes the native timers; an owned loop is
    /// stopped and its thread joined (unless called from one of its handlers). From another
    /// thread it returns once no handler of this backend is running.
    public func shutdown() {
        let toStop: [ModeView] = mutex.withLock {
            guard !isShutDown else { return [] }
            isShutDown = true
            return Array(views.values)
        }
        guard !toStop.isEmpty else { return }
        for view in toStop { view.scheduler.shutdown() }
        if let loop {
            // A bare CFRunLoopStop is lost when it lands between two runs (each run starts
            // with the stop flag cleared); a block queued on the loop is not, and the loop
            // stops itself when it runs it.
            let runLoop = self.runLoop
            let cfRunLoop = self.cfRunLoop
            loop.stop {
                runLoop.perform { CFRunLoopStop(CFRunLoopGetCurrent()) }
                CFRunLoopWakeUp(cfRunLoop)
            }
        }
        for view in toStop { view.removeNativeTimer() }
    }
}

/// The owned loop thread's run loop, handed to `init` (both are thread-safe CF objects).
private struct LoopRefs: @unchecked Sendable {
    // @unchecked: both are thread-safe CF objects, handed over once at start-up.
    let runLoop: RunLoop
    let cfRunLoop: CFRunLoop
}

/// One mode of a run loop: a scheduler and the single native timer that wakes it.
///
/// The native timer is a CoreFoundation `CFRunLoopTimer`, not a Foundation `Timer`: on Linux
/// a `Timer` added to a secondary thread's run loop is never freed (measured with
/// LeakSanitizer: one `Timer` and its CF timer per use, with or without TimerKit), while a
/// CF timer with a retained context is.
private final class ModeView: TimerBackend, @unchecked Sendable {
    // @unchecked: `timer` is only used through thread-safe CF calls (setting the fire date,
    // invalidating), made while the scheduler's lock serialises them.
    let scheduler: TimerScheduler
    private let timer: CFRunLoopTimer

    /// What the CF timer calls back. It holds the scheduler strongly until shutdown invalidates
    /// the CF timer, which releases it: a weak reference would give the scheduler a side table
    /// (see `RecordChunk.owner`).
    private final class Callback {
        let scheduler: TimerScheduler
        init(_ scheduler: TimerScheduler) { self.scheduler = scheduler }
    }

    fileprivate static let never = Date.distantFuture.timeIntervalSinceReferenceDate

    init(mode: RunLoop.Mode, runLoop: CFRunLoop, registry: TimerRegistry) {
        let name = mode == .default ? "runloop" : "runloop[\(mode.rawValue)]"
        let scheduler = TimerScheduler(backendName: name, registry: registry)
        self.scheduler = scheduler
        // CF retains the context for the timer's life and releases it when the timer goes.
        let callback = Unmanaged.passRetained(Callback(scheduler))
        var context = CFRunLoopTimerContext(
            version: 0, info: callback.toOpaque(),
            retain: { info in
                guard let info else { return nil }
                _ = Unmanaged<Callback>.fromOpaque(info).retain()
                return UnsafeRawPointer(info)
            },
            release: { info in
                guard let info else { return }
                Unmanaged<Callback>.fromOpaque(info).release()
            },
            copyDescription: nil)
        // Repeating with a decades-long interval, so it stays valid between re-arms.
        timer = CFRunLoopTimerCreate(
            nil, Self.never, 1e9, 0, 0,
            { _, info in
                guard let info else { return }
                Unmanaged<Callback>.fromOpaque(info).takeUnretainedValue().scheduler.fireDueTimers()
            }, &context)
        callback.release()  // the timer holds its own reference now
        CFRunLoopAddTimer(runLoop, timer, cfMode(mode))
        scheduler.attach(owning: CFTimerWakeUps(timer))
    }

    func shutdown() {
        scheduler.shutdown()
        removeNativeTimer()
    }

    func removeNativeTimer() { CFRunLoopTimerInvalidate(timer) }
}

/// A mode's driver: it moves the mode's CF timer. The scheduler owns it (`attach(owning:)`; a
/// driver held weakly costs the runtime's slow reference counting on every wake-up request) and
/// lets it go at shutdown, before the CF timer is invalidated.
private final class CFTimerWakeUps: TimerDriver, @unchecked Sendable {
    // @unchecked: `timer` never changes and is only used through thread-safe CF calls, which
    // the scheduler's lock serialises.
    let timer: CFRunLoopTimer

    init(_ timer: CFRunLoopTimer) { self.timer = timer }

    func wake(at deadline: MonotonicInstant) {
        guard deadline != .distantFuture else {
            CFRunLoopTimerSetNextFireDate(timer, ModeView.never)
            return
        }
        // Run-loop timers take wall-clock dates; convert through the distance from now.
        let now = MonotonicInstant.now()
        let delay = deadline > now ? Double((deadline - now).saturatingNanoseconds) / 1e9 : 0
        CFRunLoopTimerSetNextFireDate(timer, CFAbsoluteTimeGetCurrent() + delay)
    }
}

/// CoreFoundation's name for a run-loop mode. The common and default modes must be CF's own
/// constants: `CFRunLoopAddTimer` recognises the common modes by pointer, not by name.
private func cfMode(_ mode: RunLoop.Mode) -> CFRunLoopMode {
    switch mode {
    case .common: kCFRunLoopCommonModes
    case .default: kCFRunLoopDefaultMode
    default: CFStringCreateWithCString(nil, mode.rawValue, CFStringBuiltInEncodings.UTF8.rawValue)
    }
}
