import CTimerShims
import Glibc
import Synchronization
import TimerKit

/// A backend on Linux's timerfd and epoll: one loop thread, one epoll instance, ONE
/// absolute CLOCK_MONOTONIC timerfd for all timers (re-armed only when the earliest
/// deadline changes) and one eventfd through which other threads ask the loop to re-arm.
/// With nothing due the thread sleeps in `epoll_wait` indefinitely: no idle wake-ups.
///
/// ```swift
/// let backend = try EpollBackend(options: .init(priority: .realtime(50)))
/// print(backend.obtainedPriority)   // "SCHED_FIFO 50", or the fallback and why
/// ```
public final class EpollBackend: TimerBackend, TimerDriver, @unchecked Sendable {
    // @unchecked: the descriptors and `thread` are set in init and never change; the loop
    // state they share is in `LoopControl`, which is atomic.

    /// How the loop thread runs.
    public struct Options: Sendable {
        /// The loop thread's name (at most 15 characters are kept).
        public var threadName: String
        /// The priority to ask for; see `obtainedPriority` for what was granted.
        public var priority: ThreadPriority
        /// The loop thread's timer slack; nil keeps the kernel's default (50 µs).
        public var timerSlack: Duration?

        /// Options with defaults: "TimerKit.epoll", normal priority, default slack.
        public init(threadName: String = "TimerKit.epoll", priority: ThreadPriority = .normal, timerSlack: Duration? = nil) {
            self.threadName = threadName
            self.priority = priority
            self.timerSlack = timerSlack
        }
    }

    /// State shared by the loop thread and the threads that wake it.
    private final class LoopControl: Sendable {
        let wakePending = Atomic<Bool>(false)
        let stopping = Atomic<Bool>(false)
        let loopThread = Atomic<UInt>(0)
    }

    private static let timerToken: UInt64 = 1
    private static let wakeToken: UInt64 = 2

    /// The core scheduler.
    public let scheduler: TimerScheduler
    /// The priority the loop thread got (it may differ from the one asked for).
    public let obtainedPriority: ObtainedPriority
    /// The loop thread's kernel thread id (for /proc/self/task/<id>/status, perf, chrt).
    public let loopThreadID: Int32
    private let epollFD: Int32
    private let timerFD: Int32
    private let eventFD: Int32
    private let control = LoopControl()
    private let thread: LoopThread
    private let shutdownOnce = OnceFlag()

    /// Creates the descriptors and starts the loop thread.
    /// - Throws: `TimerError.systemCall` naming the call and errno when a descriptor or the
    ///   thread cannot be created (e.g. `RLIMIT_NOFILE` reached); nothing is leaked.
    ///   `TimerError.invalidOption` for a priority out of range.
    public init(options: Options = Options(), registry: TimerRegistry = .shared) throws(TimerError) {
        try options.priority.validate()
        if let slack = options.timerSlack, slack < .zero {
            throw .negativeDuration(parameter: "timerSlack", value: slack)
        }
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
        epollFD = try check(epoll_create1(Int32(EPOLL_CLOEXEC)), "epoll_create1")
        timerFD = try check(timerfd_create(CLOCK_MONOTONIC, Int32(TFD_CLOEXEC | TFD_NONBLOCK)), "timerfd_create")
        eventFD = try check(eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK)), "eventfd")
        for (fd, token) in [(timerFD, Self.timerToken), (eventFD, Self.wakeToken)] {
            let rc = ctk_epoll_add(epollFD, fd, EPOLLIN.rawValue, token)
            if rc != 0 {
                closeOpened()
                throw .systemCall(call: "epoll_ctl", errno: -rc)
            }
        }

        let scheduler = TimerScheduler(backendName: "epoll", registry: registry)
        self.scheduler = scheduler
        let started = StartSignal<(ObtainedPriority, Int32, TimerError?)>()
        let (epollFD, timerFD, eventFD, control) = (self.epollFD, self.timerFD, self.eventFD, self.control)
        do throws(TimerError) {
            thread = try LoopThread {
                control.loopThread.store(UInt(pthread_self()), ordering: .releasing)
                nameCurrentThread(options.threadName)
                var slackError: TimerError?
                if let slack = options.timerSlack {
                    do throws(TimerError) { try applyTimerSlack(slack) } catch { slackError = error }
                }
                started.send((applyPriority(options.priority), ctk_gettid(), slackError))
                Self.runLoop(epollFD: epollFD, timerFD: timerFD, eventFD: eventFD, control: control, scheduler: scheduler)
                close(eventFD)
                close(timerFD)
                close(epollFD)
            }
        } catch {
            closeOpened()
            throw error
        }
        let (priority, threadID, slackError) = started.receive() ?? (ObtainedPriority(priority: .normal, fallbackReason: nil), 0, nil)
        obtainedPriority = priority
        loopThreadID = threadID
        scheduler.attach(self)
        if let slackError {
            shutdown()
            throw slackError
        }
    }

    deinit { shutdown() }

    // MARK: TimerDriver

    public func wake(at deadline: MonotonicInstant) throws(TimerError) {
        if control.loopThread.load(ordering: .acquiring) == UInt(pthread_self()) {
            Self.arm(timerFD, deadline)
        } else if !control.wakePending.exchange(true, ordering: .acquiringAndReleasing) {
            // The loop re-reads the earliest deadline itself; one pending wake covers any
            // number of requests.
            Self.signal(eventFD)
        }
    }

    /// Cancels every timer, stops and joins the loop thread and closes the descriptors.
    /// Called from one of this backend's handlers it cannot join its own thread: the loop
    /// then ends, and closes its descriptors, as soon as that handler returns.
    public func shutdown() {
        guard shutdownOnce.claim() else { return }
        scheduler.shutdown()
        control.stopping.store(true, ordering: .releasing)
        Self.signal(eventFD)
        if thread.isCurrent { thread.detach() } else { thread.join() }
    }

    // MARK: The loop

    private static func runLoop(epollFD: Int32, timerFD: Int32, eventFD: Int32, control: LoopControl, scheduler: TimerScheduler) {
        var tokens = [UInt64](repeating: 0, count: 4)
        var scratch: UInt64 = 0
        while !control.stopping.load(ordering: .acquiring) {
            let ready = tokens.withUnsafeMutableBufferPointer { ctk_epoll_wait(epollFD, $0.baseAddress, 4, -1) }
            if ready == -EINTR { continue }
            if ready < 0 { break }   // EBADF/EINVAL cannot happen while we own the descriptor
            for index in 0..<Int(ready) {
                switch tokens[index] {
                case timerToken:
                    _ = read(timerFD, &scratch, 8)   // expiry count; EAGAIN after a re-arm is fine
                    scheduler.fireDueTimers()
                case wakeToken:
                    _ = read(eventFD, &scratch, 8)
                    // Clear the flag before reading the deadline, so a request made after this
                    // point writes the eventfd again instead of being lost.
                    control.wakePending.store(false, ordering: .releasing)
                    if control.stopping.load(ordering: .acquiring) { return }
                    arm(timerFD, scheduler.earliestDeadline ?? .distantFuture)
                default:
                    break
                }
            }
        }
    }

    private static func arm(_ timerFD: Int32, _ deadline: MonotonicInstant) {
        var spec = itimerspec()
        if deadline != .distantFuture {
            // 0 would disarm: a deadline at the clock's origin is "now", 1 ns will do.
            let ns = max(deadline.nanoseconds, 1)
            spec.it_value = timespecOf(nanoseconds: ns)
        }
        _ = timerfd_settime(timerFD, Int32(TFD_TIMER_ABSTIME), &spec, nil)
    }

    private static func signal(_ eventFD: Int32) {
        var one: UInt64 = 1
        _ = write(eventFD, &one, 8)   // EAGAIN only if the counter is saturated: already signalled
    }
}
