internal import CTimerShims
import Glibc
import Synchronization
@_spi(BackendImplementation) import TimerKit

/// A backend on Linux's epoll: one loop thread, one epoll instance and one eventfd, and ONE
/// absolute CLOCK_MONOTONIC timerfd for all timers (or, in ``WaitMode/epollPwait2``, no timerfd:
/// the wait's own timeout). With nothing due the thread sleeps in `epoll_wait` indefinitely: no
/// idle wake-ups.
///
/// A wake-up costs the wait and at the most one re-arm: the timerfd is re-armed only when the
/// earliest deadline changed, once, just before the loop sleeps again, whatever the handlers of
/// that wake-up scheduled; it is registered edge-triggered and never read. A deadline that has
/// come by the time the loop would sleep again fires at once, with no re-arm and no wait (in
/// either mode). Another thread that moves the earliest deadline arms the timerfd itself (in
/// `epollPwait2` mode it writes the eventfd, and only when the loop sleeps past the new deadline).
///
/// If the loop stops on an error (an `epoll_wait` failure, a timerfd that cannot be
/// re-armed), the backend shuts down with the reason: `schedule` throws
/// `TimerError.loopFailed`, and `scheduler.failure` says what happened.
///
/// ```swift
/// let backend = try EpollBackend(options: .init(priority: .realtime(50)))
/// print(backend.obtainedPriority)   // "SCHED_FIFO 50", or the fallback and why
/// ```
public final class EpollBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: every stored property is set in init and never changes; what the loop and
    // `wake(at:)` share is in `state`, which guards itself.

    /// How the loop waits for its next deadline.
    public enum WaitMode: Sendable, Equatable, CustomStringConvertible {
        /// An absolute timerfd in the epoll set: deadlines to the nanosecond, as the kernel's
        /// timers keep them (no timer slack). A wake-up costs the wait and at the most one
        /// `timerfd_settime`.
        case timerfd
        /// No timerfd: `epoll_pwait2` (Linux 5.11 and later) waits until the deadline itself, so a
        /// wake-up costs one system call. The kernel may end such a wait late by the thread's
        /// timer slack or 0.1 % of the wait, whichever is more (100 µs for a 100 ms wait), so the
        /// loop thread's slack is 1 ns unless `Options.timerSlack` says otherwise.
        case epollPwait2

        public var description: String {
            switch self {
            case .timerfd: "timerfd"
            case .epollPwait2: "epoll_pwait2"
            }
        }
    }

    /// How the loop thread runs.
    public struct Options: Sendable {
        /// The loop thread's name (at most 15 characters are kept).
        public var threadName: String
        /// The priority to ask for; see `obtainedPriority` for what was granted.
        public var priority: ThreadPriority
        /// The loop thread's timer slack; nil keeps the kernel's default (50 µs), or 1 ns in
        /// `epollPwait2` mode, where the slack delays every deadline.
        public var timerSlack: Duration?
        /// How the loop waits: a timerfd (the default), or `epoll_pwait2`'s own timeout.
        public var waitMode: WaitMode

        /// Options with defaults: "TimerKit.epoll", normal priority, default slack, a timerfd.
        public init(
            threadName: String = "TimerKit.epoll", priority: ThreadPriority = .normal, timerSlack: Duration? = nil,
            waitMode: WaitMode = .timerfd
        ) {
            self.threadName = threadName
            self.priority = priority
            self.timerSlack = timerSlack
            self.waitMode = waitMode
        }
    }

    private static let timerToken: UInt64 = 1
    private static let stopToken: UInt64 = 2

    /// Whether this kernel has `epoll_pwait2` (Linux 5.11 and later), asked once: what
    /// ``WaitMode/epollPwait2`` needs.
    public static var supportsEpollPwait2: Bool { pwait2Unavailability == nil }

    /// Why `epoll_pwait2` cannot be used here, or nil when it can.
    package static var pwait2Unavailability: String? {
        let simulated = simulatedPwait2Errno.load(ordering: .relaxed)
        guard simulated == 0 else {
            return "epoll_pwait2 failed with errno \(simulated) (\(String(cString: strerror(simulated)))): it needs Linux 5.11 or later"
        }
        return probedPwait2
    }

    private static let probedPwait2: String? = {
        let fd = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard fd >= 0 else { return "epoll_create1 failed with errno \(errno)" }
        defer { close(fd) }
        var zero = timespec()
        var token: UInt64 = 0
        let rc = ctk_epoll_pwait2(fd, &token, 1, &zero)
        guard rc < 0 else { return nil }
        return "epoll_pwait2 failed with errno \(-rc) (\(String(cString: strerror(-rc)))): it needs Linux 5.11 or later"
    }()

    /// An errno for tests to make `epoll_pwait2` look missing (0: ask the kernel).
    package static let simulatedPwait2Errno = Atomic<Int32>(0)

    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    @_spi(BackendImplementation) public var unretainedScheduler: Unmanaged<TimerScheduler> { .passUnretained(scheduler) }
    /// The priority the loop thread got (it may differ from the one asked for).
    public let obtainedPriority: ObtainedPriority
    /// The loop thread's kernel thread id (for /proc/self/task/<id>/status, perf, chrt).
    public let loopThreadID: Int32
    /// How the loop waits for deadlines.
    public let waitMode: WaitMode
    private let state: EpollLoopState
    private let loop: OwnedLoop

    /// What the loop thread asked of the kernel, for tests and the bench.
    package var loopCounts: LoopCounts { state.counts }

    /// Creates the descriptors and starts the loop thread.
    /// - Throws: `TimerError.systemCall` naming the call and errno when a descriptor or the
    ///   thread cannot be created (e.g. `RLIMIT_NOFILE` reached); nothing is leaked.
    ///   `TimerError.invalidOption` for a priority out of range. `TimerError.unavailable` for
    ///   ``WaitMode/epollPwait2`` on a kernel without `epoll_pwait2`.
    public init(options: Options = Options(), registry: TimerRegistry = .shared) throws(TimerError) {
        try options.priority.validate()
        if let slack = options.timerSlack, slack < .zero {
            throw .negativeDuration(parameter: "timerSlack", value: slack)
        }
        if options.waitMode == .epollPwait2, let reason = Self.pwait2Unavailability {
            throw .unavailable(backend: "epoll", reason: reason)
        }
        waitMode = options.waitMode
        var opened: [Int32] = []
        func closeOpened() { for fd in opened { close(fd) } }
        func check(_ fd: Int32, _ call: String) throws(TimerError) -> Int32 {
            if fd < 0 {
                let error = errno
                closeOpened()
                throw .systemCall(call: call, errno: error)
            }
            opened.append(fd)
            return fd
        }
        let epollFD = try check(epoll_create1(Int32(EPOLL_CLOEXEC)), "epoll_create1")
        let timerFD =
            options.waitMode == .timerfd
            ? try check(timerfd_create(CLOCK_MONOTONIC, Int32(TFD_CLOEXEC | TFD_NONBLOCK)), "timerfd_create") : -1
        let eventFD = try check(eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK)), "eventfd")
        // Edge-triggered: an expiry (or a write) reports once, and nothing is read. A
        // timerfd_settime clears the expiry count, so the next expiry reports again.
        for (fd, token) in [(timerFD, EpollLoopState.timerToken), (eventFD, EpollLoopState.wakeToken)] where fd >= 0 {
            let rc = ctk_epoll_add(epollFD, fd, EPOLLIN.rawValue | EPOLLET.rawValue, token)
            if rc != 0 {
                closeOpened()
                throw .systemCall(call: "epoll_ctl", errno: -rc)
            }
        }

        let scheduler = TimerScheduler(backendName: "epoll", registry: registry)
        self.scheduler = scheduler
        let state = EpollLoopState(epollFD: epollFD, timerFD: timerFD, eventFD: eventFD)
        self.state = state
        let started = StartSignal<(ObtainedPriority, Int32, TimerError?)>()
        let slack = options.timerSlack ?? (options.waitMode == .epollPwait2 ? .nanoseconds(1) : nil)
        do throws(TimerError) {
            loop = try OwnedLoop(
                { loop in
                    state.loopThread.store(UInt(pthread_self()), ordering: .releasing)
                    nameCurrentThread(options.threadName)
                    var slackError: TimerError?
                    if let slack {
                        do throws(TimerError) { try applyTimerSlack(slack) } catch { slackError = error }
                    }
                    started.send((options.priority.applyToCurrentThread(), ctk_gettid(), slackError))
                    do throws(TimerError) {
                        if timerFD >= 0 {
                            try state.runWithTimerFD(loop, firing: scheduler)
                        } else {
                            try state.runWithPwait2(loop, firing: scheduler)
                        }
                    } catch {
                        scheduler.fail(with: error)  // the descriptors stay open until shutdown()
                    }
                },
                release: {
                    close(eventFD)
                    if timerFD >= 0 { close(timerFD) }
                    close(epollFD)
                })
        } catch {
            closeOpened()
            throw error
        }
        let (priority, threadID, slackError) = started.receive() ?? (ObtainedPriority(priority: .normal, fallbackReason: nil), 0, nil)
        obtainedPriority = priority
        loopThreadID = threadID
        scheduler.attach(owning: state)
        if let slackError {
            shutdown()
            throw slackError
        }
    }

    deinit { shutdown() }

    /// Cancels every timer, stops and joins the loop thread and closes the descriptors.
    /// Called from one of this backend's handlers it cannot join its own thread: the loop
    /// then ends, and closes its descriptors, as soon as that handler returns.
    public func shutdown() {
        scheduler.shutdown()
        let state = self.state
        loop.stop { state.signal() }
    }
}

/// What the loop thread and `wake(at:)` share, and the scheduler's driver. Kept apart from the
/// backend so that the loop never holds the backend (a backend dropped inside one of its own
/// handlers goes while its loop still runs), and holding no scheduler, so that the scheduler
/// owns it (`attach(owning:)`) without a cycle: a weakly held driver would cost the runtime's
/// slow reference counting on every wake-up request.
private final class EpollLoopState: TimerDriver, @unchecked Sendable {
    // @unchecked: the descriptors never change; `armed` is guarded by `armLock`; `requested`,
    // `gate`, `counts` and `loopThread` guard themselves.
    static let timerToken: UInt64 = 1
    static let wakeToken: UInt64 = 2

    let epollFD: Int32
    /// -1 in epollPwait2 mode.
    let timerFD: Int32
    let eventFD: Int32
    let counts = LoopCounts()
    let loopThread = Atomic<UInt>(0)
    private let armLock = FutexLock()
    /// The scheduler's latest request and what the timerfd is armed for (`.max`: disarmed or
    /// spent), in timerfd mode. The request is an atomic so that the loop's own thread records
    /// one without the lock (its handlers' re-queues: one a fire); another thread's request, and
    /// the loop applying one, take the lock.
    private let requested = WakeRequest()
    private var armed: UInt64 = .max
    /// The same for epollPwait2 mode, with whether the loop sleeps and until when.
    private let gate = SleepGate()

    init(epollFD: Int32, timerFD: Int32, eventFD: Int32) {
        (self.epollFD, self.timerFD, self.eventFD) = (epollFD, timerFD, eventFD)
    }

    /// From the loop's own thread (its handlers, the scheduler's re-queues) the request is
    /// recorded, and the loop applies the last one before it sleeps: one re-arm per wake-up at
    /// the most. From another thread, timerfd mode arms the timerfd at once (the scheduler's
    /// lock orders the calls, so the last request wins); epollPwait2 mode wakes the loop if it
    /// sleeps past the deadline.
    func wake(at deadline: MonotonicInstant) throws(TimerError) {
        try request(deadline == .distantFuture ? .max : deadline.nanoseconds)
    }

    /// Wakes the loop from its wait.
    func signal() {
        var one: UInt64 = 1
        _ = write(eventFD, &one, 8)  // EAGAIN only if the counter is saturated: already signalled
    }

    func request(_ key: UInt64) throws(TimerError) {
        guard timerFD >= 0 else {
            if gate.request(key, fromLoop: loopThread.load(ordering: .relaxed) == UInt(pthread_self())) { signal() }
            return
        }
        if loopThread.load(ordering: .relaxed) == UInt(pthread_self()) {
            // The loop applies it before it sleeps (`applyRequest`), on this thread.
            requested.record(key)
            return
        }
        armLock.lock()
        defer { armLock.unlock() }
        requested.record(key)
        guard key != armed else { return }
        try armTimerFD(timerFD, at: key == .max ? .distantFuture : MonotonicInstant(nanoseconds: key))
        armed = key
    }

    /// timerfd mode: sleep in `epoll_wait`; before each sleep, arm the timerfd for the
    /// scheduler's latest request if it is not armed for that already.
    func runWithTimerFD(_ loop: OwnedLoop, firing scheduler: TimerScheduler) throws(TimerError) {
        var tokens = [UInt64](repeating: 0, count: 2)
        var expired = false
        while !loop.isStopping {
            let due = try applyRequest(timerExpired: expired)
            expired = false
            if due {
                counts.countFireCall()
                scheduler.fireDueTimers()
                continue
            }
            let ready = try retryingInterrupts("epoll_wait") {
                Int(tokens.withUnsafeMutableBufferPointer { ctk_epoll_wait(epollFD, $0.baseAddress, 2, -1) })
            }
            counts.countWait()
            // A write of the eventfd only ends the wait: the loop condition sees a stop request.
            guard tokens.prefix(ready).contains(Self.timerToken) else { continue }
            // The expiry spent the timerfd (or another thread re-armed it since): the next
            // `applyRequest` counts it disarmed. Until then the loop is awake, and it arms the
            // timerfd for any request before it sleeps.
            expired = true
            requested.useUp()
            counts.countFireCall()
            scheduler.fireDueTimers()
        }
    }

    /// Arms the timerfd for the scheduler's latest request, unless it is armed for it already;
    /// returns whether that request has come already. Then nothing is armed and the request is
    /// used up (the fire asks again for what it needs): the loop fires at once rather than arm a
    /// timer that expires as it is set (in a virtual machine, the costliest system call of a
    /// wake-up) and wait for it.
    /// `timerExpired`: the timerfd expired since the last call (it is no longer armed).
    private func applyRequest(timerExpired: Bool) throws(TimerError) -> Bool {
        let now = MonotonicInstant.now().nanoseconds
        armLock.lock()
        defer { armLock.unlock() }
        if timerExpired { armed = .max }
        let wanted = requested.current
        if wanted <= now {
            requested.useUp()
            return true
        }
        guard wanted != armed else { return false }
        try armTimerFD(timerFD, at: wanted == .max ? .distantFuture : MonotonicInstant(nanoseconds: wanted))
        armed = wanted
        counts.countRearm()
        return false
    }

    /// epollPwait2 mode: sleep in `epoll_pwait2` until the scheduler's latest request; another
    /// thread with an earlier one writes the eventfd.
    func runWithPwait2(_ loop: OwnedLoop, firing scheduler: TimerScheduler) throws(TimerError) {
        var tokens = [UInt64](repeating: 0, count: 2)
        while !loop.isStopping {
            let now = MonotonicInstant.now().nanoseconds
            guard let deadline = gate.goingToSleep(unlessDueBy: now) else {
                counts.countFireCall()
                scheduler.fireDueTimers()  // come already: no wait
                continue
            }
            let ready = try retryingInterrupts("epoll_pwait2") {
                tokens.withUnsafeMutableBufferPointer { buffer in
                    guard deadline != .max else { return Int(ctk_epoll_pwait2(epollFD, buffer.baseAddress, 2, nil)) }
                    var timeout = kernelWait(until: deadline, now: now)
                    return Int(ctk_epoll_pwait2(epollFD, buffer.baseAddress, 2, &timeout))
                }
            }
            counts.countWait()
            gate.awake()
            // A write of the eventfd asks for a new wait (an earlier deadline, a stop); the
            // timers are due only once the deadline has come.
            if ready == 0 || (deadline != .max && MonotonicInstant.now().nanoseconds >= deadline) {
                gate.useUp()
                counts.countFireCall()
                scheduler.fireDueTimers()
            }
        }
    }
}
