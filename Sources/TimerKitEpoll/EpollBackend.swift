internal import CTimerShims
import Glibc
import Synchronization
@_spi(BackendImplementation) import TimerKit

/// A backend on Linux's timerfd and epoll: one loop thread, one epoll instance, ONE
/// absolute CLOCK_MONOTONIC timerfd for all timers (re-armed only when the earliest
/// deadline changes, from whichever thread changed it) and one eventfd that wakes the loop
/// to stop. With nothing due the thread sleeps in `epoll_wait` indefinitely: no idle
/// wake-ups.
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
    // @unchecked: the descriptors and `loop` are set in init and never change; the kernel
    // makes timerfd_settime and eventfd writes from several threads safe, and `wake` is
    // serialised by the scheduler's lock.

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

    private static let timerToken: UInt64 = 1
    private static let stopToken: UInt64 = 2

    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    /// The priority the loop thread got (it may differ from the one asked for).
    public let obtainedPriority: ObtainedPriority
    /// The loop thread's kernel thread id (for /proc/self/task/<id>/status, perf, chrt).
    public let loopThreadID: Int32
    private let epollFD: Int32
    private let timerFD: Int32
    private let eventFD: Int32
    private let loop: OwnedLoop

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
        for (fd, token) in [(timerFD, Self.timerToken), (eventFD, Self.stopToken)] {
            let rc = ctk_epoll_add(epollFD, fd, EPOLLIN.rawValue, token)
            if rc != 0 {
                closeOpened()
                throw .systemCall(call: "epoll_ctl", errno: -rc)
            }
        }

        let scheduler = TimerScheduler(backendName: "epoll", registry: registry)
        self.scheduler = scheduler
        let started = StartSignal<(ObtainedPriority, Int32, TimerError?)>()
        let (epollFD, timerFD, eventFD) = (self.epollFD, self.timerFD, self.eventFD)
        do throws(TimerError) {
            loop = try OwnedLoop(
                { loop in
                    nameCurrentThread(options.threadName)
                    var slackError: TimerError?
                    if let slack = options.timerSlack {
                        do throws(TimerError) { try applyTimerSlack(slack) } catch { slackError = error }
                    }
                    started.send((options.priority.applyToCurrentThread(), ctk_gettid(), slackError))
                    do throws(TimerError) {
                        try Self.run(loop, epollFD: epollFD, timerFD: timerFD, scheduler: scheduler)
                    } catch {
                        scheduler.fail(with: error)  // the descriptors stay open until shutdown()
                    }
                },
                release: {
                    close(eventFD)
                    close(timerFD)
                    close(epollFD)
                })
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

    /// Cancels every timer, stops and joins the loop thread and closes the descriptors.
    /// Called from one of this backend's handlers it cannot join its own thread: the loop
    /// then ends, and closes its descriptors, as soon as that handler returns.
    public func shutdown() {
        scheduler.shutdown()
        let eventFD = self.eventFD
        loop.stop {
            var one: UInt64 = 1
            _ = write(eventFD, &one, 8)  // EAGAIN only if the counter is saturated: already signalled
        }
    }

    // MARK: The loop

    private static func run(_ loop: OwnedLoop, epollFD: Int32, timerFD: Int32, scheduler: TimerScheduler) throws(TimerError) {
        var tokens = [UInt64](repeating: 0, count: 4)
        var scratch: UInt64 = 0
        while !loop.isStopping {
            let ready = try retryingInterrupts("epoll_wait") {
                Int(tokens.withUnsafeMutableBufferPointer { ctk_epoll_wait(epollFD, $0.baseAddress, 4, -1) })
            }
            for token in tokens.prefix(ready) where token == timerToken {
                // The expiry count is not needed; EAGAIN means another thread re-armed the
                // timerfd since it fired, which the scheduler handles like any early wake.
                _ = read(timerFD, &scratch, 8)
                scheduler.fireDueTimers()
            }
            // The stop token needs no handling: the loop condition sees the stop request.
        }
    }
}

@_spi(BackendImplementation) extension EpollBackend: TimerDriver {
    /// Arms the timerfd directly, from any thread: the scheduler's lock orders the calls, so
    /// the last request wins, and no round trip through the loop is needed.
    public func wake(at deadline: MonotonicInstant) throws(TimerError) {
        try armTimerFD(timerFD, at: deadline)
    }
}
