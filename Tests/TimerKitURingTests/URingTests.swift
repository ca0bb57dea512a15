import CTimerShims
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll
import TimerKitTestSupport
import TimerKitURing

/// The io_uring backend's own promises. Where io_uring cannot run (a kernel without it,
/// `/proc/sys/kernel/io_uring_disabled`, a sandbox; or `TIMERKIT_TEST_IO_URING=unavailable`),
/// each test checks the typed error instead and says so in a warning.
@Suite("io_uring backend")
struct URingTests {
    /// Promise (`IOURingBackend`'s overview): a wake-up is one `io_uring_enter`, which moves the
    /// timeout at the most once. Groups of timers due together make most wake-ups fire several.
    @Test func aWakeUpIsOneEnterThatMovesTheTimeoutAtMostOnce() async throws {
        if try BackendKind.uring.checkedUnavailable("the wake-up cost") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let start = backend.now() + .milliseconds(20)
            let fired = Counter()
            for group in 0..<50 {
                for _ in 0..<3 {
                    try backend.schedule(.every(.milliseconds(20), startingAt: start + .microseconds(300 * group))) { _ in
                        fired.increment()
                    }
                }
            }
            blockRealTime(.milliseconds(60))
            let counts = backend.loopCounts
            let before = (counts.waits, counts.rearms, fired.current)
            // Until 200 wake-ups, not for a fixed time: under ThreadSanitizer on a loaded
            // machine 400 ms gave 98.
            waitFor { counts.waits - before.0 >= 200 }
            let (waits, rearms, fires) = (counts.waits - before.0, counts.rearms - before.1, fired.current - before.2)
            #expect(waits >= 100, "the loop woke for the timers: \(waits) wake-ups")
            #expect(fires >= 2 * waits, "a group fires in one wake-up: \(fires) fires in \(waits) wake-ups")
            // +1: the window may open between a move and the wait it goes to sleep with (seen:
            // 882 moves in 881 wake-ups).
            #expect(rearms <= waits + 1, "at most one timeout move per wake-up: \(rearms) in \(waits)")
        }
    }

    /// A deadline that has come by the time the loop would sleep fires at once: no timeout
    /// moved to a time that has passed, no enter that returns at once. A 1 µs repeating timer is
    /// due again by then on every turn; before, each of its fires cost an enter and a move.
    @Test func aDeadlineThatHasComeFiresWithoutAWait() async throws {
        if try BackendKind.uring.checkedUnavailable("the due-deadline check") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let (fires, waits, rearms) = try dueTimerLoopCost(backend, counts: backend.loopCounts)
            // A turn may find the next deadline not yet come (a fire quicker than 1 µs): few do.
            #expect(waits * 4 <= fires, "\(waits) enters for \(fires) fires")
            #expect(rearms * 4 <= fires, "\(rearms) timeout moves for \(fires) fires")
        }
    }

    @Test func theLoopSleepsWhileNothingIsDue() async throws {
        if try BackendKind.uring.checkedUnavailable("the idle check") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            try backend.schedule(.after(.seconds(3600))) { _ in }
            blockRealTime(.milliseconds(50))  // the loop moves its timeout to the hour once
            let before = try #require(voluntarySwitches(threadID: backend.loopThreadID))
            blockRealTime(.milliseconds(300))
            let after = try #require(voluntarySwitches(threadID: backend.loopThreadID))
            #expect(after - before <= 1)
        }
    }

    @Test func handlersRunOnTheLoopThread() async throws {
        if try BackendKind.uring.checkedUnavailable("the loop-thread check") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(options: .init(threadName: "tk-test-uring"), registry: TimerRegistry())
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
    }

    /// Promise (`IOURingBackend`): deadlines on the continuous and wall clocks are timeouts on
    /// `CLOCK_BOOTTIME` and `CLOCK_REALTIME` themselves; the monotonic timeout is never armed
    /// for them. Another thread's earlier deadline on those clocks wakes the sleeping loop, and
    /// repeating timers on them fire again and again through their own timeouts.
    @Test func continuousAndWallDeadlinesAreTimeoutsOnTheirOwnClocks() async throws {
        if try BackendKind.uring.checkedUnavailable("the own-clock timeouts") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            for clock in [DeadlineClock.continuous, .wall] { try backend.schedule(.after(.seconds(3600), on: clock)) { _ in } }
            blockRealTime(.milliseconds(20))  // the loop sleeps with both hour-long timeouts
            let counts = backend.loopCounts
            #expect(counts.rearms(on: .continuous) == 1 && counts.rearms(on: .wall) == 1)
            let fired = Locked<[DeadlineClock: Int]>([:])
            for clock in [DeadlineClock.continuous, .wall] {
                try backend.schedule(.every(.milliseconds(5), on: clock, count: 5)) { tick in
                    fired.withLock { $0[tick.clock, default: 0] += 1 }
                }
            }
            #expect(waitFor { fired.current == [.continuous: 5, .wall: 5] }, "\(fired.current)")
            #expect(counts.rearms == 0, "the monotonic timeout was armed \(counts.rearms) times")
            #expect(counts.rearms(on: .continuous) >= 5 && counts.rearms(on: .wall) >= 5)
        }
    }

    /// A burst on one clock larger than one `fireDueTimers` call takes (4096) still fires in
    /// full: the wall timeout's request stands after it expired, so the loop is woken again at
    /// once for what is left. A wall timer cancelled while monotonic ones remain leaves its
    /// timeout armed (no re-arm per cancel): the loop wakes once for it and then sleeps.
    @Test func wallBurstsFireInFullAndACancelledWallTimerCostsOneWakeUp() async throws {
        if try BackendKind.uring.checkedUnavailable("the own-clock bursts") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let date = Date().addingTimeInterval(0.05)
            let fired = Counter()
            for _ in 0..<5_000 { try backend.schedule(.at(date: date)) { _ in fired.increment() } }
            #expect(waitFor { fired.current == 5_000 }, "\(fired.current) of 5,000 fired")

            try backend.schedule(.after(.seconds(3600))) { _ in }
            let cancelled = try backend.schedule(.after(.milliseconds(30), on: .wall)) { _ in fired.increment() }
            cancelled.cancel()
            let counts = backend.loopCounts
            let waitsBefore = counts.waits
            blockRealTime(.milliseconds(300))
            #expect(fired.current == 5_000)
            #expect(counts.waits - waitsBefore <= 3, "\(counts.waits - waitsBefore) wake-ups for one cancelled timer")
        }
    }

    /// Another thread's earlier deadline wakes a loop that sleeps with a later one (or none).
    @Test(arguments: [true, false])
    func schedulingFromOtherThreadsWakesTheLoopForAnEarlierDeadline(_ withLaterTimer: Bool) throws {
        if try BackendKind.uring.checkedUnavailable("the cross-thread wake-up") { return }
        let backend = try IOURingBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        if withLaterTimer { try backend.schedule(.after(.seconds(3600))) { _ in } }
        blockRealTime(.milliseconds(20))  // the loop is asleep
        let fired = DispatchSemaphore(value: 0)
        onBackgroundThread {
            _ = try? backend.schedule(.after(.milliseconds(5))) { _ in fired.signal() }
        }
        #expect(fired.wait(timeout: .now() + .seconds(10)) == .success)
    }

    @Test func outOfRangeOptionsAreRefused() {
        #expect(throws: TimerError.negativeDuration(parameter: "timerSlack", value: .milliseconds(-1))) {
            try IOURingBackend(options: .init(timerSlack: .milliseconds(-1)), registry: TimerRegistry())
        }
        let error = #expect(throws: TimerError.self) { try IOURingBackend(options: .init(priority: .nice(20)), registry: TimerRegistry()) }
        guard case .invalidOption(let option, _, _) = error else {
            Issue.record("expected invalidOption, got \(String(describing: error))")
            return
        }
        #expect(option == "nice")
    }

    /// With room for 0 and 1 of the 2 descriptors the backend needs, each attempt is a typed
    /// error naming the call that failed, and leaves no descriptor behind.
    @Test(arguments: [(0, "io_uring_setup"), (1, "eventfd")])
    func runningOutOfDescriptorsIsATypedErrorAndLeaksNothing(_ room: Int, _ failingCall: String) async throws {
        if try BackendKind.uring.checkedUnavailable("the descriptor check") { return }
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [room, failingCall] in
            reportMakingWithRoomForDescriptors(room, failingCall: failingCall) { () throws(TimerError) in
                _ = try IOURingBackend(registry: TimerRegistry())
            }
            exit(0)
        }
        expectOutcome(result)
    }
}

/// The path of a machine without io_uring, taken on this one through the set-up failure the
/// test hook or `TIMERKIT_TEST_IO_URING=unavailable` simulates. In child processes: the hook is
/// process-wide.
@Suite("io_uring unavailable")
struct URingUnavailableTests {
    /// Before the hook, a machine with io_uring could not run this path at all.
    @Test(arguments: [(ENOSYS, "this kernel has no io_uring"), (EPERM, "/proc/sys/kernel/io_uring_disabled is")])
    func aSetUpFailureIsATypedErrorNamingTheReasonAndStartsNothing(_ code: Int32, _ phrase: String) async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [code, phrase] in
            warmUpDispatch()
            IOURingBackend.simulatedSetupErrno.store(code, ordering: .relaxed)
            let descriptors = openLoopDescriptors()
            let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
            let registry = TimerRegistry()
            do throws(TimerError) {
                _ = try IOURingBackend(registry: registry)
                exit(2)
            } catch .unavailable(let backend, let reason) {
                FileHandle.standardError.write(Data("reason: \(reason)\n".utf8))
                guard backend == "io_uring", reason.contains("errno \(code)"), reason.contains(phrase) else { exit(3) }
                guard IOURingBackend.unavailableReason == reason else { exit(4) }
            } catch {
                FileHandle.standardError.write(Data("failed otherwise: \(error)\n".utf8))
                exit(5)
            }
            // Only additions count as left behind: the test runtime and Dispatch may close
            // descriptors of their own meanwhile (as `reportWithRoomForDescriptors` allows).
            let after = openLoopDescriptors()
            guard after.allSatisfy({ descriptors[$0.key] == $0.value }) else {
                FileHandle.standardError.write(Data("descriptors left behind: \(describeChange(from: descriptors, to: after))\n".utf8))
                exit(6)
            }
            let threadsAfter = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
            guard threadsAfter <= threads, registry.count == 0 else { exit(7) }
            exit(0)
        }
        let report = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(result?.exitStatus == .exitCode(0), "\(report)")
    }

    /// `TIMERKIT_TEST_IO_URING=unavailable` makes the test support take the typed-error path on
    /// a machine where io_uring works: what a whole `make test` run does with it set.
    @Test func theEnvironmentSwitchSimulatesAMachineWithoutIOURing() async {
        await #expect(processExitsWith: .success) {
            setenv("TIMERKIT_TEST_IO_URING", "unavailable", 1)
            guard let reason = BackendKind.uring.unavailableReason, reason.contains("errno \(ENOSYS)") else { exit(2) }
            do {
                _ = try BackendKind.uring.makeOwnLoopBackend(TimerRegistry())
                exit(3)
            } catch let error as TimerError {
                guard error == .unavailable(backend: "io_uring", reason: reason) else { exit(4) }
            } catch {
                exit(5)
            }
            exit(0)
        }
    }
}

/// The best loop in one call, as the "Choosing a backend" article shows it (the code between
/// the markers is the article's: DocumentationTests compares them), on this machine and on
/// machines without io_uring and without `epoll_pwait2`, simulated in a child process (the
/// hooks are process-wide).
@Suite("The best loop in one call")
struct BestLoopTests {
    static func choose() throws -> BestLoop {
        // article: best loop
        let best = try BestLoop.make()
        for skipped in best.passedOver {
            print("TimerKit: not \(skipped.kind): \(skipped.reason)")
        }
        let backend = best.backend  // IOURingBackend or EpollBackend
        // end
        _ = backend
        return best
    }

    @Test func itTakesIOURingThenEpollPwait2ThenTheTimerfdAndSaysWhy() async {
        await #expect(processExitsWith: .success) {
            func kind(of best: BestLoop) -> String {
                defer { best.backend.shutdown() }
                switch best.backend {
                case is IOURingBackend: return best.kind == .ioURing ? "io_uring" : "mislabelled"
                case let epoll as EpollBackend:
                    let matches = (epoll.waitMode == .epollPwait2) == (best.kind == .epollPwait2) && best.kind != .ioURing
                    return matches ? "\(epoll.waitMode)" : "mislabelled"
                default: return "other"
                }
            }
            let pwait2 = EpollBackend.supportsEpollPwait2 ? "epoll_pwait2" : "timerfd"
            // Here: the best this machine has, passing over only what cannot run.
            guard let here = try? Self.choose() else { exit(2) }
            let uringHere = IOURingBackend.unavailableReason == nil
            guard
                here.passedOver.map(\.kind) == (uringHere ? [] : [.ioURing])
                    + (uringHere || EpollBackend.supportsEpollPwait2 ? [] : [.epollPwait2]),
                kind(of: here) == (uringHere ? "io_uring" : pwait2)
            else { exit(3) }
            // No io_uring: epoll_pwait2 (where the kernel has it), and io_uring's reason.
            IOURingBackend.simulatedSetupErrno.store(ENOSYS, ordering: .relaxed)
            guard let noURing = try? Self.choose(), kind(of: noURing) == pwait2,
                noURing.passedOver.first?.kind == .ioURing,
                noURing.passedOver.first?.reason.contains("errno \(ENOSYS)") == true
            else { exit(4) }
            // Neither: the timerfd, and both reasons, best first.
            EpollBackend.simulatedPwait2Errno.store(ENOSYS, ordering: .relaxed)
            guard let neither = try? Self.choose(), kind(of: neither) == "timerfd", neither.kind == .epollTimerfd,
                neither.passedOver.map(\.kind) == [.ioURing, .epollPwait2],
                neither.passedOver.allSatisfy({ $0.reason.contains("errno \(ENOSYS)") })
            else { exit(5) }
            exit(0)
        }
    }

    /// A failure other than "cannot run here" is thrown, not hidden behind a weaker loop.
    @Test func aBadOptionIsThrownNotPassedOver() {
        #expect(throws: TimerError.invalidOption(name: "nice", value: "40", allowed: "-20...19")) {
            try BestLoop.make(priority: .nice(40))
        }
    }

    /// The options reach the loop it takes.
    @Test func itsThreadHasTheNameAndRegistryAsked() throws {
        let registry = TimerRegistry()
        let best = try BestLoop.make(threadName: "best-loop", registry: registry)
        defer { best.backend.shutdown() }
        #expect(best.backend.registry === registry)
        let threadID: Int32 =
            switch best.backend {
            case let uring as IOURingBackend: uring.loopThreadID
            case let epoll as EpollBackend: epoll.loopThreadID
            default: -1
            }
        let comm = try String(contentsOfFile: "/proc/self/task/\(threadID)/comm", encoding: .utf8)
        #expect(comm.trimmingCharacters(in: .whitespacesAndNewlines) == "best-loop")
    }
}

/// A wake-up is used up as the loop calls `fireDueTimers()` for it (see `fireCallsPerExpiry`).
@Suite("io_uring: a used-up wake-up")
struct URingUsedUpWakeUpTests {
    @Test func anExpiryThatLeavesNothingQueuedMakesOneFireCall() async throws {
        if try BackendKind.uring.checkedUnavailable("the used-up wake-up") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let (expiries, fireCalls) = try fireCallsPerExpiry(backend, counts: backend.loopCounts)
            #expect(fireCalls == expiries, "\(fireCalls) calls of fireDueTimers() for \(expiries) expiries")
        }
    }
}
