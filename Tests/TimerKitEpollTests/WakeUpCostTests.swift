import CTimerShims
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll
import TimerKitTestSupport

/// What a wake-up of the epoll loop costs in system calls, counted by the loop itself: the
/// wait, and at the most one re-arm of its timerfd, and no read.
@Suite("Epoll wake-up cost")
struct WakeUpCostTests {
    /// Groups of timers due together, so that most wake-ups fire several and re-queue each:
    /// the case where the loop used to re-arm once per re-queued timer that moved the
    /// earliest deadline, then once more at the end, and read the timerfd besides. A group
    /// every millisecond: a loop slowed by ThreadSanitizer on a loaded machine still sleeps
    /// between groups (with a group every 300 µs it found the next one due each time, and
    /// waited 27 times in the 100 s a sanitized run waits).
    static func measure(_ backend: EpollBackend) throws -> (waits: Int, rearms: Int, reads: Int) {
        let start = backend.now() + .milliseconds(20)
        for group in 0..<20 {
            for _ in 0..<3 {
                try backend.schedule(.every(.milliseconds(20), startingAt: start + .milliseconds(group))) { _ in }
            }
        }
        blockRealTime(.milliseconds(60))
        let counts = backend.loopCounts
        let before = (counts.waits, counts.rearms, counts.reads)
        // Until 200 wake-ups (a fifth of a second on an idle machine), not for a fixed time:
        // under ThreadSanitizer on a loaded machine 400 ms gave 69.
        waitFor { counts.waits - before.0 >= 200 }
        return (counts.waits - before.0, counts.rearms - before.1, counts.reads - before.2)
    }

    /// Before: 2 re-arms and 1 read per wake-up (a group of 3 timers due together).
    @Test func aWakeUpIsTheWaitAndAtMostOneRearm() async throws {
        try await withWatchdog { () async throws in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let cost = try Self.measure(backend)
            #expect(cost.waits >= 50, "the loop woke for the timers: \(cost)")
            // +1: the window may open between a re-arm and the wait it goes to sleep with.
            #expect(cost.rearms <= cost.waits + 1, "at most one re-arm per wake-up: \(cost)")
            #expect(cost.reads == 0, "the timerfd is edge-triggered and never read: \(cost)")
        }
    }

    /// A deadline that has come by the time the loop would sleep fires at once: no timerfd
    /// armed in the past, no wait that returns at once. A 1 µs repeating timer is due again by
    /// then on every turn; before, each of its fires cost a wait (and a re-arm).
    @Test(arguments: [EpollBackend.WaitMode.timerfd, .epollPwait2])
    func aDeadlineThatHasComeFiresWithoutAWait(_ mode: EpollBackend.WaitMode) async throws {
        if mode == .epollPwait2, try BackendKind.epollPwait2.checkedUnavailable("the due-deadline check") { return }
        try await withWatchdog { () async throws in
            let backend = try EpollBackend(options: .init(waitMode: mode), registry: TimerRegistry())
            defer { backend.shutdown() }
            let (fires, waits, rearms) = try dueTimerLoopCost(backend, counts: backend.loopCounts)
            // A turn may find the next deadline not yet come (a fire quicker than 1 µs): few do.
            #expect(waits * 4 <= fires, "\(waits) waits for \(fires) fires")
            #expect(rearms * 4 <= fires, "\(rearms) re-arms for \(fires) fires")
        }
    }

    /// In epollPwait2 mode the wait is the whole cost: no timerfd to re-arm or read.
    @Test func aPwait2WakeUpIsTheWaitAlone() async throws {
        if try BackendKind.epollPwait2.checkedUnavailable("the wake-up cost") { return }
        try await withWatchdog { () async throws in
            let backend = try EpollBackend(options: .init(waitMode: .epollPwait2), registry: TimerRegistry())
            defer { backend.shutdown() }
            let cost = try Self.measure(backend)
            #expect(cost.waits >= 50, "the loop woke for the timers: \(cost)")
            #expect(cost.rearms == 0 && cost.reads == 0, "\(cost)")
        }
    }

    /// Promise (`Options.timerSlack`): in epollPwait2 mode the loop thread's slack is 1 ns unless
    /// the options say otherwise, since the kernel delays every wait by it.
    @Test func thePwait2LoopThreadHasMinimalTimerSlack() async throws {
        if try BackendKind.epollPwait2.checkedUnavailable("the timer-slack check") { return }
        try await withWatchdog { () async throws in
            // Read on the loop thread itself, by a handler: /proc/self/task/TID has no
            // timerslack_ns (only a process's directory has one).
            func slack(_ backend: EpollBackend) throws -> Int {
                let seen = Locked(-1)
                let done = DispatchSemaphore(value: 0)
                try backend.schedule(.after(.milliseconds(1))) { _ in
                    seen.withLock { $0 = ctk_timer_slack() }
                    done.signal()
                }
                #expect(done.wait(timeout: .now() + .seconds(10)) == .success)
                return seen.current
            }
            let pwait2 = try EpollBackend(options: .init(waitMode: .epollPwait2), registry: TimerRegistry())
            defer { pwait2.shutdown() }
            #expect(try slack(pwait2) == 1)
            let chosen = try EpollBackend(options: .init(timerSlack: .microseconds(20), waitMode: .epollPwait2), registry: TimerRegistry())
            defer { chosen.shutdown() }
            #expect(try slack(chosen) == 20_000)
            let timerfd = try EpollBackend(registry: TimerRegistry())
            defer { timerfd.shutdown() }
            #expect(try slack(timerfd) > 1, "the timerfd mode keeps the kernel's default")
        }
    }

    /// Another thread's earlier deadline wakes a pwait2 loop that sleeps with a later one.
    @Test func aPwait2LoopWakesForAnotherThreadsEarlierDeadline() async throws {
        if try BackendKind.epollPwait2.checkedUnavailable("the cross-thread wake-up") { return }
        try await withWatchdog { () async throws in
            let backend = try EpollBackend(options: .init(waitMode: .epollPwait2), registry: TimerRegistry())
            defer { backend.shutdown() }
            try backend.schedule(.after(.seconds(3600))) { _ in }
            blockRealTime(.milliseconds(20))  // the loop is asleep until the hour
            let fired = DispatchSemaphore(value: 0)
            onBackgroundThread {
                _ = try? backend.schedule(.after(.milliseconds(5))) { _ in fired.signal() }
            }
            #expect(fired.wait(timeout: .now() + .seconds(10)) == .success)
        }
    }

    /// A kernel without epoll_pwait2 (simulated: before 5.11 the call fails with ENOSYS) makes
    /// the mode a typed error naming the reason, and the timerfd mode still works. In a child
    /// process: the hook is process-wide.
    @Test func pwait2OnAKernelWithoutItIsATypedError() async {
        await #expect(processExitsWith: .success) {
            EpollBackend.simulatedPwait2Errno.store(ENOSYS, ordering: .relaxed)
            guard !EpollBackend.supportsEpollPwait2 else { exit(2) }
            do {
                _ = try EpollBackend(options: .init(waitMode: .epollPwait2), registry: TimerRegistry())
                exit(3)
            } catch let error as TimerError {
                guard case .unavailable("epoll", let reason) = error, reason.contains("5.11"), reason.contains("errno \(ENOSYS)") else {
                    exit(4)
                }
            } catch {
                exit(5)
            }
            guard let backend = try? EpollBackend(registry: TimerRegistry()) else { exit(6) }
            backend.shutdown()
            exit(0)
        }
    }
}

/// A wake-up is used up as the loop calls `fireDueTimers()` for it: an expiry that leaves
/// nothing queued makes one call, and the loop then sleeps until asked again.
@Suite("A used-up wake-up")
struct UsedUpWakeUpTests {
    @Test(arguments: [EpollBackend.WaitMode.timerfd, .epollPwait2])
    func anExpiryThatLeavesNothingQueuedMakesOneFireCall(_ mode: EpollBackend.WaitMode) async throws {
        if mode == .epollPwait2, try BackendKind.epollPwait2.checkedUnavailable("the used-up wake-up") { return }
        try await withWatchdog { () async throws in
            let backend = try EpollBackend(options: .init(waitMode: mode), registry: TimerRegistry())
            defer { backend.shutdown() }
            let (expiries, fireCalls) = try fireCallsPerExpiry(backend, counts: backend.loopCounts)
            #expect(fireCalls == expiries, "\(fireCalls) calls of fireDueTimers() for \(expiries) expiries")
        }
    }
}
