internal import CTimerShims
import Glibc
import Synchronization
@_spi(BackendImplementation) import TimerKit

/// One frame as a display link's callback sees it (CADisplayLink's properties).
public struct DisplayFrame: Sendable {
    /// The vsync this callback belongs to: when the frame was due.
    public let timestamp: MonotonicInstant
    /// The vsync the next frame of this link is due at: the deadline for this frame's work.
    public let targetTimestamp: MonotonicInstant
    /// The link's frame period (refresh period × divisor).
    public let duration: Duration
    /// When the callback started.
    public let actual: MonotonicInstant
    /// Frames of this link skipped just before this one (its callback or the thread ran late).
    public let dropped: Int
}

/// A display link's running totals.
public struct DisplayLinkStatistics: Sendable, Equatable {
    /// Callbacks made.
    public var framesDelivered = 0
    /// Frames skipped because a callback or the vsync thread ran late (never burst later).
    public var framesDropped = 0
    /// The longest callback so far.
    public var longestCallback = Duration.zero
    /// Callbacks that took longer than the link's frame (the 16.7 ms rule at 60 Hz).
    public var overruns = 0
}

/// A CADisplayLink-style vsync source for Linux: an absolute timerfd on the grid of a refresh
/// rate, on a dedicated thread at the highest priority the process may have (SCHED_FIFO
/// where permitted, else nice -20, else normal; see `obtainedPriority`) with minimal timer
/// slack. Frame k is due at `start + k·period` exactly, however long it runs.
///
/// Links subscribe with a preferred frame rate, rounded to a divisor of the refresh rate as
/// iOS does (60 Hz: 60, 30, 20, 15, ...). They are timers of this backend's scheduler (or,
/// delivered elsewhere, of that backend's): they live in the registry and follow the same
/// states, proxy and cancellation model. The thread wakes only for frames a running link
/// takes: a 1 fps link on a 100 Hz source wakes it once a second. Like CADisplayLink, the
/// source does not tick while it has no running link: its timerfd is disarmed and its
/// thread sleeps.
///
/// A frame costs the thread one system call, the blocking read that is its wait: the timerfd
/// repeats by the gap between the last two deadlines, so a steady link's next frame needs no
/// re-arm, and a deadline off that grid is re-armed once, as the thread goes back to sleep.
///
/// A source is also a `TimerBackend`: a plain timer scheduled on it (not a link) keeps its
/// own deadline, not the vsync grid, and runs on the vsync thread at its priority.
///
/// ```swift
/// let display = try DisplaySource.shared(refreshRate: 60)
/// let link = try display.addLink(target: renderer) { renderer, frame in
///     renderer.draw(until: frame.targetTimestamp)
/// }
/// ```
public final class DisplaySource: TimerBackend, @unchecked Sendable {
    // @unchecked: `loop` and the figures below are set in init and never change; the counters
    // are atomic, and what the vsync thread and `wake(at:)` share is in `vsync`, which guards
    // itself.

    /// The refresh rate, in Hz.
    public let refreshRate: Int
    /// The refresh period, rounded to whole nanoseconds.
    public let period: Duration
    /// When vsync 0 was due: frame k is due at `start + k·period`.
    public let start: MonotonicInstant
    @_spi(BackendImplementation) public let scheduler: TimerScheduler
    @_spi(BackendImplementation) public var unretainedScheduler: Unmanaged<TimerScheduler> { .passUnretained(scheduler) }
    /// The vsync thread's priority (it may differ from the one asked for).
    public let obtainedPriority: ObtainedPriority
    /// The vsync thread's kernel thread id.
    public let threadID: Int32
    private let periodNanoseconds: UInt64
    private let vsync: VsyncTimer
    private let loop: OwnedLoop
    private let counters = Counters()

    /// What the vsync thread asked of the kernel, for tests and the bench.
    package var loopCounts: LoopCounts { vsync.counts }

    private final class Counters: Sendable {
        let droppedVsyncs = Atomic<Int>(0)
        let wakeUps = Atomic<Int>(0)
    }

    // A pthread mutex rather than Synchronization.Mutex, which ThreadSanitizer misreads.
    private static let sharedSourcesLock = FutexLock()
    nonisolated(unsafe) private static var sharedSources: [Int: DisplaySource] = [:]  // guarded by sharedSourcesLock

    /// The process-wide source for `refreshRate`, made on first use: one vsync thread
    /// serves every link of the same rate.
    public static func shared(refreshRate: Int = 60) throws(TimerError) -> DisplaySource {
        try sharedSourcesLock.withLock { () throws(TimerError) -> DisplaySource in
            if let source = sharedSources[refreshRate], !source.scheduler.hasShutDown { return source }
            let source = try DisplaySource(refreshRate: refreshRate)
            sharedSources[refreshRate] = source
            return source
        }
    }

    /// Starts a vsync thread at `refreshRate` Hz (1...1000). It sleeps until a link is added.
    /// - Throws: `TimerError.invalidFrameRate` for a rate out of range; `.systemCall` when
    ///   the timerfd or the thread cannot be created.
    public init(refreshRate: Int = 60, priority: ThreadPriority = .realtime(80), registry: TimerRegistry = .shared) throws(TimerError) {
        guard (1...1000).contains(refreshRate) else { throw .invalidFrameRate(Double(refreshRate)) }
        try priority.validate()
        self.refreshRate = refreshRate
        periodNanoseconds = 1_000_000_000 / UInt64(refreshRate)
        period = .nanoseconds(Int64(periodNanoseconds))
        // Blocking: the vsync thread sleeps in read(2) on it, and a disarmed timerfd never wakes it.
        let fd = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_CLOEXEC))
        guard fd >= 0 else { throw .systemCall(call: "timerfd_create", errno: errno) }
        let vsync = VsyncTimer(fd: fd)
        self.vsync = vsync
        start = MonotonicInstant.now() + .nanoseconds(Int64(periodNanoseconds))
        let scheduler = TimerScheduler(backendName: "display@\(refreshRate)Hz", registry: registry)
        self.scheduler = scheduler
        let started = StartSignal<(ObtainedPriority, Int32)>()
        let counters = self.counters
        let periodNanoseconds = self.periodNanoseconds
        do throws(TimerError) {
            loop = try OwnedLoop(
                { loop in
                    vsync.loopThread.store(UInt(pthread_self()), ordering: .releasing)
                    nameCurrentThread("TimerKit.vsync")
                    started.send((priority.applyToCurrentThread(minimalTimerSlack: true), ctk_gettid()))
                    do throws(TimerError) {
                        try Self.runVsync(loop, vsync: vsync, period: periodNanoseconds, counters: counters, scheduler: scheduler)
                    } catch {
                        scheduler.fail(with: error)  // the timerfd stays open until shutdown()
                    }
                }, release: { close(fd) })
        } catch {
            close(fd)
            throw error
        }
        (obtainedPriority, threadID) = started.receive() ?? (ObtainedPriority(priority: .normal, fallbackReason: nil), 0)
        scheduler.attach(owning: vsync)
    }

    deinit { shutdown() }

    /// Vsyncs the thread itself was late for: when it wakes for a frame, the whole refresh
    /// periods that have passed since that frame was due.
    public var droppedVsyncs: Int { counters.droppedVsyncs.load(ordering: .relaxed) }
    /// Times the vsync thread has woken for a deadline: a frame some running link takes, or a
    /// plain timer's. It does not wake for frames no link takes.
    public var wakeUps: Int { counters.wakeUps.load(ordering: .relaxed) }

    /// The frame rate a link asking for `preferred` frames per second gets: the refresh
    /// rate divided by the nearest whole divisor (0 means "as fast as the display").
    /// - Throws: `TimerError.invalidFrameRate` for a negative, NaN or infinite rate.
    public func divisor(forPreferredFramesPerSecond preferred: Double) throws(TimerError) -> Int {
        guard preferred.isFinite, preferred >= 0 else { throw .invalidFrameRate(preferred) }
        guard preferred > 0, preferred < Double(refreshRate) else { return 1 }
        return max(1, Int((Double(refreshRate) / preferred).rounded()))
    }

    /// Adds a link whose `action` receives `target` (held weakly: the link ends when the
    /// target is deallocated) on every frame of its rate.
    /// - Parameters:
    ///   - target: the object `action` receives; held weakly.
    ///   - preferredFramesPerSecond: rounded to a divisor of the refresh rate; 0 = full rate.
    ///   - name: a unique name for the registry; nil generates one.
    ///   - deliverOn: another backend to run the callbacks on (like adding a CADisplayLink to
    ///     a run loop): the link is then a timer of that backend on this source's vsync grid,
    ///     so it fires on that backend's loop, and a slow loop drops frames (counted) rather
    ///     than queueing them. Nil runs the callbacks on the vsync thread, with the least latency.
    ///   - action: runs on every frame of the link's rate, with the target and the frame.
    @discardableResult
    public func addLink<Target: AnyObject & Sendable>(
        target: Target, preferredFramesPerSecond: Double = 0, name: String? = nil, deliverOn: (any TimerBackend)? = nil,
        action: @escaping @Sendable (Target, DisplayFrame) -> Void
    ) throws(TimerError) -> DisplayLink {
        try DisplayLink(
            source: self, preferredFramesPerSecond: preferredFramesPerSecond, name: name, deliverOn: deliverOn,
            target: target
        ) { target, frame in
            if let target { action(target, frame) }
        }
    }

    /// Adds a link running `action` on every frame of its rate.
    @discardableResult
    public func addLink(
        preferredFramesPerSecond: Double = 0, name: String? = nil, deliverOn: (any TimerBackend)? = nil,
        action: @escaping @Sendable (DisplayFrame) -> Void
    ) throws(TimerError) -> DisplayLink {
        try DisplayLink(
            source: self, preferredFramesPerSecond: preferredFramesPerSecond, name: name, deliverOn: deliverOn,
            target: nil as DisplaySource?
        ) { _, frame in action(frame) }
    }

    /// The first vsync at or after `instant` whose index is a multiple of `divisor`. The grid
    /// runs both ways from `start`, so an instant of another clock (a `ManualBackend`'s virtual
    /// time, far before `start`) gets the frame just after it, not `start`.
    func nextFrame(after instant: MonotonicInstant, divisor: Int) -> MonotonicInstant {
        let stride = periodNanoseconds * UInt64(divisor)
        let origin = start.nanoseconds
        let time = instant.nanoseconds
        guard time < origin else {
            let frames = (time - origin).quotientAndRemainder(dividingBy: stride)
            return MonotonicInstant(nanoseconds: origin + (frames.quotient + (frames.remainder > 0 ? 1 : 0)) * stride)
        }
        return MonotonicInstant(nanoseconds: origin - (origin - time) / stride * stride)
    }

    /// Ends every link, stops and joins the vsync thread and closes the timerfd.
    public func shutdown() {
        scheduler.shutdown()
        let fd = vsync.fd
        // An expiry at once wakes a vsync thread that sleeps with the timerfd disarmed.
        loop.stop { try? armTimerFD(fd, at: MonotonicInstant(nanoseconds: 1)) }
    }

    private static func runVsync(
        _ loop: OwnedLoop, vsync: VsyncTimer, period: UInt64, counters: Counters, scheduler: TimerScheduler
    ) throws(TimerError) {
        while !loop.isStopping {
            try vsync.applyRequest()
            var expirations: UInt64 = 0
            try retryingInterrupts("read(timerfd)") { errnoResult(read(vsync.fd, &expirations, 8)) }
            vsync.counts.countWait()
            if loop.isStopping { return }
            counters.wakeUps.add(1, ordering: .relaxed)
            let due = vsync.expired(expirations)
            let now = MonotonicInstant.now().nanoseconds
            if due != .max && now > due { counters.droppedVsyncs.add(Int((now - due) / period), ordering: .relaxed) }
            vsync.counts.countFireCall()
            scheduler.fireDueTimers()
        }
    }
}

/// The vsync thread's timerfd and what the kernel will do with it. Kept apart from the source
/// so that the vsync thread never holds the source, and the scheduler owns it as its driver
/// (`attach(owning:)`): it holds neither the source nor the scheduler, so that makes no cycle,
/// and a wake-up request borrows it where a weakly held driver costs the runtime's slow path.
private final class VsyncTimer: TimerDriver, @unchecked Sendable {
    // @unchecked: `fd` never changes; the other stored properties are guarded by `lock`;
    // `counts` and `loopThread` guard themselves.
    let fd: Int32
    let counts = LoopCounts()
    let loopThread = Atomic<UInt>(0)
    private let lock = FutexLock()
    /// The scheduler's latest request (`.max`: nothing to wait for).
    private let requested = WakeRequest()
    /// The next expiry the kernel will deliver (`.max`: none), and the timerfd's interval.
    private var next: UInt64 = .max
    private var interval: UInt64 = 0
    /// The expiry the thread last woke for: the start of the gap a re-arm repeats by.
    private var lastDue: UInt64 = .max

    init(fd: Int32) { self.fd = fd }

    /// Arms the timerfd for exactly `deadline`: links' deadlines are on the vsync grid, so the
    /// thread wakes for the frames links take and for no other; a plain timer's deadline is kept
    /// as it is. `.distantFuture` (nothing running) disarms it. From the vsync thread the request
    /// is recorded and applied as the thread goes back to sleep (once, and not at all when the
    /// repeating timerfd already expires there); from another thread it is armed at once.
    func wake(at deadline: MonotonicInstant) throws(TimerError) {
        try request(deadline == .distantFuture ? .max : deadline.nanoseconds)
    }

    private func request(_ key: UInt64) throws(TimerError) {
        lock.lock()
        defer { lock.unlock() }
        requested.record(key)
        guard loopThread.load(ordering: .relaxed) != UInt(pthread_self()), key != next else { return }
        try arm(key, every: 0)
    }

    /// Before the thread sleeps: arms the timerfd for the latest request unless it expires
    /// there already, repeating by the gap since the last expiry (a steady link's next frame).
    func applyRequest() throws(TimerError) {
        lock.lock()
        defer { lock.unlock() }
        let wanted = requested.current
        guard wanted != next else { return }
        let gap = wanted != .max && lastDue != .max && wanted > lastDue ? wanted - lastDue : 0
        try arm(wanted, every: gap)
        counts.countRearm()
    }

    /// After a read of `expirations`: the expiry the thread woke for, and the kernel's next.
    func expired(_ expirations: UInt64) -> UInt64 {
        lock.lock()
        defer { lock.unlock() }
        let due = next
        guard due != .max else { return .max }  // another thread disarmed it meanwhile
        // The request this expiry answers is used up (`WakeRequest`). Left standing, a request
        // in the past would be armed again as the thread goes back to sleep, expire at once, and
        // keep the thread waking with no link running (seen under ThreadSanitizer, for minutes).
        requested.useUp()
        if interval == 0 {
            next = .max
            lastDue = due
        } else {
            lastDue = due + (max(expirations, 1) - 1) * interval
            next = lastDue + interval
        }
        return due
    }

    private func arm(_ key: UInt64, every gap: UInt64) throws(TimerError) {
        try armTimerFD(fd, at: key == .max ? .distantFuture : MonotonicInstant(nanoseconds: key), period: key == .max ? 0 : gap)
        next = key
        interval = key == .max ? 0 : gap
    }
}

/// What a link does on each frame: kept apart from `DisplayLink` so that the timer's
/// handler can hold it without holding the link (which holds the timer).
private final class LinkCore<Target: AnyObject & Sendable>: Sendable {
    let action: @Sendable (Target?, DisplayFrame) -> Void
    let stats = Locked(DisplayLinkStatistics())

    init(action: @escaping @Sendable (Target?, DisplayFrame) -> Void) {
        self.action = action
    }

    func deliver(_ target: Target?, _ tick: Tick, interval: Duration) {
        let frame = DisplayFrame(
            timestamp: tick.scheduled, targetTimestamp: tick.scheduled + interval,
            duration: interval, actual: tick.actual, dropped: tick.missed)
        let began = MonotonicInstant.now()
        action(target, frame)
        let took = MonotonicInstant.now() - began
        stats.withLock {
            $0.framesDelivered += 1
            $0.framesDropped += frame.dropped
            $0.longestCallback = max($0.longestCallback, took)
            if took > frame.duration { $0.overruns += 1 }
        }
    }
}

/// A subscription to a `DisplaySource`: CADisplayLink for Linux.
///
/// `isPaused` keeps it armed but silent; `invalidate()` ends it (twice is fine). After
/// `invalidate()`, pausing or changing the rate throws `TimerError.timerEnded`, as for timers.
public final class DisplayLink: Sendable {

    /// The source this link follows.
    public let source: DisplaySource
    /// The backend the callbacks run on: the source, or the one given as `deliverOn`. Its
    /// clock times the link.
    private let deliveringBackend: any TimerBackend
    /// The link's registry entry: suspend, resume and cancel it by name like any timer. It
    /// is a timer of the source, or of the backend the link delivers on.
    public let handle: TimerHandle
    private let readStatistics: @Sendable () -> DisplayLinkStatistics
    /// The refresh-rate divisor in force (a rate change moves it): what `framesPerSecond`
    /// reports, after the link has ended too.
    private let divisor: Atomic<Int>

    init<Target: AnyObject & Sendable>(
        source: DisplaySource, preferredFramesPerSecond: Double, name: String?,
        deliverOn: (any TimerBackend)?, target: Target?,
        action: @escaping @Sendable (Target?, DisplayFrame) -> Void
    ) throws(TimerError) {
        self.source = source
        let backend: any TimerBackend = deliverOn ?? source
        deliveringBackend = backend
        let divisor = try source.divisor(forPreferredFramesPerSecond: preferredFramesPerSecond)
        self.divisor = Atomic(divisor)
        let core = LinkCore<Target>(action: action)
        readStatistics = { core.stats.current }
        let schedule = Self.schedule(on: source, divisor: divisor, clock: backend)
        // The tick carries the link's interval, so a rate change shows in the very next frame.
        let interval = source.period * divisor
        // Delivered elsewhere, the link is a timer of that backend on the vsync grid: its
        // loop's own wake-up times it, and pause, invalidate and dropped frames follow the
        // core's contract there (no frame is queued, none arrives after invalidate()).
        if let target {
            // The core's proxy: held weakly, and the link ends when the target goes.
            handle = try backend.schedule(schedule, target: target, name: name, missedTicks: .skip) { target, tick in
                core.deliver(target, tick, interval: tick.interval ?? interval)
            }
        } else {
            handle = try backend.schedule(schedule, name: name, missedTicks: .skip) { tick in
                core.deliver(nil, tick, interval: tick.interval ?? interval)
            }
        }
    }

    /// The link's grid, from the first frame after the delivering backend's present.
    private static func schedule(on source: DisplaySource, divisor: Int, clock backend: any TimerBackend) -> TimerSchedule {
        let first = source.nextFrame(after: backend.now() + .nanoseconds(1), divisor: divisor)
        return .every(source.period * divisor, startingAt: first)
    }

    /// Frames delivered and dropped, the longest callback, and overruns.
    public var statistics: DisplayLinkStatistics { readStatistics() }

    /// Frames per second the link actually runs at (refresh rate ÷ divisor).
    public var framesPerSecond: Double {
        Double(source.refreshRate) / Double(divisor.load(ordering: .relaxed))
    }

    /// Whether the link is paused. Setting it on an invalidated link does nothing; use
    /// `setPaused(_:)` to be told.
    public var isPaused: Bool {
        get { handle.currentState == .suspended }
        set { try? setPaused(newValue) }
    }

    /// Pauses (armed but silent) or resumes the link.
    public func setPaused(_ paused: Bool) throws(TimerError) {
        if paused { try handle.suspend() } else { try handle.resume() }
    }

    /// Changes the preferred rate while running; the link moves to the new divisor's grid.
    public func setPreferredFramesPerSecond(_ preferred: Double) throws(TimerError) {
        let divisor = try source.divisor(forPreferredFramesPerSecond: preferred)
        try handle.reschedule(Self.schedule(on: source, divisor: divisor, clock: deliveringBackend))
        self.divisor.store(divisor, ordering: .relaxed)
    }

    /// Ends the link: once it returns no new callback is begun (one already begun may still
    /// run; `handle.cancelAndWait()` waits for it). Idempotent; safe from inside its own
    /// callback.
    public func invalidate() { handle.cancel() }

    /// Whether the link is still running or paused (not invalidated, its target alive).
    public var isValid: Bool { handle.isActive }
}
