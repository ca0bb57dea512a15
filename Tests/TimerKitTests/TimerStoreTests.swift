import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// How the scheduler keeps its queue: resets that move a deadline later, dead entries and
/// their bound, and batches of at most `maxFiresPerCall` fires.
@Suite("Timer store")
struct TimerStoreTests {
    let registry = TimerRegistry()

    @Test func aResetToLaterFiresAtTheNewDeadlineInTheOrderOfTheReset() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let order = Locked<[String]>([])
        let start = clock.now()
        let a = try clock.schedule(.after(ms(10))) { _ in order.withLock { $0.append("a") } }
        let b = try clock.schedule(.at(start + ms(20))) { _ in order.withLock { $0.append("b") } }
        try a.reschedule(.at(start + ms(20)))  // later: queued after b, which was there first
        let c = try clock.schedule(.at(start + ms(20))) { _ in order.withLock { $0.append("c") } }
        clock.advance(by: ms(10))
        #expect(order.current.isEmpty, "the old deadline passes without a fire")
        #expect(a.currentState == .scheduled)
        clock.scheduler.checkQueueInvariants()
        clock.advance(by: ms(10))
        #expect(order.current == ["b", "a", "c"])
        #expect([a, b, c].allSatisfy { $0.currentState == .finished })
    }

    @Test func manyResetsLaterCostOneFireAtTheLastDeadline() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        let timer = try clock.schedule(.after(ms(10)), handler: log.record)
        for step in 1...1000 { try timer.reschedule(.at(start + ms(10 + step))) }
        #expect(clock.scheduler.deadEntryCount == 0, "a later reset leaves no dead entry")
        clock.advance(by: ms(1009))
        #expect(log.count == 0)
        clock.advance(by: ms(1))
        #expect(log.all.map(\.scheduled) == [start + ms(1010)])
    }

    @Test func aResetToEarlierFiresOnceAtTheEarlierDeadline() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        let timer = try clock.schedule(.after(ms(50)), handler: log.record)
        try timer.reschedule(.after(ms(5)))
        clock.advance(by: ms(5))
        #expect(log.all.map(\.scheduled) == [start + ms(5)])
        clock.advance(by: ms(100))
        #expect(log.count == 1, "the entry left at 50 ms is dead")
        #expect(clock.scheduler.pendingCount == 0)
    }

    /// Cancels, suspends and resets earlier leave dead entries; they are swept a few at a time
    /// and never outnumber the live ones, whatever the mix, and what is left fires in order.
    @Test func deadEntriesNeverOutnumberTheLiveOnes() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        var rng = SplitMix(seed: 3)
        let fired = Locked<[MonotonicInstant]>([])
        let start = clock.now()
        var timers: [TimerHandle] = []
        for _ in 0..<20_000 {
            let deadline = start + .milliseconds(Int(rng.next() % 100_000) + 1)
            timers.append(try clock.schedule(.at(deadline)) { tick in fired.withLock { $0.append(tick.scheduled) } })
        }
        var worst = 0
        for step in 0..<60_000 {
            let timer = timers[Int(rng.next() % UInt64(timers.count))]
            let deadline = start + .milliseconds(Int(rng.next() % 100_000) + 1)
            switch rng.next() % 10 {
            case 0...3: timer.cancel()
            case 4: try? timer.suspend()
            case 5: try? timer.resume()
            default: try? timer.reschedule(.at(deadline))  // earlier or later
            }
            let (dead, live) = (clock.scheduler.deadEntryCount, clock.scheduler.pendingCount)
            worst = max(worst, dead - live)
            if step % 10_000 == 0 { clock.scheduler.checkQueueInvariants() }
        }
        #expect(worst <= 0, "dead entries outnumbered live ones by \(worst)")
        clock.scheduler.checkQueueInvariants()
        let live = clock.scheduler.pendingCount
        clock.advance(by: .seconds(101))
        #expect(fired.current.count == live)
        #expect(zip(fired.current, fired.current.dropFirst()).allSatisfy { $0 <= $1 })
    }

    @Test func cancellingEveryTimerInRandomOrderKeepsTheBound() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        var rng = SplitMix(seed: 5)
        var timers: [TimerHandle] = []
        for _ in 0..<50_000 { timers.append(try clock.schedule(.after(.milliseconds(Int(rng.next() % 60_000) + 1))) { _ in }) }
        timers.shuffle(using: &rng)
        var worst = 0
        for timer in timers {
            timer.cancel()
            worst = max(worst, clock.scheduler.deadEntryCount - clock.scheduler.pendingCount)
        }
        #expect(worst <= 0, "dead entries outnumbered live ones by \(worst)")
        #expect(clock.scheduler.deadEntryCount == 0)
    }

    /// One `fireDueTimers` call runs at most `maxFiresPerCall` handlers and asks its driver to
    /// wake again at once for the rest, so a host loop serves its own work between batches.
    @Test func oneCallFiresABoundedBatchAndAsksToBeWokenForTheRest() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let fired = Counter()
        let count = TimerScheduler.maxFiresPerCall * 2 + 100
        for _ in 0..<count { try clock.schedule(.after(ms(1))) { _ in fired.increment() } }
        clock.stall(for: ms(1))  // all due, none fired
        clock.scheduler.fireDueTimers()
        #expect(fired.current == TimerScheduler.maxFiresPerCall)
        #expect(clock.requestedWakeUp <= clock.now(), "the driver is asked to wake at once for the rest")
        clock.runDue()
        #expect(fired.current == count)
    }
}
