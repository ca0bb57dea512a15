import CTimerShims
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll
import TimerKitTestSupport

@Suite("Epoll backend")
struct EpollTests {
    /// With room for 0, 1 and 2 of the 3 descriptors the backend needs, each attempt is a
    /// typed error naming the call that failed, and leaves no descriptor behind.
    @Test(arguments: [(0, "epoll_create1"), (1, "timerfd_create"), (2, "eventfd")])
    func runningOutOfDescriptorsIsATypedErrorAndLeaksNothing(_ room: Int, _ failingCall: String) async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [room, failingCall] in
            reportMakingWithRoomForDescriptors(room, failingCall: failingCall) { () throws(TimerError) in
                _ = try EpollBackend(registry: TimerRegistry())
            }
            exit(0)
        }
        expectOutcome(result)
    }

    /// Promise: a busy backend its owner drops without `shutdown()` shuts down cleanly, even
    /// when the last reference goes on its own loop, inside a fire (the scheduler loads its
    /// driver strongly only into what it lets go of after unlocking). Before, the backend's
    /// `deinit` could run under the scheduler's lock: the first drop crashed a debug build.
    @Test func droppingABusyBackendWithoutShutdownNeitherCrashesNorHangs() throws {
        try withWatchdog {
            let registry = TimerRegistry()
            for _ in 0..<50 {
                var backend: EpollBackend? = try EpollBackend(registry: registry)
                let fired = Locked(0)
                try backend?.schedule(.every(.microseconds(5))) { _ in fired.withLock { $0 += 1 } }
                #expect(waitFor { fired.current >= 20 })
                backend = nil
                #expect(waitFor { registry.count == 0 }, "its timer ends with it")
            }
        }
    }

    @Test func theLoopSleepsWhileNothingIsDue() throws {
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        try backend.schedule(.after(.seconds(3600))) { _ in }
        let before = try #require(voluntarySwitches(threadID: backend.loopThreadID))
        blockRealTime(.milliseconds(300))
        let after = try #require(voluntarySwitches(threadID: backend.loopThreadID))
        // Scheduling arms the timerfd from this thread: the loop does not even wake for it.
        #expect(after - before <= 1)
    }

    @Test func handlersRunOnTheLoopThread() throws {
        let backend = try EpollBackend(options: .init(threadName: "tk-test-loop"), registry: TimerRegistry())
        defer { backend.shutdown() }
        let seen = Locked<Int32>(0)
        let done = DispatchSemaphore(value: 0)
        try backend.schedule(.after(.milliseconds(1))) { _ in
            seen.withLock { $0 = ctk_gettid() }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + .seconds(10)) == .success)
        #expect(seen.current == backend.loopThreadID)
    }

    @Test func priorityIsGrantedOrTheFallbackIsReported() throws {
        let backend = try EpollBackend(options: .init(priority: .realtime(10), timerSlack: .nanoseconds(1)), registry: TimerRegistry())
        defer { backend.shutdown() }
        let got = backend.obtainedPriority
        if got.priority == .realtime(10) {
            #expect(got.fallbackReason == nil)
            #expect(got.description == "SCHED_FIFO 10")
        } else {
            #expect(got.fallbackReason?.contains("SCHED_FIFO") == true, "a fallback says why: \(got)")
        }
    }

    @Test(arguments: [
        (ThreadPriority.realtime(0), "realtime priority"), (.realtime(100), "realtime priority"),
        (.nice(-21), "nice"), (.nice(20), "nice"),
    ])
    func outOfRangePrioritiesAreRefused(_ priority: ThreadPriority, _ name: String) {
        let error = #expect(throws: TimerError.self) { try EpollBackend(options: .init(priority: priority), registry: TimerRegistry()) }
        guard case let .invalidOption(option, _, _) = error else {
            Issue.record("expected invalidOption, got \(String(describing: error))")
            return
        }
        #expect(option == name)
    }

    @Test func aNegativeTimerSlackIsRefused() {
        #expect(throws: TimerError.negativeDuration(parameter: "timerSlack", value: .milliseconds(-1))) {
            try EpollBackend(options: .init(timerSlack: .milliseconds(-1)), registry: TimerRegistry())
        }
    }

    @Test func schedulingFromOtherThreadsWakesTheLoopForAnEarlierDeadline() throws {
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        try backend.schedule(.after(.seconds(3600))) { _ in }
        let fired = DispatchSemaphore(value: 0)
        onBackgroundThread {
            _ = try? backend.schedule(.after(.milliseconds(5))) { _ in fired.signal() }
        }
        #expect(fired.wait(timeout: .now() + .seconds(10)) == .success)
    }
}

/// The real path of a wall-clock step, through the process's clock watcher: its timerfd read
/// is made to report `ECANCELED` (injected, since a test must never set the host's clock), and
/// the wall clock reads skewed. Each runs in a child process, where the skew is its own. On the
/// loops of TimerKit's own: the epoll loop converts wall deadlines to its monotonic timer,
/// io_uring's arms a `CLOCK_REALTIME` timeout for them (moved by the skew, which the kernel's
/// clock does not carry).
@Suite("Wall-clock steps through the timerfd watcher")
struct ClockStepTests {
    static let loops: [BackendKind] = [.epoll, .epollPwait2, .uring]

    @Test(arguments: loops)
    func aForwardStepFiresTheWallTimersItJumpedPastAtOnce(_ kind: BackendKind) async throws {
        if try kind.checkedUnavailable("the wall-clock step") { return }
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [kind] in
            // The backend goes before the exit: one left alive at exit is a leak to LeakSanitizer.
            func run() throws -> Int32 {
                let backend = try kind.makeOwnLoopBackend(TimerRegistry())
                let fired = Locked<[Tick]>([])
                let steps = Locked<[Duration]>([])
                backend.addEventObserver { event in
                    if case .clockChanged(_, .wall, let step) = event { steps.withLock { $0.append(step) } }
                }
                try backend.schedule(.at(date: Date().addingTimeInterval(30))) { tick in fired.withLock { $0.append(tick) } }
                try backend.schedule(.after(.seconds(30))) { tick in fired.withLock { $0.append(tick) } }
                guard ClockWatcher.shared.currentState == .watching else { return 2 }
                DeadlineClock.wallSkewForTests.store(60_000_000_000, ordering: .relaxed)
                try ClockWatcher.shared.injectCancel()
                // The event reaches observers on the watcher's thread, the tick on the loop's: in
                // either order.
                guard waitFor(.seconds(10), { fired.current.count == 1 && !steps.current.isEmpty }) else { return 3 }
                guard let tick = fired.current.first, tick.clock == .wall, tick.clockChanged else { return 4 }
                guard let step = steps.current.first, abs((step - .seconds(60)) / .seconds(1)) < 0.1 else { return 5 }
                blockRealTime(.milliseconds(50))
                guard fired.current.count == 1, ClockWatcher.shared.changes >= 1 else { return 6 }
                backend.shutdown()
                return 0
            }
            exit(try run())
        }
        let report = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(result?.exitStatus == .exitCode(0), "\(report)")
    }

    /// Without word from the watcher, a step is seen the next time the loop wakes for any
    /// timer: the wall timer it jumped past fires then.
    @Test(arguments: loops)
    func aStepIsSeenWhenTheLoopNextWakesWithoutTheWatcher(_ kind: BackendKind) async throws {
        if try kind.checkedUnavailable("the wall-clock step") { return }
        await #expect(processExitsWith: .success) { [kind] in
            // The backend goes before the exit: one left alive at exit is a leak to LeakSanitizer.
            func run() throws -> Int32 {
                let backend = try kind.makeOwnLoopBackend(TimerRegistry())
                let fired = Locked<[DeadlineClock]>([])
                try backend.schedule(.at(date: Date().addingTimeInterval(30))) { tick in fired.withLock { $0.append(tick.clock) } }
                DeadlineClock.wallSkewForTests.store(60_000_000_000, ordering: .relaxed)
                try backend.schedule(.after(.milliseconds(50))) { tick in fired.withLock { $0.append(tick.clock) } }
                guard waitFor(.seconds(10), { fired.current.count == 2 }) else { return 2 }
                guard Set(fired.current) == [.wall, .monotonic], ClockWatcher.shared.changes == 0 else { return 3 }
                backend.shutdown()
                return 0
            }
            exit(try run())
        }
    }

    /// Promise: with the wall clock reading less than the time since boot (here it reads 20 s
    /// after 1970, as a board without a real-time clock does before NTP), a wall timer fires
    /// at its date and the loop does not spin meanwhile. Before, an unsigned offset made the
    /// deadline "due at once" and re-filed it 1 ns later, for ever.
    @Test(arguments: loops)
    func aWallClockBehindTheMonotonicOneNeitherSpinsNorMissesADate(_ kind: BackendKind) async throws {
        if try kind.checkedUnavailable("the wall-clock step") { return }
        await #expect(processExitsWith: .success) { [kind] in
            // The backend goes before the exit: one left alive at exit is a leak to LeakSanitizer.
            func run() throws -> Int32 {
                let skew = -Int64(DeadlineClock.read(.wall)) + 20_000_000_000
                DeadlineClock.wallSkewForTests.store(skew, ordering: .relaxed)
                guard DeadlineClock.read(.wall) < DeadlineClock.read(.monotonic) else { return 2 }
                let backend = try kind.makeOwnLoopBackend(TimerRegistry())
                let fired = Locked<[DeadlineClock]>([])
                try backend.schedule(.after(.milliseconds(300), on: .wall)) { tick in fired.withLock { $0.append(tick.clock) } }
                let cpuBefore = processCPUSeconds()
                blockRealTime(.milliseconds(200))
                guard fired.current.isEmpty else { return 3 }
                // A spinning loop burns a core while it waits: 0.2 s in 0.2 s, not a few ms.
                guard processCPUSeconds() - cpuBefore < 0.1 else { return 4 }
                guard waitFor(.seconds(10), { fired.current == [.wall] }) else { return 5 }
                backend.shutdown()
                return 0
            }
            exit(try run())
        }
    }

    /// A step back: the wall timer waits for its date on the stepped clock, never firing
    /// early; stepped forward again, it fires at once.
    @Test(arguments: loops)
    func aBackwardStepNeverMakesAWallTimerFireEarly(_ kind: BackendKind) async throws {
        if try kind.checkedUnavailable("the wall-clock step") { return }
        await #expect(processExitsWith: .success) { [kind] in
            // The backend goes before the exit: one left alive at exit is a leak to LeakSanitizer.
            func run() throws -> Int32 {
                let backend = try kind.makeOwnLoopBackend(TimerRegistry())
                let fired = Locked(0)
                try backend.schedule(.at(date: Date().addingTimeInterval(0.2))) { _ in fired.withLock { $0 += 1 } }
                DeadlineClock.wallSkewForTests.store(-60_000_000_000, ordering: .relaxed)
                try ClockWatcher.shared.injectCancel()
                blockRealTime(.milliseconds(600))
                guard fired.current == 0 else { return 2 }
                DeadlineClock.wallSkewForTests.store(0, ordering: .relaxed)
                try ClockWatcher.shared.injectCancel()
                guard waitFor(.seconds(10), { fired.current == 1 }) else { return 3 }
                backend.shutdown()
                return 0
            }
            exit(try run())
        }
    }
}
