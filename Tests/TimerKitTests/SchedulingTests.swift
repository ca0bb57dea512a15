import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

@Suite("Scheduling on virtual time")
struct SchedulingTests {
    let registry = TimerRegistry()
    var clock: ManualBackend { ManualBackend(registry: registry) }

    @Test func oneShotFiresOnceAtItsDeadline() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        try clock.schedule(.after(ms(50)), handler: log.record)
        clock.advance(by: ms(49))
        #expect(log.count == 0)
        clock.advance(by: ms(1))
        #expect(log.count == 1)
        clock.advance(by: .seconds(10))
        #expect(log.count == 1)
        let tick = try #require(log.all.first)
        #expect(tick.index == 0)
        #expect(tick.scheduled == start + ms(50))
        #expect(tick.actual == start + ms(50))
        #expect(tick.missed == 0)
        #expect(tick.timer.currentState == .finished)
        #expect(registry.count == 0)
    }

    /// A fire leaves its timer's queue entry in place while the handler runs, to be re-filed by
    /// the repeat's next tick or taken by the next timer queued: timers that handlers schedule
    /// before, at and after the repeat's next tick and beyond timers already waiting, by handle
    /// and by key, still fire in deadline order, then scheduling order (the repeat's next tick is
    /// queued once its handler has returned, after what the handler scheduled), and the repeat
    /// keeps its grid.
    @Test func timersScheduledInsideARepeatingHandlerKeepDeadlineOrder() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = Locked<[String]>([])
        final class Logged: TimerCallback {
            let log: Locked<[String]>
            let name: String
            init(_ log: Locked<[String]>, _ name: String) { (self.log, self.name) = (log, name) }
            func timerFired(_ fire: TimerFire) { log.withLock { $0.append(name) } }
        }
        try clock.schedule(.after(ms(33))) { _ in log.withLock { $0.append("a") } }
        try clock.schedule(.after(ms(47))) { _ in log.withLock { $0.append("b") } }
        try clock.schedule(.every(ms(10))) { tick in
            log.withLock { $0.append("r\(tick.index)") }
            guard tick.index < 3 else { return }
            // First the farthest: it takes the place of the firing timer's entry, above "a" and "b".
            _ = try? clock.schedule(.after(ms(40))) { _ in log.withLock { $0.append("far\(tick.index)") } }
            _ = try? clock.schedule(.after(ms(5))) { _ in log.withLock { $0.append("early\(tick.index)") } }
            _ = try? clock.schedule(.after(ms(15)), calling: Logged(log, "late\(tick.index)"))
            _ = try? clock.schedule(.after(ms(10))) { _ in log.withLock { $0.append("tie\(tick.index)") } }
        }
        clock.advance(by: ms(60))
        #expect(
            log.current == [
                "r0", "early0", "tie0", "r1", "late0", "early1", "tie1", "r2", "a", "late1", "early2", "tie2", "r3", "late2",
                "b", "far0", "r4", "far1", "r5",
            ])
        #expect(registry.count == 2, "the repeat and far2 are left")
    }

    @Test func oneShotAtAPastDeadlineFiresOnTheNextAdvance() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        try clock.schedule(.at(clock.now() + ms(-5)), handler: log.record)
        clock.runDue()
        #expect(log.count == 1)
    }

    @Test func timersFireInDeadlineOrder() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let order = Locked<[Int]>([])
        for delay in [30, 10, 20, 10, 50, 40] {
            try clock.schedule(.after(ms(delay))) { _ in order.withLock { $0.append(delay) } }
        }
        clock.advance(by: ms(100))
        #expect(order.current == [10, 10, 20, 30, 40, 50])
    }

    @Test func repeatsStayOnTheGridHoweverTimeAdvances() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        try clock.schedule(.every(ms(10), firstAfter: ms(3)), handler: log.record)
        for step in [1, 7, 13, 2, 29, 48] { clock.advance(by: ms(step)) }
        let scheduled = log.all.map { $0.scheduled }
        #expect(scheduled.count == 10)
        for (k, deadline) in scheduled.enumerated() {
            #expect(deadline == start + ms(3) + ms(10) * k)
        }
    }

    @Test func finiteCountEndsFinishedAndLeavesTheRegistry() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let timer = try clock.schedule(.every(ms(10), count: 3), handler: log.record)
        clock.advance(by: ms(25))
        #expect(timer.currentState == .scheduled)
        #expect(registry.count == 1)
        clock.advance(by: ms(100))
        #expect(log.all.map(\.index) == [0, 1, 2])
        #expect(timer.currentState == .finished)
        #expect(registry.count == 0)
    }

    @Test func skipFiresTheLatestDueTickOnceAndCountsTheRest() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        try clock.schedule(.every(ms(10)), missedTicks: .skip) { tick in
            log.record(tick)
            if tick.index == 0 { clock.advance(by: ms(35)) }  // a handler that ran 35 ms
        }
        clock.advance(by: ms(60))
        let ticks = log.all
        // Fire 0 at 10 ran until 45: 20 and 30 are skipped, 40 fires late, then 50, 60.
        #expect(ticks.map { $0.scheduled - start } == [ms(10), ms(40), ms(50), ms(60)])
        #expect(ticks.map(\.missed) == [0, 2, 0, 0])
        #expect(ticks[1].actual - start == ms(45))
    }

    @Test func burstCatchesUpEveryMissedTick() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        try clock.schedule(.every(ms(10)), missedTicks: .burst) { tick in
            log.record(tick)
            if tick.index == 0 { clock.advance(by: ms(35)) }
        }
        clock.advance(by: ms(60))
        let ticks = log.all
        #expect(ticks.map { $0.scheduled - start } == [ms(10), ms(20), ms(30), ms(40), ms(50), ms(60)])
        #expect(ticks[1...3].allSatisfy { $0.actual - start == ms(45) })
        #expect(ticks.allSatisfy { $0.missed == 0 })
    }

    @Test func timersWithEqualDeadlinesFireInSchedulingOrder() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let order = Locked<[Int]>([])
        let deadline = clock.now() + ms(10)
        var timers: [TimerHandle] = []
        for index in 0..<100 {
            timers.append(try clock.schedule(.at(deadline)) { _ in order.withLock { $0.append(index) } })
        }
        // A reschedule queues the timer again, behind those already queued for that deadline.
        try timers[3].reschedule(.at(deadline))
        clock.advance(by: ms(10))
        #expect(order.current == Array(0..<3) + Array(4..<100) + [3])
    }

    @Test func delayRestartsTheGridFromNow() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        try clock.schedule(.every(ms(10)), missedTicks: .delay) { tick in
            log.record(tick)
            if tick.index == 0 { clock.advance(by: ms(35)) }
        }
        clock.advance(by: ms(70))
        let ticks = log.all
        #expect(ticks.map { $0.scheduled - start } == [ms(10), ms(45), ms(55), ms(65)])
        #expect(ticks.map(\.missed) == [0, 2, 0, 0])
    }

    @Test func delayKeepsTheGridForJitterAndRestartsItFromTheThreshold() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        // Interval 10 ms, so the threshold is 5 ms. Tick 0 (due 10) runs 14 ms, so tick 1
        // (due 20) fires at 24: 4 ms late, jitter, the grid stays. Tick 1 runs 12 ms, so tick
        // 2 (due 30) fires at 36: 6 ms late, the grid restarts there.
        let stalls = Locked([ms(14), ms(12)])
        try clock.schedule(.every(ms(10)), missedTicks: .delay) { tick in
            log.record(tick)
            if let stall = stalls.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { clock.stall(for: stall) }
        }
        clock.advance(by: ms(60))
        let ticks = log.all
        #expect(ticks[0].scheduled - start == ms(10))
        #expect(ticks[1].scheduled - start == ms(20), "4 ms late is jitter: the grid stays")
        #expect(ticks[2].scheduled - start == ms(36), "6 ms late restarts the grid at the fire")
        #expect(ticks[2].missed == 0)
        #expect(ticks[3].scheduled - start == ms(46))
        #expect(MissedTickPolicy.delayThreshold(interval: ms(2)) == ms(2))
        #expect(MissedTickPolicy.delayThreshold(interval: .seconds(1)) == ms(5))
    }

    @Test func toleranceLetsATimerFireLateButNeverLaterThanAllowed() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        try clock.schedule(.after(ms(10)), tolerance: ms(5), handler: log.record)
        clock.advance(by: ms(10))
        #expect(log.count == 0, "the wake-up may be deferred within the tolerance")
        clock.advance(by: ms(5))
        let tick = try #require(log.all.first)
        #expect(tick.scheduled == start + ms(10))
        #expect(tick.lateness <= ms(5))
    }

    @Test func toleranceCoalescesWithAnEarlierWakeUp() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        try clock.schedule(.after(ms(10)), name: "lenient", tolerance: ms(50), handler: log.record)
        try clock.schedule(.after(ms(20)), name: "strict", handler: log.record)
        clock.advance(by: ms(20))
        // One wake-up at 20 ms runs both: the lenient timer is due and within its window.
        #expect(log.all.map(\.timer.name) == ["strict", "lenient"])
        #expect(log.all.allSatisfy { $0.actual == start + ms(20) })
    }

    @Test func theDriverIsReArmedOnlyWhenTheEarliestDeadlineChanges() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let start = clock.now()
        try clock.schedule(.after(ms(30))) { _ in }
        #expect(clock.requestedWakeUp == start + ms(30))
        try clock.schedule(.after(ms(50))) { _ in }
        #expect(clock.requestedWakeUp == start + ms(30))
        try clock.schedule(.after(ms(10))) { _ in }
        #expect(clock.requestedWakeUp == start + ms(10))
        clock.advance(by: ms(10))
        #expect(clock.requestedWakeUp == start + ms(30))
        clock.advance(by: ms(100))
        #expect(clock.requestedWakeUp == .distantFuture)
    }

    @Test func aHandlerCanRescheduleItsOwnOneShot() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        try clock.schedule(.after(ms(10))) { tick in
            log.record(tick)
            if tick.index == 0 { try? tick.timer.reschedule(.after(ms(10))) }
        }
        clock.advance(by: ms(100))
        #expect(log.count == 2)
        #expect(registry.count == 0)
    }

    @Test func manyTimersWithRandomCancelsFireInOrderAndCancelledOnesNever() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        var rng = SystemRandomNumberGenerator()
        let fired = Locked<[(UInt64, MonotonicInstant)]>([])
        var timers: [TimerHandle] = []
        for _ in 0..<2000 {
            let delay = ms(Int.random(in: 1...1000, using: &rng))
            timers.append(
                try clock.schedule(.after(delay)) { tick in
                    fired.withLock { $0.append((tick.timer.id, tick.scheduled)) }
                })
        }
        timers.shuffle(using: &rng)
        let cancelled = Set(timers.prefix(1000).map(\.id))
        for timer in timers.prefix(1000) { timer.cancel() }
        clock.advance(by: .seconds(2))
        let result = fired.current
        #expect(result.count == 1000)
        #expect(result.allSatisfy { !cancelled.contains($0.0) })
        #expect(zip(result, result.dropFirst()).allSatisfy { $0.1 <= $1.1 })
        #expect(registry.count == 0)
    }

    @Test func lazyCancelCompactsAndRevivesSuspendedEntriesCorrectly() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        var rng = SystemRandomNumberGenerator()
        let fired = Locked<[(UInt64, MonotonicInstant)]>([])
        var timers: [TimerHandle] = []
        for _ in 0..<6000 {
            timers.append(
                try clock.schedule(.after(ms(Int.random(in: 1...5000, using: &rng)))) { tick in
                    fired.withLock { $0.append((tick.timer.id, tick.scheduled)) }
                })
        }
        timers.shuffle(using: &rng)
        let cancelled = timers[0..<3500]  // enough dead entries to force compactions
        let suspended = timers[3500..<4500]
        let resumed = suspended.prefix(500)
        for timer in cancelled { timer.cancel() }
        for timer in suspended { try timer.suspend() }
        #expect(clock.scheduler.pendingCount == 1500)
        for timer in resumed { try timer.resume() }
        #expect(clock.scheduler.pendingCount == 2000)
        clock.advance(by: .seconds(6))
        let result = fired.current
        let expected = Set(timers[4500...].map(\.id)).union(resumed.map(\.id))
        #expect(result.count == 2000)
        #expect(Set(result.map(\.0)) == expected)
        #expect(zip(result, result.dropFirst()).allSatisfy { $0.1 <= $1.1 })
        #expect(registry.count == 500, "the still-suspended timers stay registered")
        #expect(suspended.dropFirst(500).allSatisfy { $0.currentState == .suspended })
    }

    @Test func rescheduleWhileSuspendedTakesEffectOnResume() throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        let timer = try clock.schedule(.after(ms(10)), handler: log.record)
        try timer.suspend()
        try timer.reschedule(.after(ms(50)))
        clock.advance(by: ms(20))
        #expect(log.count == 0)
        try timer.resume()
        clock.advance(by: ms(40))
        #expect(log.all.map { $0.scheduled - start } == [ms(50)])
    }

    @Test(arguments: [MissedTickPolicy.skip, .delay, .burst])
    func aStalledLoopIsCaughtUpByThePolicy(_ policy: MissedTickPolicy) throws {
        let clock = self.clock
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        try clock.schedule(.every(ms(10)), missedTicks: policy, handler: log.record)
        // Nothing runs for 155 ms (a loop blocked, or in another run-loop mode), then it runs.
        clock.stall(for: ms(155))
        clock.runDue()
        let ticks = log.all
        switch policy {
        case .skip:
            #expect(ticks.count == 1, "one fire for the latest due grid point, not one per missed tick")
            #expect(ticks.first?.scheduled == start + ms(150))
            #expect(ticks.first?.missed == 14)
        case .delay:
            #expect(ticks.count == 1)
            #expect(ticks.first?.missed == 14)
            clock.advance(by: ms(10))
            #expect(log.all.last?.scheduled == start + ms(165), "the grid restarts from the late fire")
        case .burst:
            #expect(ticks.count == 15)
            #expect(ticks.allSatisfy { $0.missed == 0 })
        }
    }
}
