internal import CLibURing
internal import CTimerShims
import Glibc
import Synchronization
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll

/// A backend on Linux's io_uring: one loop thread, one ring, one timeout. The loop sleeps in one
/// `io_uring_enter` that both submits what changed (the timeout moved to the earliest deadline,
/// an eventfd read queued again) and waits: a wake-up costs that one system call. The deadline is
/// an `IORING_OP_TIMEOUT` at an absolute `CLOCK_MONOTONIC` time, moved in place with
/// `IORING_TIMEOUT_UPDATE` (never removed and added again) and only when the earliest deadline
/// changed. Timers on the continuous and wall clocks have a timeout of their own on each clock
/// (`IORING_TIMEOUT_BOOTTIME`, `IORING_TIMEOUT_REALTIME`), at their deadlines as those clocks
/// read them: never converted to the monotonic clock. A deadline that has come by the time the
/// loop would sleep again fires at once, with no system call. With nothing due the loop sleeps
/// with no timeout armed: no idle wake-ups.
///
/// Another thread that moves the earliest deadline earlier than the loop sleeps until writes an
/// eventfd whose read stays queued on the ring; otherwise it only records the request, which the
/// loop reads before it sleeps.
///
/// io_uring may be missing or refused: a kernel before 5.17 (the loop needs
/// `IORING_FEAT_CQE_SKIP`), `/proc/sys/kernel/io_uring_disabled`, a seccomp filter (most container
/// runtimes' default). Then `init` throws `TimerError.unavailable` naming the reason, before any
/// thread starts; ``unavailableReason`` says so without making a backend.
///
/// ```swift
/// let backend = try IOURingBackend()
/// let timer = try backend.schedule(.every(.milliseconds(10))) { tick in sample() }
/// ```
public final class IOURingBackend: TimerBackend, @unchecked Sendable {
    // @unchecked: every stored property is set in init and never changes; what the loop and
    // `wake(at:)` share is in `state`, which guards itself.

    /// How the loop thread runs.
    public struct Options: Sendable {
        /// The loop thread's name (at most 15 characters are kept).
        public var threadName: String
        /// The priority to ask for; see `obtainedPriority` for what was granted.
        public var priority: ThreadPriority
        /// The loop thread's timer slack; nil keeps the kernel's default. io_uring's timeouts
        /// are kernel timers without slack, so it matters only to the handlers' own sleeps.
        public var timerSlack: Duration?

        /// Options with defaults: "TimerKit.uring", normal priority, default slack.
        public init(threadName: String = "TimerKit.uring", priority: ThreadPriority = .normal, timerSlack: Duration? = nil) {
            self.threadName = threadName
            self.priority = priority
            self.timerSlack = timerSlack
        }
    }

    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    @_spi(BackendImplementation) public var unretainedScheduler: Unmanaged<TimerScheduler> { .passUnretained(scheduler) }
    /// The priority the loop thread got (it may differ from the one asked for).
    public let obtainedPriority: ObtainedPriority
    /// The loop thread's kernel thread id (for /proc/self/task/<id>/status, perf, chrt).
    public let loopThreadID: Int32
    private let state: URingLoopState
    private let loop: OwnedLoop

    /// What the loop thread asked of the kernel, for tests and the bench.
    package var loopCounts: LoopCounts { state.counts }

    /// An errno for tests to make `io_uring_setup` fail with, as on a machine without io_uring
    /// (0: ask the kernel).
    package static let simulatedSetupErrno = Atomic<Int32>(0)

    /// Why io_uring cannot run a backend in this process, or nil when it can: asked once, by
    /// setting up (and closing) a ring as `init` does.
    public static var unavailableReason: String? {
        switch URing.setUp() {
        case .success(let ring):
            ring.close()
            return nil
        case .failure(let error):
            guard case let .unavailable(_, reason) = error else { return error.description }
            return reason
        }
    }

    /// Sets up the ring and the eventfd and starts the loop thread.
    /// - Throws: `TimerError.unavailable` when io_uring cannot be used here (the reason names
    ///   the errno and, for `EPERM`, what `/proc/sys/kernel/io_uring_disabled` says);
    ///   `TimerError.systemCall` naming the call and errno when the ring, the eventfd or the
    ///   thread cannot be created (e.g. `RLIMIT_NOFILE` or `RLIMIT_MEMLOCK` reached); nothing
    ///   is leaked. `TimerError.invalidOption` for a priority out of range.
    public init(options: Options = Options(), registry: TimerRegistry = .shared) throws(TimerError) {
        try options.priority.validate()
        if let slack = options.timerSlack, slack < .zero {
            throw .negativeDuration(parameter: "timerSlack", value: slack)
        }
        let ring = try URing.setUp().get()
        // Blocking: io_uring waits for a blocking file's data; it would fail a read of a
        // non-blocking one with EAGAIN instead.
        let eventFD = eventfd(0, Int32(EFD_CLOEXEC))
        guard eventFD >= 0 else {
            let code = errno
            ring.close()
            throw .systemCall(call: "eventfd", errno: code)
        }
        let scheduler = TimerScheduler(backendName: "io_uring", registry: registry)
        self.scheduler = scheduler
        let state = URingLoopState(ring: ring, eventFD: eventFD)
        self.state = state
        let started = StartSignal<(ObtainedPriority, Int32, TimerError?)>()
        do throws(TimerError) {
            loop = try OwnedLoop(
                { loop in
                    state.loopThread.store(UInt(pthread_self()), ordering: .releasing)
                    nameCurrentThread(options.threadName)
                    var startError: TimerError?
                    if let slack = options.timerSlack {
                        do throws(TimerError) { try applyTimerSlack(slack) } catch { startError = error }
                    }
                    // A ring made for one issuer takes its submissions from this thread only.
                    if startError == nil, let failure = ring.enable() { startError = failure }
                    // Each io_uring_enter then skips looking the ring's descriptor up (Linux 5.18
                    // and later; without it, the descriptor is used as it is).
                    if startError == nil { _ = io_uring_register_ring_fd(ring.ring) }
                    started.send((options.priority.applyToCurrentThread(), ctk_gettid(), startError))
                    guard startError == nil else { return }
                    do throws(TimerError) { try state.run(loop, firing: scheduler) } catch {
                        scheduler.fail(with: error)  // the ring and eventfd stay open until shutdown()
                    }
                    // On the thread that registered it: `close()` may run on another.
                    _ = io_uring_unregister_ring_fd(ring.ring)
                },
                release: { state.close() })
        } catch {
            state.close()
            throw error
        }
        let (priority, threadID, startError) = started.receive() ?? (ObtainedPriority(priority: .normal, fallbackReason: nil), 0, nil)
        obtainedPriority = priority
        loopThreadID = threadID
        scheduler.attach(owning: state)
        if let startError {
            shutdown()
            throw startError
        }
    }

    deinit { shutdown() }

    /// Cancels every timer, stops and joins the loop thread and closes the ring and eventfd.
    /// Called from one of this backend's handlers it cannot join its own thread: the loop then
    /// ends, and closes them, as soon as that handler returns.
    public func shutdown() {
        scheduler.shutdown()
        let state = self.state
        loop.stop { state.signal() }
    }
}

/// A set-up ring, owned by whoever holds this value until `close()`.
struct URing: @unchecked Sendable {
    // @unchecked: the ring is used by one thread at a time: the one that sets it up, then the
    // loop thread (which `enable()` makes its only submitter), then the one that closes it.
    let ring: UnsafeMutablePointer<io_uring>
    /// Made for one issuer and disabled: `enable()` on the loop thread makes it the submitter.
    let startsDisabled: Bool

    /// Sets a ring up: for one issuer with task work deferred to its waits where the kernel
    /// has those (6.1 and later), a plain ring where not.
    static func setUp() -> Result<URing, TimerError> {
        let simulated = IOURingBackend.simulatedSetupErrno.load(ordering: .relaxed)
        if simulated != 0 { return .failure(.unavailable(backend: "io_uring", reason: unavailability(errno: simulated))) }
        let ring = UnsafeMutablePointer<io_uring>.allocate(capacity: 1)
        ring.initialize(to: io_uring())
        var result: Int32 = 0
        var disabled = false
        let preferred = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED
        for flags in [UInt32(preferred), 0] {
            var parameters = io_uring_params()
            parameters.flags = flags
            result = io_uring_queue_init_params(8, ring, &parameters)
            if result == 0 {
                disabled = flags != 0
                break
            }
            if result != -EINVAL { break }
        }
        guard result == 0 else {
            ring.deallocate()
            let code = -result
            if code == ENOSYS || code == EPERM || code == EACCES {
                return .failure(.unavailable(backend: "io_uring", reason: unavailability(errno: code)))
            }
            return .failure(.systemCall(call: "io_uring_setup", errno: code))
        }
        let uring = URing(ring: ring, startsDisabled: disabled)
        // Moving the timeout without a completion of its own needs IOSQE_CQE_SKIP_SUCCESS.
        guard ring.pointee.features & UInt32(IORING_FEAT_CQE_SKIP) != 0 else {
            uring.close()
            return .failure(
                .unavailable(
                    backend: "io_uring", reason: "this kernel's io_uring lacks IORING_FEAT_CQE_SKIP (Linux 5.17 and later have it)"))
        }
        return .success(uring)
    }

    /// Why `io_uring_setup` failing with `code` means io_uring cannot be used here.
    static func unavailability(errno code: Int32) -> String {
        let call = "io_uring_setup failed with errno \(code) (\(String(cString: strerror(code))))"
        if code == ENOSYS { return call + ": this kernel has no io_uring" }
        switch disabledSetting() {
        case "2": return call + ": io_uring is disabled (/proc/sys/kernel/io_uring_disabled is 2)"
        case "1":
            return call + ": io_uring is limited to the group in /proc/sys/kernel/io_uring_group (/proc/sys/kernel/io_uring_disabled is 1)"
        case let setting:
            return call + ": a seccomp filter or sandbox forbids it (/proc/sys/kernel/io_uring_disabled is \(setting ?? "absent"))"
        }
    }

    /// The value of /proc/sys/kernel/io_uring_disabled (Linux 6.6 and later), or nil.
    static func disabledSetting() -> String? {
        guard let file = fopen("/proc/sys/kernel/io_uring_disabled", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 16)
        guard fgets(&buffer, 16, file) != nil else { return nil }
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return String(text.filter { !$0.isWhitespace })
    }

    /// Makes the calling thread the ring's submitter; nil, or the error.
    func enable() -> TimerError? {
        guard startsDisabled else { return nil }
        // io_uring_enable_rings is declared by liburing 2.3's header but not exported by its
        // library: the registration it wraps is.
        let rc = io_uring_register(UInt32(ring.pointee.ring_fd), UInt32(IORING_REGISTER_ENABLE_RINGS), nil, 0)
        return rc < 0 ? .systemCall(call: "io_uring_register(IORING_REGISTER_ENABLE_RINGS)", errno: -rc) : nil
    }

    func close() {
        io_uring_queue_exit(ring)
        ring.deinitialize(count: 1)
        ring.deallocate()
    }
}

/// What the loop thread and `wake(at:)` share, and the scheduler's driver. Kept apart from the
/// backend so that the loop never holds the backend (a backend dropped inside one of its own
/// handlers goes while its loop still runs), and holding no scheduler, so that the scheduler
/// owns it (`attach(owning:)`) without a cycle: a weakly held driver would cost the runtime's
/// slow reference counting on every wake-up request.
///
/// Each clock has a timeout of its own on the ring: the monotonic queue's on `CLOCK_MONOTONIC`,
/// the continuous and wall queues' on `CLOCK_BOOTTIME` and `CLOCK_REALTIME`
/// (`OwnClockTimerDriver`), so the kernel keeps those deadlines through a suspend or a step of
/// the wall clock.
private final class URingLoopState: OwnClockTimerDriver, @unchecked Sendable {
    // @unchecked: `ring`, `eventFD` and the buffers never change; the ring and the
    // buffers are touched by the loop thread only (after init, before close); `gate`,
    // `continuousRequest`, `wallRequest`, `counts` and `loopThread` guard themselves.
    private static let readTag: UInt64 = 3

    let ring: URing
    let eventFD: Int32
    let counts = LoopCounts()
    let loopThread = Atomic<UInt>(0)
    private let gate = SleepGate()
    /// The scheduler's latest requests on the continuous and wall clocks, in their own
    /// nanoseconds (`.max`: none). Read by the loop before it sleeps.
    private let continuousRequest = Atomic<UInt64>(.max)
    private let wallRequest = Atomic<UInt64>(.max)
    /// The eventfd read's buffer and the timeouts' times (monotonic, continuous, wall): the
    /// kernel reads and writes them after the call that queued them returns.
    private let readBuffer = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
    private let times = UnsafeMutablePointer<__kernel_timespec>.allocate(capacity: 3)

    init(ring: URing, eventFD: Int32) {
        (self.ring, self.eventFD) = (ring, eventFD)
        readBuffer.initialize(to: 0)
        times.initialize(repeating: __kernel_timespec(), count: 3)
    }

    /// Frees the ring (which cancels what is queued on it), the eventfd and the buffers. Runs
    /// once, when the loop can no longer touch them.
    func close() {
        ring.close()
        Glibc.close(eventFD)
        readBuffer.deallocate()
        times.deallocate()
    }

    /// Wakes the loop from its wait.
    func signal() {
        var one: UInt64 = 1
        _ = write(eventFD, &one, 8)
    }

    /// Records the request; the loop moves its timeout to the last one before it sleeps. From
    /// another thread, a request earlier than the loop sleeps until also wakes it (an eventfd
    /// write, the read of which is queued on the ring).
    func wake(at deadline: MonotonicInstant) {
        let key = deadline == .distantFuture ? UInt64.max : deadline.nanoseconds
        if gate.request(key, fromLoop: loopThread.load(ordering: .relaxed) == UInt(pthread_self())) { signal() }
    }

    /// Records the request on `clock`. Another thread's request that is not later than the one
    /// before also wakes the loop, which may have read that one and be going to sleep with it:
    /// an earlier deadline, or the same one asked again after a step of the clock, which the
    /// loop converts again. (Both are rare: a timer on those clocks that becomes its clock's
    /// earliest, a step.)
    func wake(on clock: DeadlineClock, at nanoseconds: UInt64) {
        let previous =
            clock == .wall
            ? wallRequest.exchange(nanoseconds, ordering: .sequentiallyConsistent)
            : continuousRequest.exchange(nanoseconds, ordering: .sequentiallyConsistent)
        if nanoseconds != .max, nanoseconds <= previous, loopThread.load(ordering: .relaxed) != UInt(pthread_self()) { signal() }
    }

    /// The kernel's reading of `clock` at which `request` (in that clock's nanoseconds as the
    /// core reads them) comes: the wall clock's as the core reads it may carry a test's skew,
    /// which the kernel's does not.
    private static func kernelTime(_ request: UInt64, on clock: DeadlineClock) -> UInt64 {
        guard clock == .wall, request != .max else { return request }
        let skew = DeadlineClock.wallSkewForTests.load(ordering: .relaxed)
        return skew >= 0 ? (request > UInt64(skew) ? request - UInt64(skew) : 0) : request.saturatingAdd(skew.magnitude)
    }

    /// Sleeps in `io_uring_enter` until a completion: a timeout's (timers are due) or the
    /// eventfd read's (another thread's earlier deadline, a stop).
    func run(_ loop: OwnedLoop, firing scheduler: TimerScheduler) throws(TimerError) {
        let ring = self.ring.ring
        var monotonic = RingTimeout(clock: .monotonic, time: times)
        var continuous = RingTimeout(clock: .continuous, time: times + 1)
        var wall = RingTimeout(clock: .wall, time: times + 2)
        var readQueued = false
        while !loop.isStopping {
            guard let deadline = gate.goingToSleep(unlessDueBy: MonotonicInstant.now().nanoseconds) else {
                // Come already: fired at once, rather than move the timeout to a time that has
                // passed and wait for it.
                counts.countFireCall()
                scheduler.fireDueTimers()
                continue
            }
            if try monotonic.move(to: deadline, on: ring) { counts.countRearm() }
            let continuousDeadline = continuousRequest.load(ordering: .sequentiallyConsistent)
            if try continuous.move(to: continuousDeadline, on: ring) { counts.countRearm(on: .continuous) }
            let wallDeadline = Self.kernelTime(wallRequest.load(ordering: .sequentiallyConsistent), on: .wall)
            if try wall.move(to: wallDeadline, on: ring) { counts.countRearm(on: .wall) }
            if !readQueued {
                guard let entry = io_uring_get_sqe(ring) else { throw .nativeFailure(backend: "io_uring", call: "io_uring_get_sqe") }
                io_uring_prep_read(entry, eventFD, readBuffer, 8, 0)
                io_uring_sqe_set_data64(entry, Self.readTag)
                readQueued = true
            }
            try retryingInterrupts("io_uring_enter") { Int(io_uring_submit_and_wait(ring, 1)) }
            counts.countWait()
            gate.awake()
            var expired = false
            var completion: UnsafeMutablePointer<io_uring_cqe>?
            while __io_uring_peek_cqe(ring, &completion, nil) == 0, let cqe = completion {
                let (tag, result) = (cqe.pointee.user_data, cqe.pointee.res)
                io_uring_cqe_seen(ring, cqe)
                if tag == Self.readTag {
                    readQueued = false
                    guard result >= 0 || result == -ECANCELED else { throw .systemCall(call: "io_uring read(eventfd)", errno: -result) }
                    continue
                }
                guard let clock = RingTimeout.clock(of: tag) else { continue }
                if RingTimeout.isUpdate(tag) {
                    // The timeout expired before the move reached it: its own completion says so.
                    guard result == -ENOENT || result == -EALREADY else {
                        throw .systemCall(call: "io_uring timeout update", errno: -result)
                    }
                    continue
                }
                // -ETIME: it expired. Either way it is gone: the next deadline adds one. (The
                // continuous and wall requests stand: see `OwnClockTimerDriver`.)
                switch clock {
                case .monotonic: monotonic.ended()
                case .continuous: continuous.ended()
                case .wall: wall.ended()
                }
                expired = expired || result == -ETIME
            }
            if expired {
                gate.useUp()
                counts.countFireCall()
                scheduler.fireDueTimers()
            }
        }
    }
}

/// One clock's timeout on the ring, as the loop thread keeps it: queued or not, and the time
/// it waits for (in the kernel's reading of its clock).
private struct RingTimeout {
    let clock: DeadlineClock
    /// Where its time lives while the kernel may read it.
    let time: UnsafeMutablePointer<__kernel_timespec>
    private(set) var queued = false
    /// The time it is armed for; `.max`: parked, or not queued.
    private(set) var armed = UInt64.max

    init(clock: DeadlineClock, time: UnsafeMutablePointer<__kernel_timespec>) {
        (self.clock, self.time) = (clock, time)
    }

    /// Where a parked timeout waits: 2^40 s from its clock's origin, beyond any deadline the
    /// core gives (2^62 ns, about 146 years, is its horizon).
    private static let parkedSeconds: Int64 = 1 << 40

    /// Tags: the timeout's own, and its moves', by clock.
    private var timeoutTag: UInt64 {
        switch clock {
        case .monotonic: 10
        case .continuous: 12
        case .wall: 14
        }
    }
    private var updateTag: UInt64 { timeoutTag + 1 }
    static func clock(of tag: UInt64) -> DeadlineClock? {
        switch tag {
        case 10, 11: .monotonic
        case 12, 13: .continuous
        case 14, 15: .wall
        default: nil
        }
    }
    static func isUpdate(_ tag: UInt64) -> Bool { tag % 2 == 1 }

    /// The flags that put a timeout on its clock.
    private var clockFlags: UInt32 {
        switch clock {
        case .monotonic: 0
        case .continuous: UInt32(IORING_TIMEOUT_BOOTTIME)
        case .wall: UInt32(IORING_TIMEOUT_REALTIME)
        }
    }

    /// Queues what moves the timeout to `deadline` (`.max`: parks it, if one is queued), unless
    /// it waits for that already; says whether it queued anything.
    mutating func move(to deadline: UInt64, on ring: UnsafeMutablePointer<io_uring>) throws(TimerError) -> Bool {
        guard deadline != armed, queued || deadline != .max else { return false }
        guard let entry = io_uring_get_sqe(ring) else { throw .nativeFailure(backend: "io_uring", call: "io_uring_get_sqe") }
        time.pointee =
            deadline == .max
            ? __kernel_timespec(tv_sec: Self.parkedSeconds, tv_nsec: 0)
            : __kernel_timespec(tv_sec: Int64(deadline / 1_000_000_000), tv_nsec: Int64(deadline % 1_000_000_000))
        if queued {
            // Moved in place, on the clock it was queued on; a move that succeeds posts no
            // completion to wake us.
            io_uring_prep_timeout_update(entry, time, timeoutTag, UInt32(IORING_TIMEOUT_ABS))
            io_uring_sqe_set_data64(entry, updateTag)
            io_uring_sqe_set_flags(entry, 1 << UInt32(IOSQE_CQE_SKIP_SUCCESS_BIT))
        } else {
            io_uring_prep_timeout(entry, time, 0, UInt32(IORING_TIMEOUT_ABS) | clockFlags)
            io_uring_sqe_set_data64(entry, timeoutTag)
            queued = true
        }
        armed = deadline
        return true
    }

    /// Its completion came: it is no longer queued.
    mutating func ended() {
        queued = false
        armed = .max
    }
}
