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
    /// earliest deadline, then once more at the end, and read the timerfd besides.
    static func measure(_ backend: EpollBackend) throws -> (waits: Int, rearms: Int, reads: Int) {
        let start = backend.now() + .milliseconds(20)
        for group in 0..<50 {
            for _ in 0..<3 {
                try backend.schedule(.every(.milliseconds(20), startingAt: start + .microseconds(300 * group))) { _ in }
            }
        }
        blockRealTime(.milliseconds(60))
        let counts = backend.loopCounts
        let before = (counts.waits, counts.rearms, counts.reads)
        blockRealTime(.milliseconds(400))
        return (counts.waits - before.0, counts.rearms - before.1, counts.reads - before.2)
    }

    /// Before: 2 re-arms and 1 read per wake-up (a group of 3 timers due together).
    @Test func aWakeUpIsTheWaitAndAtMostOneRearm() throws {
        try withWatchdog {
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let cost = try Self.measure(backend)
            #expect(cost.waits >= 100, "the loop woke for the timers: \(cost)")
            #expect(cost.rearms <= cost.waits, "at most one re-arm per wake-up: \(cost)")
            #expect(cost.reads == 0, "the timerfd is edge-triggered and never read: \(cost)")
        }
    }
}
