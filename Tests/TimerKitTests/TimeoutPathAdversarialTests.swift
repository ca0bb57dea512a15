import Foundation
import Testing
import TimerKit
import TimerKitTestSupport

// Adversarial tests of the timeout path: `.after(d)` timers (monotonic, once, no name, no
// tolerance), held by key (`schedule(_:calling:)`) and by handle (`schedule(_:) { }`), and
// `reschedule(_, .after(d))`. Public API only, on ManualBackend (virtual time). Every test that
// calls back into the backend from a callback, deinit or handler runs under a watchdog, so a
// deadlock fails the test instead of hanging the run.

/// Runs something on deinit (to capture in a handler closure).
private final class OnDeinit: Sendable {
    let action: @Sendable () -> Void
    init(_ action: @escaping @Sendable () -> Void) { self.action = action }
    deinit { action() }
}

private func ms(_ n: Int) -> Duration { .milliseconds(n) }

// MARK: - Tests

@Suite("Timeout path, adversarial (ManualBackend)")
struct TimeoutPathAdversarialTests {
    // MARK: Ordering

    /// Many timeouts, many equal deadlines, both paths interleaved: they fire in deadline order,
    /// equal deadlines in scheduling order, each at its own deadline (virtual time: never late).
    @Test func manyTimeoutsFireInDeadlineThenSchedulingOrder() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let start = backend.now()
        var rng = SplitMix64(state: 42)
        var delays: [Int] = []  // in ms, by tag
        for tag in 0..<600 {
            let delay = 1 + rng.below(25)  // many collisions
            delays.append(delay)
            _ = try backend.scheduleTimeout(ms(delay), tag: tag, path: tag % 3 == 0 ? .handle : .key, log: log)
        }
        backend.advance(by: .seconds(1))
        let expected = delays.indices.sorted { (delays[$0], $0) < (delays[$1], $1) }
        #expect(log.firedTags == expected)
        for fire in log.fires {
            #expect(fire.scheduled == start + ms(delays[fire.tag]), "tag \(fire.tag) due at its deadline")
            #expect(fire.actual == fire.scheduled, "virtual time: a handler sees its own deadline")
            #expect(fire.index == 0)
        }
        #expect(log.ends.count == 600)
        #expect(log.ends.allSatisfy { $0.reason == .completed && $0.fires == 1 })
        #expect(backend.registry.count == 0)
        #expect(backend.statistics.fires == 600)
    }

    /// Rescheduled timeouts (later and earlier, from a later `now`) fire in the order of their
    /// new deadlines; none fires at its old deadline.
    @Test(arguments: TimerPath.allCases)
    fileprivate func rescheduledTimeoutsFireInNewDeadlineOrder(path: TimerPath) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let start = backend.now()
        var rng = SplitMix64(state: 7)
        var held: [HeldTimer] = []
        // Deadlines in µs since start, distinct across all timers (no ties to argue about).
        var deadline: [Int] = []
        var used = Set<Int>()
        func fresh(_ lower: Int) -> Int {
            var value = lower + rng.below(50_000)
            while used.contains(value) { value += 1 }
            used.insert(value)
            return value
        }
        for tag in 0..<300 {
            let due = fresh(10_000)
            deadline.append(due)
            held.append(try backend.scheduleTimeout(.microseconds(due), tag: tag, path: path, log: log))
        }
        // Advance to 5 ms (nothing is due yet), then move half of them, from the new now.
        backend.advance(by: .microseconds(5_000))
        #expect(log.fires.isEmpty)
        var moved = Set<Int>()
        for tag in 0..<300 where rng.below(2) == 0 {
            let due = fresh(5_001)  // anywhere from just after now to beyond the others
            used.remove(deadline[tag])
            deadline[tag] = due
            moved.insert(tag)
            try backend.reschedule(held: held[tag], after: .microseconds(due - 5_000))
        }
        // Walk the clock in 1 µs-granular steps past every deadline and check each step.
        let last = deadline.max()!
        var step = 5_000
        while step < last + 10 {
            step += 997
            backend.advance(to: start + .microseconds(step))
            let fired = Set(log.firedTags)
            let due = Set(deadline.indices.filter { deadline[$0] <= step })
            #expect(fired == due, "at \(step) µs: fired exactly the timers due by then")
            if fired != due { break }
        }
        let expected = deadline.indices.sorted { deadline[$0] < deadline[$1] }
        #expect(log.firedTags == expected)
        for fire in log.fires {
            #expect(fire.scheduled == start + .microseconds(deadline[fire.tag]), "tag \(fire.tag) (moved: \(moved.contains(fire.tag)))")
        }
        #expect(log.ends.count == 300 && log.ends.allSatisfy { $0.reason == .completed && $0.fires == 1 })
    }

    /// A timer moved onto the deadline of an existing one, later or earlier: timers with equal
    /// deadlines fire in the order they were scheduled or last rescheduled, on both paths.
    @Test func aTimerMovedOntoAnotherOnesDeadlineOrdersTheSameForKeysAndHandles() throws {
        var orders: [TimerPath: [Int]] = [:]
        for path in TimerPath.allCases {
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let a = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log)
            _ = try backend.scheduleTimeout(ms(20), tag: 1, path: path, log: log)
            let c = try backend.scheduleTimeout(ms(30), tag: 2, path: path, log: log)
            try backend.reschedule(held: a, after: ms(20))  // later, onto 1's deadline
            try backend.reschedule(held: c, after: ms(20))  // earlier, onto 1's deadline
            backend.advance(by: ms(15))
            #expect(log.fires.isEmpty, "\(path): nothing fires at a's old deadline")
            backend.advance(by: ms(5))
            orders[path] = log.firedTags
            #expect(Set(log.firedTags) == [0, 1, 2])
        }
        #expect(orders[.key] == [1, 0, 2], "1 was scheduled before 0 and 2 were rescheduled onto its deadline")
        #expect(orders[.handle] == [1, 0, 2])
    }

    /// Rescheduling to the same deadline many times does not lose or duplicate a timer, and an
    /// equal-deadline sibling scheduled later keeps its place after it, or before it if
    /// rescheduling counts as scheduling — but the timer fires exactly once either way.
    @Test(arguments: TimerPath.allCases)
    fileprivate func rescheduleToTheSameDeadlineManyTimesFiresOnce(path: TimerPath) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let held = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log)
        for _ in 0..<10_000 { try backend.reschedule(held: held, after: ms(10)) }
        backend.advance(by: ms(9))
        #expect(log.fires.isEmpty)
        backend.advance(by: ms(1))
        #expect(log.firedTags == [0])
        backend.advance(by: .seconds(10))
        #expect(log.firedTags == [0])
        #expect(log.ends == [.init(tag: 0, reason: .completed, fires: 1)])
    }

    /// The earliest timer cancelled (or moved later): the next one still fires on time, not
    /// before; a timer moved earlier fires at its new deadline.
    @Test(arguments: TimerPath.allCases)
    fileprivate func cancellingOrMovingTheEarliestKeepsTheNextOnTime(path: TimerPath) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let start = backend.now()
        let a = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log)
        let b = try backend.scheduleTimeout(ms(20), tag: 1, path: path, log: log)
        let c = try backend.scheduleTimeout(ms(30), tag: 2, path: path, log: log)
        let d = try backend.scheduleTimeout(.seconds(100), tag: 3, path: path, log: log)
        backend.cancel(held: a)
        try backend.reschedule(held: b, after: ms(40))  // the earliest now, moved later
        try backend.reschedule(held: d, after: ms(25))  // moved earlier, before c
        #expect(backend.requestedWakeUp <= start + ms(25), "the loop is asked to wake by the new earliest deadline")
        backend.advance(to: start + ms(24))
        #expect(log.fires.isEmpty, "nothing due before 25 ms: a at 10 was cancelled, b at 20 moved to 40")
        backend.advance(to: start + ms(25))
        #expect(log.firedTags == [3])
        backend.advance(to: start + ms(30))
        #expect(log.firedTags == [3, 2])
        backend.advance(to: start + ms(39))
        #expect(log.firedTags == [3, 2])
        backend.advance(to: start + ms(40))
        #expect(log.firedTags == [3, 2, 1])
        #expect(log.fires.map(\.actual) == [start + ms(25), start + ms(30), start + ms(40)])
        #expect(!backend.isActive(held: a) && !backend.isActive(held: b) && !backend.isActive(held: c) && !backend.isActive(held: d))
        #expect(log.ends(of: 0) == [.init(tag: 0, reason: .cancelled, fires: 0)])
    }

    // MARK: Ended keys and handles

    /// Every operation on an ended timer: cancel is a no-op (twice), the others throw
    /// `timerEnded` with the right state, nothing crashes, and the end is reported once.
    @Test(arguments: TimerPath.allCases, [false, true])
    fileprivate func operationsOnAnEndedTimerThrowTypedErrors(path: TimerPath, fired: Bool) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let held = try backend.scheduleTimeout(ms(1), tag: 0, path: path, log: log)
        if fired { backend.advance(by: ms(1)) } else { backend.cancel(held: held) }
        backend.cancel(held: held)
        backend.cancel(held: held)
        let state: TimerState = fired ? .finished : .cancelled
        #expect(!backend.isActive(held: held))
        for (what, call) in [
            ("reschedule", { () throws(TimerError) in try backend.reschedule(held: held, after: ms(1)) }),
            ("reschedule(.zero)", { () throws(TimerError) in try backend.reschedule(held: held, after: .zero) }),
            ("suspend", { () throws(TimerError) in try backend.suspend(held: held) }),
            ("resume", { () throws(TimerError) in try backend.resume(held: held) }),
        ] as [(String, () throws(TimerError) -> Void)] {
            do {
                try call()
                Issue.record("\(what) of an ended timer did not throw")
            } catch {
                #expect(isEndedError(error, of: held, state: state), "\(what): \(error)")
            }
        }
        backend.advance(by: .seconds(1))
        #expect(log.fires.count == (fired ? 1 : 0))
        #expect(log.ends == [.init(tag: 0, reason: fired ? .completed : .cancelled, fires: fired ? 1 : 0)])
        if case let .handle(handle) = held {
            #expect(handle.currentState == state)
            #expect(handle.endReason == (fired ? .completed : .cancelled))
            #expect(handle.fireCount == (fired ? 1 : 0))
        }
    }

    /// A slot reused 150 000 times (cancel, schedule again): no old key reaches the new timer —
    /// not `isActive`, not `cancel`, not `reschedule`, not `suspend` — however many generations
    /// went by (more than 2^16 and 2^17, so a narrow generation counter would wrap).
    @Test func oldKeysNeverReachTheTimerThatReusedTheirSlot() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let callback = LoggingCallback(tag: 0, log: log)
        var old: [TimerKey] = []
        old.reserveCapacity(150_000)
        for i in 0..<150_000 {
            let key = try backend.schedule(.after(.seconds(1)), calling: callback)
            if i % 2 == 0 {
                backend.cancel(key)
            } else {
                try backend.reschedule(key, .after(.zero))
                backend.runDue()  // fires and finishes
            }
            old.append(key)
        }
        #expect(Set(old).count == old.count, "every key is distinct")
        let liveLog = TimerLog()
        let live = try backend.schedule(.after(ms(10)), calling: LoggingCallback(tag: 1, log: liveLog))
        #expect(!old.contains(live))
        var activeOld = 0
        var rescheduled = 0
        var suspended = 0
        for key in old {
            if backend.isActive(key) { activeOld += 1 }
            backend.cancel(key)
            if (try? backend.reschedule(key, .after(.seconds(100)))) != nil { rescheduled += 1 }
            if (try? backend.suspend(key)) != nil { suspended += 1 }
        }
        #expect(activeOld == 0)
        #expect(rescheduled == 0)
        #expect(suspended == 0)
        #expect(backend.isActive(live), "old keys did not cancel the new timer")
        backend.advance(by: ms(10))
        #expect(liveLog.fires.count == 1, "old keys did not move or suspend the new timer")
        #expect(liveLog.ends == [.init(tag: 1, reason: .completed, fires: 1)])
        #expect(log.ends.count == 150_000, "every old timer ended once")
        #expect(log.ends.filter { $0.reason == .cancelled }.count == 75_000)
        #expect(log.ends.filter { $0.reason == .completed && $0.fires == 1 }.count == 75_000)
    }

    /// Handles of ended timers whose slot another timer took: the old handle still answers its
    /// own facts, its name is not the new timer's, and its calls never reach the new timer.
    @Test func anOldHandleNeverReachesTheTimerThatReusedItsSlot() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let fired = Locked(0)
        let first = try backend.schedule(.after(ms(1))) { _ in fired.withLock { $0 += 1 } }
        let firstName = first.name
        let firstID = first.id
        backend.advance(by: ms(1))
        #expect(first.currentState == .finished)
        var handles: [TimerHandle] = [first]
        for _ in 0..<1000 {
            let handle = try backend.schedule(.after(ms(5))) { _ in }
            handle.cancel()
            handles.append(handle)
        }
        let live = try backend.schedule(.after(ms(5))) { _ in fired.withLock { $0 += 100 } }
        #expect(Set(handles.map(\.id)).count == handles.count, "ids are never reused")
        #expect(!handles.map(\.id).contains(live.id))
        #expect(Set(handles.map(\.name)).count == handles.count, "generated names are never reused")
        #expect(!handles.map(\.name).contains(live.name))
        for handle in handles {
            handle.cancel()
            #expect(throws: TimerError.self) { try handle.reschedule(.after(.seconds(1))) }
            #expect(throws: TimerError.self) { try handle.suspend() }
        }
        #expect(first.name == firstName && first.id == firstID)
        #expect(first.currentState == .finished && first.fireCount == 1 && first.endReason == .completed)
        #expect(handles.dropFirst().allSatisfy { $0.currentState == .cancelled && $0.fireCount == 0 && $0.endReason == .cancelled })
        #expect(live.isActive && live.currentState == .scheduled)
        backend.advance(by: ms(5))
        #expect(fired.current == 101)
        #expect(live.currentState == .finished && live.fireCount == 1)
        #expect(first.fireCount == 1, "the old handle did not take the new timer's fire")
    }

    /// A key of another backend, whose slot and generation equal a live key's there (each
    /// backend has a registry of its own, so both hand out the same slot numbers), is refused
    /// and changes nothing on either backend.
    @Test func aKeyOfAnotherBackendWithTheSameSlotChangesNothing() throws {
        let a = ManualBackend(registry: TimerRegistry())
        let b = ManualBackend(registry: TimerRegistry())
        defer {
            a.shutdown()
            b.shutdown()
        }
        let logA = TimerLog()
        let logB = TimerLog()
        let keyA = try a.schedule(.after(ms(10)), calling: LoggingCallback(tag: 0, log: logA))
        let keyB = try b.schedule(.after(ms(10)), calling: LoggingCallback(tag: 1, log: logB))
        #expect(keyA != keyB)
        #expect(!b.isActive(keyA) && !a.isActive(keyB))
        b.cancel(keyA)
        a.cancel(keyB)
        for (what, call) in [
            ("reschedule", { () throws(TimerError) in try b.reschedule(keyA, .after(.seconds(100))) }),
            ("suspend", { () throws(TimerError) in try b.suspend(keyA) }),
            ("resume", { () throws(TimerError) in try b.resume(keyA) }),
        ] as [(String, () throws(TimerError) -> Void)] {
            do {
                try call()
                Issue.record("\(what) with another backend's key did not throw")
            } catch {
                if case .invalidOption = error {} else { Issue.record("\(what): expected invalidOption, got \(error)") }
            }
        }
        #expect(a.isActive(keyA) && b.isActive(keyB))
        a.advance(by: ms(10))
        b.advance(by: ms(10))
        #expect(logA.fires.count == 1 && logB.fires.count == 1)
    }

    /// A backend that shut down and went away; a new backend on the same registry takes its
    /// chunk of slots back (generations kept). The old backend's keys must not reach the new
    /// backend's timers.
    @Test func keysOfAGoneBackendDoNotReachTheNextBackendOnTheSameRegistry() throws {
        let registry = TimerRegistry()
        var oldKeys: [TimerKey] = []
        do {
            let old = ManualBackend(registry: registry)
            let callback = LoggingCallback(tag: 0, log: TimerLog())
            for _ in 0..<64 { oldKeys.append(try old.schedule(.after(.seconds(1)), calling: callback)) }
            old.shutdown()
        }
        let next = ManualBackend(registry: registry)
        defer { next.shutdown() }
        let log = TimerLog()
        var keys: [TimerKey] = []
        for tag in 0..<64 { keys.append(try next.schedule(.after(ms(10)), calling: LoggingCallback(tag: tag, log: log))) }
        for key in oldKeys {
            #expect(!next.isActive(key))
            next.cancel(key)
            #expect(throws: TimerError.self) { try next.reschedule(key, .after(.seconds(100))) }
        }
        #expect(keys.allSatisfy { next.isActive($0) })
        next.advance(by: ms(10))
        #expect(Set(log.firedTags) == Set(0..<64))
    }

    // MARK: End callbacks

    /// `timerEnded` comes exactly once per timer, with the right reason and fire count, for
    /// every way a timeout ends; statistics count the cancels (not the shutdown's).
    @Test func everyEndIsReportedOnceWithItsReasonAndFires() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        let log = TimerLog()
        func callback(_ tag: Int) -> LoggingCallback { LoggingCallback(tag: tag, log: log) }
        let cancelled = try backend.schedule(.after(ms(10)), calling: callback(0))
        let fired = try backend.schedule(.after(ms(10)), calling: callback(1))
        let movedThenFired = try backend.schedule(.after(ms(10)), calling: callback(2))
        _ = try backend.schedule(.after(.seconds(100)), calling: callback(3))  // ended by shutdown
        let cancelledTwice = try backend.schedule(.after(ms(10)), calling: callback(4))
        _ = try backend.schedule(.after(ms(10)), name: "by-name", calling: callback(5))
        let movedEarlier = try backend.schedule(.after(.seconds(50)), calling: callback(6))
        let suspendedThenCancelled = try backend.schedule(.after(ms(10)), calling: callback(7))
        backend.cancel(cancelled)
        backend.cancel(cancelledTwice)
        backend.cancel(cancelledTwice)
        try registry.cancel(named: "by-name")
        try backend.reschedule(movedThenFired, .after(ms(20)))
        try backend.reschedule(movedEarlier, .after(ms(1)))
        try backend.suspend(suspendedThenCancelled)
        backend.advance(by: ms(30))
        backend.cancel(suspendedThenCancelled)
        backend.cancel(fired)  // after it fired: nothing
        let beforeShutdown = backend.statistics
        backend.shutdown()
        backend.shutdown()
        #expect(log.ends(of: 0) == [.init(tag: 0, reason: .cancelled, fires: 0)])
        #expect(log.ends(of: 1) == [.init(tag: 1, reason: .completed, fires: 1)])
        #expect(log.ends(of: 2) == [.init(tag: 2, reason: .completed, fires: 1)])
        #expect(log.ends(of: 3) == [.init(tag: 3, reason: .backendShutDown, fires: 0)])
        #expect(log.ends(of: 4) == [.init(tag: 4, reason: .cancelled, fires: 0)])
        #expect(log.ends(of: 5) == [.init(tag: 5, reason: .cancelledByName, fires: 0)])
        #expect(log.ends(of: 6) == [.init(tag: 6, reason: .completed, fires: 1)])
        #expect(log.ends(of: 7) == [.init(tag: 7, reason: .cancelled, fires: 0)])
        #expect(log.ends.count == 8)
        #expect(beforeShutdown.fires == 3)
        #expect(beforeShutdown.cancels == 4, "cancel, cancel (twice: once), by name, suspended-then-cancelled")
        #expect(beforeShutdown.liveTimers == 1)
        #expect(registry.count == 0)
    }

    /// `registry.cancelAll()` ends key timeouts with `.cancelledByCancelAll`, once each.
    @Test func cancelAllEndsKeyTimeoutsOnceEach() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let log = TimerLog()
        for tag in 0..<50 { _ = try backend.scheduleTimeout(ms(10 + tag), tag: tag, path: tag % 2 == 0 ? .key : .handle, log: log) }
        registry.cancelAll()
        registry.cancelAll()
        backend.advance(by: .seconds(1))
        #expect(log.fires.isEmpty)
        #expect(log.ends.count == 50)
        #expect(log.ends.allSatisfy { $0.reason == .cancelledByCancelAll && $0.fires == 0 })
        #expect(registry.count == 0)
    }

    /// A callback whose `timerEnded` calls back into the backend — schedules a timeout, cancels
    /// another, reschedules a third, reschedules and cancels its own (ended) key — on every
    /// path that ends a timer: cancel, fire, registry cancel. Nothing deadlocks, and what it
    /// did takes effect.
    @Test(arguments: ["cancel", "fire", "cancelByName"])
    func timerEndedThatCallsBackIntoTheBackend(how: String) throws {
        let result = try runUnderWatchdog(10, "timerEnded re-entering the backend (\(how))") { () throws -> [String] in
            let registry = TimerRegistry()
            let backend = ManualBackend(registry: registry)
            defer { backend.shutdown() }
            let log = TimerLog()
            let victim = try backend.schedule(.after(ms(50)), calling: LoggingCallback(tag: 1, log: log))
            let mover = try backend.schedule(.after(.seconds(100)), calling: LoggingCallback(tag: 2, log: log))
            let problems = Locked<[String]>([])
            let ender = LoggingCallback(
                tag: 0, log: log,
                onEnded: { key, _, _ in
                    do {
                        _ = try backend.schedule(.after(ms(5)), calling: LoggingCallback(tag: 3, log: log))
                        backend.cancel(victim)
                        try backend.reschedule(mover, .after(ms(5)))
                        backend.cancel(key)
                        if (try? backend.reschedule(key, .after(ms(1)))) != nil {
                            problems.withLock { $0.append("rescheduling the ended key inside its timerEnded succeeded") }
                        }
                        if backend.isActive(key) { problems.withLock { $0.append("the ended key is active in its timerEnded") } }
                    } catch {
                        problems.withLock { $0.append("re-entrant call threw \(error)") }
                    }
                })
            let key = try backend.schedule(.after(ms(10)), name: "ender", calling: ender)
            switch how {
            case "cancel": backend.cancel(key)
            case "fire": backend.advance(by: ms(10))
            default: try registry.cancel(named: "ender")
            }
            backend.advance(by: ms(100))
            var out = problems.current
            let ends = log.ends
            if ends.filter({ $0.tag == 0 }).count != 1 { out.append("ender ended \(ends.filter { $0.tag == 0 }.count) times") }
            if log.fireCount(of: 1) != 0 { out.append("the victim fired after its cancel") }
            if log.fireCount(of: 2) != 1 { out.append("the mover fired \(log.fireCount(of: 2)) times, not once at its new deadline") }
            if log.fireCount(of: 3) != 1 { out.append("the timer scheduled in timerEnded fired \(log.fireCount(of: 3)) times") }
            if !ends.contains(.init(tag: 1, reason: .cancelled, fires: 0)) { out.append("the victim's end: \(ends)") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// A callback object whose `deinit` calls back into the backend (schedules, cancels,
    /// reschedules): the backend lets go of it after `timerEnded`, outside its locks, on
    /// cancel, fire and shutdown. No deadlock; the calls take effect (or, after shutdown,
    /// throw `backendShutDown`).
    @Test(arguments: ["cancel", "fire", "shutdown"])
    func aCallbackWhoseDeinitCallsBackIntoTheBackend(how: String) throws {
        let result = try runUnderWatchdog(10, "callback deinit re-entering the backend (\(how))") { () throws -> [String] in
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let victim = try backend.schedule(.after(ms(50)), calling: LoggingCallback(tag: 1, log: log))
            let mover = try backend.schedule(.after(.seconds(100)), calling: LoggingCallback(tag: 2, log: log))
            let outcome = Locked<[String]>([])
            let deinitRan = Locked(false)
            let key = try backend.schedule(
                .after(ms(10)),
                calling: LoggingCallback(
                    tag: 0, log: log,
                    onDeinit: {
                        deinitRan.withLock { $0 = true }
                        backend.cancel(victim)
                        do {
                            _ = try backend.schedule(.after(ms(5)), calling: LoggingCallback(tag: 3, log: log))
                            try backend.reschedule(mover, .after(ms(5)))
                        } catch {
                            outcome.withLock { $0.append("threw \(error)") }
                        }
                    }))
            switch how {
            case "cancel": backend.cancel(key)
            case "fire": backend.advance(by: ms(10))
            default: backend.shutdown()
            }
            backend.advance(by: ms(100))
            var out: [String] = []
            if !deinitRan.current { out.append("the callback was not released after its end") }
            if how == "shutdown" {
                let errors = outcome.current
                if errors.count != 1 || !errors[0].contains("backendShutDown") && !errors[0].contains("shut down") {
                    out.append("after shutdown, schedule in deinit: \(errors)")
                }
            } else {
                out += outcome.current
                if log.fireCount(of: 1) != 0 { out.append("the victim fired after its cancel") }
                if log.fireCount(of: 2) != 1 { out.append("the mover fired \(log.fireCount(of: 2)) times") }
                if log.fireCount(of: 3) != 1 { out.append("the timer scheduled in deinit fired \(log.fireCount(of: 3)) times") }
            }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// A handler closure whose capture's `deinit` calls back into the backend, released on
    /// cancel, on fire and at shutdown.
    @Test(arguments: ["cancel", "fire", "shutdown"])
    func aHandlerCaptureWhoseDeinitCallsBackIntoTheBackend(how: String) throws {
        let result = try runUnderWatchdog(10, "handler capture deinit re-entering the backend (\(how))") { () throws -> [String] in
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let victim = try backend.schedule(.after(ms(50))) { _ in
                log.fired(1, index: 0, scheduled: .distantFuture, actual: .distantFuture)
            }
            let ran = Locked(false)
            let errors = Locked<[String]>([])
            var handle: TimerHandle? = nil
            do {
                let capture = OnDeinit {
                    ran.withLock { $0 = true }
                    victim.cancel()
                    do {
                        try backend.schedule(.after(ms(5))) { _ in log.fired(3, index: 0, scheduled: .distantFuture, actual: .distantFuture)
                        }
                    } catch { errors.withLock { $0.append("\(error)") } }
                }
                handle = try backend.schedule(.after(ms(10))) { _ in _ = capture }
            }
            switch how {
            case "cancel": handle?.cancel()
            case "fire": backend.advance(by: ms(10))
            default: backend.shutdown()
            }
            backend.advance(by: ms(100))
            var out: [String] = []
            if !ran.current { out.append("the handler's capture was not released after the end") }
            if how != "shutdown" {
                out += errors.current
                if log.fireCount(of: 1) != 0 { out.append("the victim fired after its cancel") }
                if log.fireCount(of: 3) != 1 { out.append("the timer scheduled in deinit fired \(log.fireCount(of: 3)) times") }
            } else if errors.current.count != 1 {
                out.append("after shutdown: \(errors.current)")
            }
            _ = handle
            return out
        }
        if let result { #expect(result == []) }
    }

    /// One-shots that reschedule themselves from their own call (`Tick.timer`: "handlers use it
    /// to cancel or reschedule themselves"; for a key, `fire.key`), five times: six calls, one
    /// end, `.completed` with 6 fires.
    @Test(arguments: TimerPath.allCases)
    fileprivate func aOneShotReschedulingItselfFromItsCall(path: TimerPath) throws {
        let result = try runUnderWatchdog(10, "self-rescheduling one-shot (\(path))") {
            () throws -> (fires: Int, ends: [TimerLog.End], error: String?) in
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let failure = Locked<String?>(nil)
            switch path {
            case .key:
                let calls = Locked(0)
                _ = try backend.schedule(
                    .after(ms(10)),
                    calling: LoggingCallback(
                        tag: 0, log: log,
                        onFire: { fire in
                            let n = calls.withLock {
                                $0 += 1
                                return $0
                            }
                            if n <= 5 {
                                do { try backend.reschedule(fire.key, .after(ms(10))) } catch { failure.withLock { $0 = "\(error)" } }
                            }
                        }))
            case .handle:
                let handle = try backend.schedule(.after(ms(10))) { tick in
                    log.fired(0, index: tick.index, scheduled: tick.scheduled, actual: tick.actual)
                    if tick.index < 5 {
                        do { try tick.timer.reschedule(.after(ms(10))) } catch { failure.withLock { $0 = "\(error)" } }
                    }
                }
                handle.onEnd { [handle] reason in log.ended(0, reason, fires: handle.fireCount) }
            }
            backend.advance(by: .seconds(1))
            return (log.fires.count, log.ends, failure.current)
        }
        if let result {
            #expect(result.error == nil, "rescheduling itself from its call threw")
            #expect(result.fires == 6)
            #expect(result.ends == [.init(tag: 0, reason: .completed, fires: 6)])
        }
    }

    /// A one-shot rescheduled from another thread while its call runs (the call waits for that
    /// reschedule to return): the reschedule succeeds, and the timer makes a second call at its
    /// new deadline, on both paths.
    @Test(arguments: TimerPath.allCases)
    fileprivate func aOneShotRescheduledFromAnotherThreadDuringItsCallMakesAnother(path: TimerPath) throws {
        let result = try runUnderWatchdog(10, "reschedule from another thread during the call (\(path))") {
            () throws -> (fires: [TimerLog.Fire], ends: [TimerLog.End], error: String?) in
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let held = Locked<HeldTimer?>(nil)
            let failure = Locked<String?>(nil)
            let timer = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log) {
                guard log.fires.count == 1, let timer = held.current else { return }
                let done = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    do { try backend.reschedule(held: timer, after: ms(20)) } catch { failure.withLock { $0 = "\(error)" } }
                    done.signal()
                }
                done.wait()
            }
            held.withLock { $0 = timer }
            backend.advance(by: ms(10))
            backend.advance(by: ms(19))
            let firesBefore = log.fires.count
            backend.advance(by: ms(1))
            if firesBefore != 1 { failure.withLock { $0 = "\(firesBefore) calls before the new deadline" } }
            backend.advance(by: .seconds(1))
            return (log.fires, log.ends, failure.current)
        }
        if let result {
            #expect(result.error == nil)
            #expect(result.fires.count == 2)
            #expect(
                result.fires.last.map { $0.scheduled - result.fires[0].scheduled } == ms(20), "the second call is due 20 ms after the first"
            )
            #expect(result.ends == [.init(tag: 0, reason: .completed, fires: 2)])
        }
    }

    /// A one-shot that ends itself from its own (only) call, by cancelling itself or by shutting
    /// its backend down: a timer is live until its last call returns, so it ends for that
    /// reason, with the call counted, on both paths.
    @Test func aOneShotEndingItselfFromItsCall() throws {
        let result = try runUnderWatchdog(10, "one-shots ending themselves") { () throws -> [String: [TimerLog.End]] in
            var out: [String: [TimerLog.End]] = [:]
            for path in TimerPath.allCases {
                for how in ["cancel", "shutdown"] {
                    let backend = ManualBackend(registry: TimerRegistry())
                    defer { backend.shutdown() }
                    let log = TimerLog()
                    let me = Locked<HeldTimer?>(nil)
                    me.withLock {
                        $0 = try? backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log) {
                            if how == "cancel" { backend.cancel(held: me.current!) } else { backend.shutdown() }
                        }
                    }
                    backend.advance(by: ms(10))
                    out["\(path)/\(how)"] = log.ends
                    if case let .handle(handle)? = me.current {
                        out["\(path)/\(how)/state"] = [
                            .init(tag: handle.fireCount, reason: handle.endReason ?? .completed, fires: Int(handle.currentState.rawValue))
                        ]
                    }
                }
            }
            return out
        }
        guard let result else { return }
        #expect(result["key/cancel"] == [.init(tag: 0, reason: .cancelled, fires: 1)])
        #expect(result["key/shutdown"] == [.init(tag: 0, reason: .backendShutDown, fires: 1)])
        #expect(result["key/cancel"] == result["handle/cancel"], "keys and handles agree on a self-cancel")
        #expect(result["key/shutdown"] == result["handle/shutdown"], "keys and handles agree on a self-shutdown")
        let cancelReason = result["key/cancel"]?.first?.reason
        let shutdownReason = result["key/shutdown"]?.first?.reason
        let oneModel = (cancelReason == .completed) == (shutdownReason == .completed)
        #expect(oneModel, "self-cancel ends \(String(describing: cancelReason)), self-shutdown ends \(String(describing: shutdownReason))")
        for (name, ends) in result where !name.hasSuffix("/state") {
            #expect(ends.count == 1 && ends[0].fires == 1, "\(name): \(ends)")
        }
    }

    // MARK: Caps

    /// The backend's cap refuses the next timeout on both paths with its documented error,
    /// counts each refusal, and the next schedule after a timer ends (cancelled, fired) works.
    /// A reschedule at the cap is no new timer and is never refused.
    @Test func theBackendsCapRefusesCountsAndRecovers() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        try backend.limitLiveTimers(to: 3)
        #expect(backend.maxLiveTimers == 3)
        let a = try backend.scheduleTimeout(ms(10), tag: 0, path: .key, log: log)
        _ = try backend.scheduleTimeout(ms(20), tag: 1, path: .handle, log: log)
        let c = try backend.scheduleTimeout(ms(30), tag: 2, path: .key, log: log)
        let refusal = TimerError.liveTimerLimit(scope: "manual backend", limit: 3)
        for (i, path) in [TimerPath.key, .handle, .key, .handle].enumerated() {
            #expect(throws: refusal) { try backend.scheduleTimeout(ms(1), tag: 100 + i, path: path, log: log) }
        }
        #expect(backend.refusedByLiveTimerLimit == 4)
        #expect(backend.statistics.liveTimers == 3)
        #expect(backend.registry.count == 3)
        // A reschedule at the cap is no new timer.
        try backend.reschedule(held: a, after: ms(5))
        try backend.reschedule(held: c, after: ms(6))
        #expect(backend.refusedByLiveTimerLimit == 4)
        backend.cancel(held: c)
        _ = try backend.scheduleTimeout(ms(40), tag: 3, path: .handle, log: log)
        #expect(throws: refusal) { try backend.scheduleTimeout(ms(1), tag: 104, path: .key, log: log) }
        backend.advance(by: ms(5))  // a fires
        #expect(log.firedTags == [0])
        _ = try backend.scheduleTimeout(ms(1), tag: 4, path: .key, log: log)
        backend.advance(by: .seconds(1))
        #expect(log.firedTags == [0, 4, 1, 3])
        #expect(backend.refusedByLiveTimerLimit == 5)
        // A timer refused at a cap was never added: no fire, and its callback hears no end.
        for tag in 100...104 {
            #expect(log.fireCount(of: tag) == 0)
            #expect(log.ends(of: tag).isEmpty, "tag \(tag): \(log.ends(of: tag))")
        }
    }

    /// At the cap, a timer's end makes room: `timerEnded` (and a handle's `onEnd`) that
    /// schedules the replacement must succeed, since the ended timer is no longer live.
    @Test(arguments: TimerPath.allCases, ["cancel", "fire"])
    fileprivate func aReplacementScheduledFromTheEndCallbackAtTheCapIsAccepted(path: TimerPath, how: String) throws {
        let result = try runUnderWatchdog(10, "replacement at the cap (\(path), \(how))") { () throws -> [String] in
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            try backend.limitLiveTimers(to: 1)
            let log = TimerLog()
            let problems = Locked<[String]>([])
            let replace: @Sendable () -> Void = {
                do { _ = try backend.schedule(.after(ms(5)), calling: LoggingCallback(tag: 1, log: log)) } catch {
                    problems.withLock { $0.append("replacement refused: \(error)") }
                }
            }
            let held: HeldTimer
            switch path {
            case .key:
                held = .key(
                    try backend.schedule(.after(ms(10)), calling: LoggingCallback(tag: 0, log: log, onEnded: { _, _, _ in replace() })))
            case .handle:
                let handle = try backend.schedule(.after(ms(10))) { _ in }
                handle.onEnd { _ in replace() }
                held = .handle(handle)
            }
            if how == "cancel" { backend.cancel(held: held) } else { backend.advance(by: ms(10)) }
            backend.advance(by: ms(100))
            var out = problems.current
            if log.fireCount(of: 1) != 1 { out.append("the replacement fired \(log.fireCount(of: 1)) times") }
            if backend.refusedByLiveTimerLimit != 0 { out.append("refusals: \(backend.refusedByLiveTimerLimit)") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// The registry's cap, shared by two backends: refuses with scope "registry", counts, and a
    /// backend's shutdown (which ends its timers) makes room on the other.
    @Test func theRegistryCapAcrossTwoBackends() throws {
        let registry = TimerRegistry()
        try registry.limitLiveTimers(to: 4)
        let a = ManualBackend(registry: registry)
        let b = ManualBackend(registry: registry)
        defer { b.shutdown() }
        let log = TimerLog()
        _ = try a.scheduleTimeout(ms(10), tag: 0, path: .key, log: log)
        _ = try a.scheduleTimeout(ms(10), tag: 1, path: .handle, log: log)
        _ = try b.scheduleTimeout(ms(10), tag: 2, path: .key, log: log)
        _ = try b.scheduleTimeout(ms(10), tag: 3, path: .handle, log: log)
        let refusal = TimerError.liveTimerLimit(scope: "registry", limit: 4)
        #expect(throws: refusal) { try a.scheduleTimeout(ms(1), tag: 10, path: .key, log: log) }
        #expect(throws: refusal) { try b.scheduleTimeout(ms(1), tag: 11, path: .handle, log: log) }
        #expect(registry.refusedByLiveTimerLimit == 2)
        #expect(registry.count == 4)
        a.shutdown()
        #expect(registry.count == 2)
        _ = try b.scheduleTimeout(ms(1), tag: 4, path: .key, log: log)
        _ = try b.scheduleTimeout(ms(1), tag: 5, path: .handle, log: log)
        #expect(throws: refusal) { try b.scheduleTimeout(ms(1), tag: 12, path: .key, log: log) }
        b.advance(by: ms(10))
        #expect(Set(log.firedTags) == [2, 3, 4, 5])
        #expect(registry.count == 0)
        #expect(throws: TimerError.self) { try registry.limitLiveTimers(to: -1) }
        #expect(throws: TimerError.self) { try b.limitLiveTimers(to: -1) }
    }

    /// A cap lowered below the live count keeps the live timers (they still fire) and refuses
    /// new ones until enough have ended.
    @Test func aCapLoweredBelowTheLiveCount() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        var held: [HeldTimer] = []
        for tag in 0..<5 { held.append(try backend.scheduleTimeout(ms(10 + tag), tag: tag, path: tag % 2 == 0 ? .key : .handle, log: log)) }
        try backend.limitLiveTimers(to: 2)
        #expect(held.allSatisfy { backend.isActive(held: $0) })
        #expect(throws: TimerError.liveTimerLimit(scope: "manual backend", limit: 2)) {
            try backend.scheduleTimeout(ms(1), tag: 9, path: .key, log: log)
        }
        backend.cancel(held: held[0])
        backend.cancel(held: held[1])
        #expect(throws: TimerError.liveTimerLimit(scope: "manual backend", limit: 2)) {
            try backend.scheduleTimeout(ms(1), tag: 9, path: .handle, log: log)
        }
        backend.cancel(held: held[2])
        #expect(throws: TimerError.liveTimerLimit(scope: "manual backend", limit: 2), "2 live at a cap of 2: still full") {
            try backend.scheduleTimeout(ms(1), tag: 9, path: .key, log: log)
        }
        backend.cancel(held: held[3])
        _ = try backend.scheduleTimeout(ms(1), tag: 5, path: .key, log: log)
        backend.advance(by: ms(100))
        #expect(log.firedTags == [5, 4])
        #expect(log.fireCount(of: 9) == 0)
        try backend.limitLiveTimers(to: nil)
        #expect(backend.maxLiveTimers == nil)
    }

    // MARK: Shutdown

    /// After shutdown, a timeout on either path throws `backendShutDown`; an old key's calls are
    /// refused with a typed error (or do nothing); nothing fires.
    @Test func afterShutdownTimeoutsAreRefused() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let log = TimerLog()
        let key = try backend.scheduleTimeout(ms(10), tag: 0, path: .key, log: log)
        let handle = try backend.scheduleTimeout(ms(10), tag: 1, path: .handle, log: log)
        backend.shutdown()
        for path in TimerPath.allCases {
            #expect(throws: TimerError.backendShutDown(backend: "manual")) {
                try backend.scheduleTimeout(ms(1), tag: 9, path: path, log: log)
            }
            #expect(throws: TimerError.backendShutDown(backend: "manual")) {
                try backend.scheduleTimeout(.zero, tag: 9, path: path, log: log)
            }
        }
        for held in [key, handle] {
            #expect(!backend.isActive(held: held))
            backend.cancel(held: held)
            do {
                try backend.reschedule(held: held, after: ms(1))
                Issue.record("reschedule after shutdown did not throw")
            } catch {
                // Its timer has ended: the key or handle answers only that.
                #expect(isEndedError(error, of: held, state: .cancelled), "reschedule after shutdown: \(error)")
            }
        }
        backend.advance(by: .seconds(1))
        #expect(log.fires.isEmpty)
        #expect(log.ends.count == 2 && log.ends.allSatisfy { $0.reason == .backendShutDown && $0.fires == 0 })
        #expect(backend.registry.count == 0)
    }

    /// A handler that shuts its backend down, with other timeouts due at the same instant (and
    /// later): shutdown returns, none of the others runs after it, each ends once with
    /// `.backendShutDown`.
    @Test(arguments: TimerPath.allCases)
    fileprivate func shutdownFromAHandlerWithOthersDueAtTheSameInstant(path: TimerPath) throws {
        let result = try runUnderWatchdog(10, "shutdown from a handler (\(path))") { () throws -> (fired: [Int], ends: [TimerLog.End]) in
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            _ = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log)
            _ = try backend.scheduleTimeout(ms(10), tag: 1, path: path, log: log, onFire: { backend.shutdown() })
            _ = try backend.scheduleTimeout(ms(10), tag: 2, path: path, log: log)
            _ = try backend.scheduleTimeout(ms(11), tag: 3, path: path, log: log)
            backend.advance(by: ms(100))
            return (log.firedTags, log.ends)
        }
        if let result {
            #expect(result.fired == [0, 1], "nothing runs after the handler that shut the backend down")
            #expect(result.ends.count == 4)
            for tag in 0...3 {
                let ends = result.ends.filter { $0.tag == tag }
                #expect(ends.count == 1, "tag \(tag): \(ends)")
            }
            #expect(result.ends.filter { $0.tag >= 2 }.allSatisfy { $0.reason == .backendShutDown && $0.fires == 0 })
            #expect(result.ends.filter { $0.tag == 0 }.allSatisfy { $0.reason == .completed && $0.fires == 1 }, "\(result.ends)")
            // The timer whose own call shut the backend down was live during that call.
            #expect(result.ends.filter { $0.tag == 1 } == [.init(tag: 1, reason: .backendShutDown, fires: 1)], "\(result.ends)")
        }
    }

    /// `shutdown()` from inside a `timerEnded` (of a cancel, of a fire): returns, ends every
    /// other timer once, no deadlock.
    @Test(arguments: ["cancel", "fire"])
    func shutdownFromInsideTimerEnded(how: String) throws {
        let result = try runUnderWatchdog(10, "shutdown from timerEnded (\(how))") { () throws -> [TimerLog.End] in
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            for tag in 1...20 { _ = try backend.scheduleTimeout(ms(10 + tag), tag: tag, path: tag % 2 == 0 ? .key : .handle, log: log) }
            let key = try backend.schedule(
                .after(ms(10)), calling: LoggingCallback(tag: 0, log: log, onEnded: { _, _, _ in backend.shutdown() }))
            if how == "cancel" { backend.cancel(key) } else { backend.advance(by: ms(10)) }
            backend.advance(by: ms(100))
            return log.ends
        }
        if let ends = result {
            #expect(ends.count == 21)
            #expect(Set(ends.map(\.tag)).count == 21, "each ended once")
            #expect(ends.filter { $0.tag > 0 }.allSatisfy { $0.reason == .backendShutDown && $0.fires == 0 })
        }
    }

    // MARK: Extremes

    /// `.after(.zero)` is due now: it fires at the next `advance(by: .zero)` / `runDue()`, not late.
    @Test(arguments: TimerPath.allCases)
    fileprivate func aZeroTimeoutIsDueNow(path: TimerPath) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let now = backend.now()
        _ = try backend.scheduleTimeout(.zero, tag: 0, path: path, log: log)
        _ = try backend.scheduleTimeout(.nanoseconds(1), tag: 1, path: path, log: log)
        _ = try backend.scheduleTimeout(.zero, tag: 2, path: path, log: log)
        backend.runDue()
        #expect(log.firedTags == [0, 2])
        #expect(log.fires.allSatisfy { $0.scheduled == now && $0.actual == now })
        backend.advance(by: .nanoseconds(1))
        #expect(log.firedTags == [0, 2, 1])
        // Sub-nanosecond positive delays are not negative: accepted, due now.
        _ = try backend.scheduleTimeout(Duration(secondsComponent: 0, attosecondsComponent: 1), tag: 3, path: path, log: log)
        backend.runDue()
        #expect(log.firedTags == [0, 2, 1, 3])
    }

    /// Negative delays are refused with `negativeDuration(parameter: "delay", ...)` on both
    /// paths, and register nothing; a refused reschedule leaves the timer as it was.
    @Test(arguments: TimerPath.allCases)
    fileprivate func negativeDelaysAreRefusedAndLeaveNothingBehind(path: TimerPath) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let negatives: [Duration] = [
            .nanoseconds(-1), .seconds(-1), Duration(secondsComponent: 0, attosecondsComponent: -1),
            Duration(secondsComponent: Int64.min, attosecondsComponent: 0), .milliseconds(Int64.min),
        ]
        for delay in negatives {
            #expect(throws: TimerError.negativeDuration(parameter: "delay", value: delay)) {
                try backend.scheduleTimeout(delay, tag: 9, path: path, log: log)
            }
        }
        #expect(backend.registry.count == 0)
        #expect(backend.statistics.liveTimers == 0)
        let held = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log)
        for delay in negatives {
            #expect(throws: TimerError.negativeDuration(parameter: "delay", value: delay)) {
                try backend.reschedule(held: held, after: delay)
            }
        }
        #expect(backend.isActive(held: held), "a refused reschedule leaves the timer scheduled")
        backend.advance(by: ms(9))
        #expect(log.fires.isEmpty, "a refused reschedule did not make it due now")
        backend.advance(by: ms(1))
        #expect(log.firedTags == [0], "a refused reschedule kept the old deadline")
        #expect(log.ends(of: 9).isEmpty)
        // Seconds: NaN, infinities and negatives are refused too.
        #expect(throws: TimerError.nonFiniteSeconds(parameter: "delay", value: .nan)) {
            try backend.schedule(.after(seconds: .nan), calling: LoggingCallback(tag: 9, log: log))
        }
        #expect(throws: TimerError.nonFiniteSeconds(parameter: "delay", value: .infinity)) {
            try backend.schedule(.after(seconds: .infinity)) { _ in }
        }
        #expect(throws: TimerError.self) { try backend.schedule(.after(seconds: -1e-12)) { _ in } }
    }

    /// Huge delays: `.seconds(Int64.max)`, the largest `Duration`, 1e300 s, and delays that end
    /// exactly at or just before the horizon. Nothing traps; deadlines at/after the horizon stay
    /// scheduled and never fire; horizon - 1 ns fires; advancing to the end of time returns.
    @Test(arguments: TimerPath.allCases)
    fileprivate func hugeDelaysSaturateAndTheHorizonHolds(path: TimerPath) throws {
        let result = try runUnderWatchdog(10, "huge delays (\(path))") { () throws -> [String] in
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let now = backend.now()
            let toHorizon = MonotonicInstant.horizon - now
            var held: [HeldTimer] = []
            held.append(try backend.scheduleTimeout(.seconds(Int64.max), tag: 0, path: path, log: log))
            held.append(
                try backend.scheduleTimeout(
                    Duration(secondsComponent: Int64.max, attosecondsComponent: 999_999_999_999_999_999), tag: 1, path: path, log: log))
            held.append(try backend.scheduleTimeout(toHorizon, tag: 2, path: path, log: log))
            held.append(try backend.scheduleTimeout(toHorizon - .nanoseconds(1), tag: 3, path: path, log: log))
            switch path {
            case .key: held.append(.key(try backend.schedule(.after(seconds: 1e300), calling: LoggingCallback(tag: 4, log: log))))
            case .handle:
                held.append(
                    .handle(
                        try backend.schedule(.after(seconds: 1e300)) { _ in
                            log.fired(4, index: 0, scheduled: .distantFuture, actual: .distantFuture)
                        }))
            }
            backend.advance(to: .distantFuture)
            backend.advance(to: .distantFuture)
            var out: [String] = []
            if log.firedTags != [3] { out.append("fired \(log.firedTags), expected only the one due just before the horizon") }
            if let fire = log.fires.first, fire.scheduled != MonotonicInstant(nanoseconds: MonotonicInstant.horizon.nanoseconds - 1) {
                out.append("horizon-1 fired as \(fire.scheduled)")
            }
            for (i, h) in held.enumerated() where i != 3 && !backend.isActive(held: h) {
                out.append("timer \(i) is not scheduled any more")
            }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// A timer parked past the horizon, moved to a near deadline, fires there; one moved from
    /// near to parked never fires.
    @Test(arguments: TimerPath.allCases)
    fileprivate func parkedAndUnparked(path: TimerPath) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let parked = try backend.scheduleTimeout(.seconds(Int64.max), tag: 0, path: path, log: log)
        let near = try backend.scheduleTimeout(ms(5), tag: 1, path: path, log: log)
        try backend.reschedule(held: parked, after: ms(10))
        try backend.reschedule(held: near, after: .seconds(Int64.max))
        backend.advance(by: ms(9))
        #expect(log.fires.isEmpty)
        backend.advance(by: ms(1))
        #expect(log.firedTags == [0])
        backend.advance(by: .seconds(1_000_000))
        #expect(log.firedTags == [0])
        #expect(backend.isActive(held: near))
    }

    /// Near the end of the clock: the manual clock starts just below UInt64.max and at the
    /// horizon's edge; adding delays must saturate, not trap, and past-horizon stays unfired.
    @Test(arguments: TimerPath.allCases)
    fileprivate func delaysThatOverflowWhenAddedToNow(path: TimerPath) throws {
        let result = try runUnderWatchdog(10, "overflowing deadlines (\(path))") { () throws -> [String] in
            var out: [String] = []
            do {
                let backend = ManualBackend(start: MonotonicInstant(nanoseconds: UInt64.max - 10), registry: TimerRegistry())
                defer { backend.shutdown() }
                let log = TimerLog()
                let a = try backend.scheduleTimeout(.seconds(1), tag: 0, path: path, log: log)
                let b = try backend.scheduleTimeout(.seconds(Int64.max), tag: 1, path: path, log: log)
                let c = try backend.scheduleTimeout(.zero, tag: 2, path: path, log: log)
                try backend.reschedule(held: a, after: .seconds(Int64.max))
                backend.advance(to: .distantFuture)
                if !log.fires.isEmpty { out.append("past the horizon, fired \(log.firedTags)") }
                if !backend.isActive(held: a) || !backend.isActive(held: b) || !backend.isActive(held: c) {
                    out.append("a parked timer ended")
                }
            }
            do {
                let start = MonotonicInstant(nanoseconds: MonotonicInstant.horizon.nanoseconds - 5)
                let backend = ManualBackend(start: start, registry: TimerRegistry())
                defer { backend.shutdown() }
                let log = TimerLog()
                _ = try backend.scheduleTimeout(.nanoseconds(3), tag: 0, path: path, log: log)  // horizon - 2: fires
                _ = try backend.scheduleTimeout(.nanoseconds(5), tag: 1, path: path, log: log)  // horizon: never
                backend.advance(to: .distantFuture)
                if log.firedTags != [0] { out.append("at the horizon's edge fired \(log.firedTags), expected [0]") }
            }
            return out
        }
        if let result { #expect(result == []) }
    }

    // MARK: Re-entrancy inside a batch

    /// Inside a call at 10 ms: cancelling a timer due at the same instant (later in order)
    /// stops it; moving one due at 20 ms to now fires it in this advance; a `.after(.zero)`
    /// scheduled there fires in this advance, after the others already due at 10 ms.
    @Test(arguments: TimerPath.allCases)
    fileprivate func aHandlerChangesTimersOfItsOwnBatch(path: TimerPath) throws {
        let result = try runUnderWatchdog(10, "handler editing its batch (\(path))") { () throws -> [Int] in
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let refs = Locked<[Int: HeldTimer]>([:])
            _ = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log) {
                let r = refs.current
                backend.cancel(held: r[1]!)
                try? backend.reschedule(held: r[3]!, after: .zero)
                _ = try? backend.scheduleTimeout(.zero, tag: 4, path: path, log: log)
            }
            refs.withLock { $0[1] = try! backend.scheduleTimeout(ms(10), tag: 1, path: path, log: log) }
            refs.withLock { $0[2] = try! backend.scheduleTimeout(ms(10), tag: 2, path: path, log: log) }
            refs.withLock { $0[3] = try! backend.scheduleTimeout(ms(20), tag: 3, path: path, log: log) }
            backend.advance(by: ms(10))
            return log.firedTags
        }
        if let fired = result {
            #expect(!fired.contains(1), "cancelled inside the batch, it must not fire")
            #expect(fired.first == 0 && fired.contains(2) && fired.contains(3) && fired.contains(4), "\(fired)")
            #expect(
                fired.firstIndex(of: 2)! < fired.firstIndex(of: 4)!,
                "the timer scheduled at 10 ms fires after one scheduled earlier for 10 ms: \(fired)")
        }
    }

    // MARK: Fast path against the general path

    /// Timers due at the same instant, scheduled alternately on the timeout path (`.after(d)`
    /// held by key or handle) and on the general path (a name, `.after(seconds:)`, `.at`, an
    /// explicit `.monotonic` clock, a tolerance of zero given explicitly): equal deadlines fire
    /// in scheduling order whichever path each took.
    @Test func equalDeadlinesKeepSchedulingOrderAcrossTheTimeoutAndGeneralPaths() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let now = backend.now()
        let due = now + ms(10)
        var tag = 0
        func next() -> Int {
            defer { tag += 1 }
            return tag
        }
        for round in 0..<20 {
            _ = try backend.scheduleTimeout(ms(10), tag: next(), path: .key, log: log)
            let t1 = next()
            try backend.schedule(.at(due)) { tick in log.fired(t1, index: tick.index, scheduled: tick.scheduled, actual: tick.actual) }
            _ = try backend.scheduleTimeout(ms(10), tag: next(), path: .handle, log: log)
            _ = try backend.schedule(.after(ms(10)), name: "named-\(round)", calling: LoggingCallback(tag: next(), log: log))
            _ = try backend.schedule(.after(seconds: 0.010), calling: LoggingCallback(tag: next(), log: log))
            let t5 = next()
            try backend.schedule(.after(ms(10), on: .monotonic)) { tick in
                log.fired(t5, index: tick.index, scheduled: tick.scheduled, actual: tick.actual)
            }
            _ = try backend.schedule(.after(ms(10)), tolerance: .zero, missedTicks: .burst, calling: LoggingCallback(tag: next(), log: log))
            _ = try backend.schedule(.at(due), calling: LoggingCallback(tag: next(), log: log))
        }
        backend.advance(by: ms(10))
        #expect(log.firedTags == Array(0..<tag))
        #expect(log.fires.allSatisfy { $0.scheduled == due && $0.actual == due })
    }

    /// A model-checked random walk over timeouts on both paths: schedule, cancel, reschedule
    /// (earlier, later, to zero), suspend and resume (also past the deadline: it then fires at
    /// the next turn, ordered by its past deadline), and small advances.
    /// After every step: each key's and handle's `isActive` is the model's, the wake-up the core
    /// asked for is no later than the earliest due timer (a real loop would otherwise sleep past
    /// it), and after every advance exactly the model's due timers have fired, once each, in
    /// due order.
    @Test(arguments: [1, 2, 3, 4])
    func aRandomWalkAgreesWithAModel(seed: Int) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let start = backend.now()
        var rng = SplitMix64(state: UInt64(seed) &* 1_000_003)
        struct Model {
            var held: HeldTimer
            var due: Int  // ns since start: the deadline, or the resume time if later
            var state: TimerState
            var order: Int  // when it was last put on its deadline (for ties)
            var history: [String] = []
        }
        var timers: [Model] = []
        var now = 0
        var stamp = 0
        var problems: [String] = []
        func problem(_ text: String) { if problems.count < 20 { problems.append(text) } }
        var firedSoFar = 0
        for step in 0..<6_000 {
            let live = timers.indices.filter { !timers[$0].state.hasEnded }
            let roll = rng.below(100)
            if roll < 30 || live.isEmpty {
                let delay = rng.below(4) == 0 ? 0 : rng.below(3_000_000)
                let path: TimerPath = rng.below(2) == 0 ? .key : .handle
                let held = try backend.scheduleTimeout(.nanoseconds(delay), tag: timers.count, path: path, log: log)
                stamp += 1
                timers.append(
                    Model(held: held, due: now + delay, state: .scheduled, order: stamp, history: ["\(path) at \(now) +\(delay)"]))
            } else {
                let i = live[rng.below(live.count)]
                switch roll {
                case 30..<42:
                    backend.cancel(held: timers[i].held)
                    timers[i].state = .cancelled
                case 42..<62 where timers[i].state == .scheduled:
                    let delay = rng.below(5) == 0 ? 0 : rng.below(4_000_000)
                    try backend.reschedule(held: timers[i].held, after: .nanoseconds(delay))
                    stamp += 1
                    timers[i].due = now + delay
                    timers[i].order = stamp
                    timers[i].history.append("reschedule at \(now) +\(delay)")
                case 62..<70 where timers[i].state == .scheduled:
                    try backend.suspend(held: timers[i].held)
                    timers[i].state = .suspended
                    timers[i].history.append("suspend at \(now)")
                case 70..<78 where timers[i].state == .suspended:
                    try backend.resume(held: timers[i].held)
                    timers[i].state = .scheduled
                    timers[i].history.append("resume at \(now)")
                // Resumed past its deadline it fires at the next turn ("once now"), ordered
                // by that (past) deadline among what is due then.
                default:
                    let target = now + rng.below(1_500_000)
                    backend.advance(to: start + .nanoseconds(target))
                    // Expected: every scheduled timer due by `target`, in (due, order).
                    let due = timers.indices.filter { timers[$0].state == .scheduled && timers[$0].due <= target }
                        .sorted { (timers[$0].due, timers[$0].order) < (timers[$1].due, timers[$1].order) }
                    let fires = log.fires
                    let new = Array(fires[firedSoFar...])
                    firedSoFar = fires.count
                    if new.map(\.tag) != due {
                        let detail = due.map { "\($0): due \(timers[$0].due) order \(timers[$0].order) \(timers[$0].history)" }
                        problem(
                            "step \(step) (now \(now)): advancing to \(target) fired \(new.map(\.tag)), the model says \(due): \(detail)")
                    }
                    for fire in new where timers.indices.contains(fire.tag) {
                        if fire.actual != start + .nanoseconds(max(timers[fire.tag].due, now))
                            || fire.scheduled != start + .nanoseconds(timers[fire.tag].due)
                        {
                            problem(
                                "step \(step): tag \(fire.tag) ran at \(fire.actual - start) for \(fire.scheduled - start), due at \(timers[fire.tag].due) ns (now \(now))"
                            )
                        }
                    }
                    for i in due { timers[i].state = .finished }
                    now = target
                }
            }
            // Invariants after every step.
            for (tag, timer) in timers.enumerated() where backend.isActive(held: timer.held) != !timer.state.hasEnded {
                problem("step \(step): tag \(tag) isActive \(backend.isActive(held: timer.held)), the model says \(timer.state)")
            }
            if let earliest = timers.filter({ $0.state == .scheduled }).map(\.due).min() {
                let wake = backend.requestedWakeUp
                if wake > start + .nanoseconds(max(earliest, now)) {
                    problem("step \(step): the loop is asked to wake at \(wake - start), after the earliest due timer at \(earliest) ns")
                }
            }
            if problems.count >= 20 { break }
        }
        #expect(problems == [])
        let ends = log.ends
        let endedTags = Set(ends.map(\.tag))
        #expect(ends.count == endedTags.count, "no timer ended twice")
        for (tag, timer) in timers.enumerated() where timer.state.hasEnded {
            let theirs = ends.filter { $0.tag == tag }
            let expected = TimerLog.End(
                tag: tag, reason: timer.state == .finished ? .completed : .cancelled, fires: timer.state == .finished ? 1 : 0)
            if theirs != [expected] {
                Issue.record("tag \(tag): ends \(theirs), expected \(expected)")
                break
            }
        }
    }

    // MARK: Suspend and resume of timeouts

    /// Suspend twice, resume once: it runs again. Resumed after its deadline passed, it fires
    /// once at the next turn (`.skip`: "fire once now"), not before the resume; resuming a
    /// scheduled timer does nothing.
    @Test(arguments: TimerPath.allCases)
    fileprivate func suspendedTimeoutsAndTheirResume(path: TimerPath) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let start = backend.now()
        let a = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log)
        let b = try backend.scheduleTimeout(ms(20), tag: 1, path: path, log: log)
        try backend.suspend(held: a)
        try backend.suspend(held: a)
        try backend.resume(held: b)  // scheduled: nothing
        backend.advance(by: ms(15))
        #expect(log.fires.isEmpty, "a suspended timeout does not fire at its deadline")
        #expect(backend.isActive(held: a))
        try backend.resume(held: a)
        backend.runDue()
        #expect(log.firedTags == [0], "resumed past its deadline, it fires once now")
        #expect(log.fires.first?.actual == start + ms(15))
        backend.advance(by: ms(5))
        #expect(log.firedTags == [0, 1])
        backend.advance(by: .seconds(1))
        #expect(log.firedTags == [0, 1])
        #expect(log.ends.count == 2 && log.ends.allSatisfy { $0.reason == .completed && $0.fires == 1 })
    }

    /// A suspended timeout that is rescheduled stays suspended: it fires neither at its old
    /// deadline nor at its new one, and once when resumed after it, on both paths.
    @Test func aSuspendedTimeoutRescheduledBehavesTheSameOnBothPaths() throws {
        var outcome: [TimerPath: [Int]] = [:]
        for path in TimerPath.allCases {
            let backend = ManualBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let a = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log)
            try backend.suspend(held: a)
            try backend.reschedule(held: a, after: ms(30))
            backend.advance(by: ms(20))
            #expect(log.fires.isEmpty, "\(path): not at its old deadline")
            backend.advance(by: ms(10))
            let atNewDeadline = log.fires.count
            try? backend.resume(held: a)
            backend.advance(by: ms(10))
            outcome[path] = [atNewDeadline, log.fires.count]
            #expect(log.fires.count == 1, "\(path): fires once in all")
        }
        #expect(outcome[.key] == [0, 1])
        #expect(outcome[.handle] == [0, 1])
    }

    // MARK: Many live timeouts

    /// 120 000 live timeouts, both paths, random deadlines with many ties (past any chunk
    /// size the store may use): each fires once, in (deadline, scheduling) order.
    @Test func manyLiveTimeoutsAcrossChunksFireInOrder() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let order = Locked<[Int]>([])
        order.withLock { $0.reserveCapacity(120_000) }
        final class Sink: TimerCallback, Sendable {
            let order: Locked<[Int]>
            let tags: Locked<[TimerKey: Int]>
            init(_ order: Locked<[Int]>, _ tags: Locked<[TimerKey: Int]>) {
                self.order = order
                self.tags = tags
            }
            func timerFired(_ fire: TimerFire) {
                let tag = tags.withLock { $0[fire.key]! }
                order.withLock { $0.append(tag) }
            }
        }
        let tags = Locked<[TimerKey: Int]>([:])
        let sink = Sink(order, tags)
        var rng = SplitMix64(state: 99)
        var delays: [Int] = []
        for tag in 0..<120_000 {
            let delay = rng.below(2_000)
            delays.append(delay)
            if tag % 4 == 0 {
                try backend.schedule(.after(.microseconds(delay))) { _ in order.withLock { $0.append(tag) } }
            } else {
                let key = try backend.schedule(.after(.microseconds(delay)), calling: sink)
                tags.withLock { $0[key] = tag }
            }
        }
        #expect(backend.statistics.liveTimers == 120_000)
        backend.advance(by: ms(3))
        let expected = delays.indices.sorted { (delays[$0], $0) < (delays[$1], $1) }
        let fired = order.current
        #expect(fired.count == 120_000)
        if fired != expected {
            let first = zip(fired, expected).enumerated().first { $0.element.0 != $0.element.1 }
            Issue.record("order differs first at position \(first?.offset ?? -1): \(String(describing: first?.element))")
        }
        #expect(backend.statistics.liveTimers == 0)
        #expect(backend.registry.count == 0)
    }

    // MARK: A late loop

    /// The loop comes late (`stall`, as a blocked loop would): everything due fires in one turn,
    /// and still in deadline order — including a timer moved later (to a deadline that has also
    /// passed by the time the loop runs) whose old deadline was the earliest, and one moved
    /// earlier.
    @Test(arguments: TimerPath.allCases)
    fileprivate func aLateTurnFiresMovedTimersInTheirNewDeadlineOrder(path: TimerPath) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let start = backend.now()
        let a = try backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log)
        _ = try backend.scheduleTimeout(ms(12), tag: 1, path: path, log: log)
        let c = try backend.scheduleTimeout(ms(30), tag: 2, path: path, log: log)
        _ = try backend.scheduleTimeout(ms(13), tag: 3, path: path, log: log)
        try backend.reschedule(held: a, after: ms(14))  // later: 14, after 1 (12) and 3 (13)
        try backend.reschedule(held: c, after: ms(11))  // earlier: 11, before 1
        backend.stall(for: ms(20))
        backend.runDue()
        #expect(log.firedTags == [2, 1, 3, 0], "deadline order: c 11, 1 at 12, 3 at 13, a 14")
        #expect(log.fires.map(\.scheduled) == [start + ms(11), start + ms(12), start + ms(13), start + ms(14)])
    }

    /// The same, with many timers moved later repeatedly (idle timeouts pushed back) and a
    /// stalled loop: one late turn fires them in the order of their latest deadlines.
    @Test(arguments: TimerPath.allCases)
    fileprivate func aLateTurnAfterManyPushesFiresInLatestDeadlineOrder(path: TimerPath) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let log = TimerLog()
        let start = backend.now()
        var rng = SplitMix64(state: 5)
        var held: [HeldTimer] = []
        var deadline: [Int] = []  // µs since start
        for tag in 0..<200 {
            let due = 1_000 + rng.below(10_000)
            held.append(try backend.scheduleTimeout(.microseconds(due), tag: tag, path: path, log: log))
            deadline.append(due)
        }
        for _ in 0..<3 {
            for tag in 0..<200 where rng.below(2) == 0 {
                let due = deadline[tag] + rng.below(5_000)  // later (or the same)
                try backend.reschedule(held: held[tag], after: .microseconds(due))
                deadline[tag] = due
            }
        }
        backend.stall(for: .seconds(1))
        backend.runDue()
        let expected = deadline.indices.sorted { deadline[$0] < deadline[$1] || (deadline[$0] == deadline[$1] && $0 < $1) }
        let fired = log.firedTags
        #expect(fired.count == 200)
        let scheduled = log.fires.map { $0.scheduled - start }
        #expect(scheduled == scheduled.sorted(), "fires in deadline order")
        if fired != expected {
            let firstOff = zip(fired, expected).enumerated().first { $0.element.0 != $0.element.1 }
            Issue.record("first out of order at \(firstOff?.offset ?? -1): fired \(fired.prefix(12)) … expected \(expected.prefix(12)) …")
        }
    }

    // MARK: A one-shot changing itself from its own call

    /// From inside its only call, a one-shot: cancels itself then tries to reschedule (must
    /// throw `timerEnded`); suspends itself (then: resumed later, does it run again?);
    /// suspends and resumes itself; reschedules itself then cancels. Each ends exactly once,
    /// keys and handles alike, and nothing fires after a cancel.
    @Test func aOneShotChangingItselfFromItsCall() throws {
        let result = try runUnderWatchdog(10, "one-shots changing themselves") { () throws -> [String: String] in
            var out: [String: String] = [:]
            for path in TimerPath.allCases {
                for how in ["cancel+reschedule", "suspend", "suspend+resume", "reschedule+cancel"] {
                    let backend = ManualBackend(registry: TimerRegistry())
                    defer { backend.shutdown() }
                    let log = TimerLog()
                    let me = Locked<HeldTimer?>(nil)
                    let notes = Locked<[String]>([])
                    me.withLock {
                        $0 = try? backend.scheduleTimeout(ms(10), tag: 0, path: path, log: log) {
                            guard log.fires.count == 1, let held = me.current else { return }
                            switch how {
                            case "cancel+reschedule":
                                backend.cancel(held: held)
                                do {
                                    try backend.reschedule(held: held, after: ms(5))
                                    notes.withLock { $0.append("reschedule after its own cancel succeeded") }
                                } catch {
                                    if !isTimerEnded(error) { notes.withLock { $0.append("reschedule threw \(error)") } }
                                }
                            case "suspend":
                                do { try backend.suspend(held: held) } catch { notes.withLock { $0.append("suspend threw \(error)") } }
                            case "suspend+resume":
                                do {
                                    try backend.suspend(held: held)
                                    try backend.resume(held: held)
                                } catch { notes.withLock { $0.append("threw \(error)") } }
                            default:
                                do { try backend.reschedule(held: held, after: ms(5)) } catch {
                                    notes.withLock { $0.append("reschedule threw \(error)") }
                                }
                                backend.cancel(held: held)
                            }
                        }
                    }
                    backend.advance(by: ms(10))
                    let activeAfterCall = backend.isActive(held: me.current!)
                    var resumed = "-"
                    if activeAfterCall {
                        resumed = (try? backend.resume(held: me.current!)) != nil ? "resumed" : "resume threw"
                    }
                    backend.advance(by: .seconds(1))
                    out["\(path) \(how)"] =
                        "fires \(log.fires.count), active after its call \(activeAfterCall) (\(resumed)), active at the end \(backend.isActive(held: me.current!)), ends \(log.ends.map { "\($0.reason)/\($0.fires)" }) \(notes.current)"
                }
            }
            return out
        }
        guard let result else { return }
        for how in ["cancel+reschedule", "suspend", "suspend+resume", "reschedule+cancel"] {
            #expect(result["key \(how)"] == result["handle \(how)"], "\(how): keys and handles agree")
        }
        for (name, line) in result where name.hasSuffix("cancel+reschedule") || name.hasSuffix("reschedule+cancel") {
            #expect(line.hasPrefix("fires 1,") && line.contains("[\"cancelled/1\"]") && line.hasSuffix("[]"), "\(name): \(line)")
        }
        for (name, line) in result where name.hasSuffix("suspend+resume") {
            #expect(line.contains("ends [\"completed/1\"]") && line.hasPrefix("fires 1,"), "\(name): \(line)")
        }
        for (name, line) in result where name.hasSuffix(" suspend") {
            // Whatever the model, it must end (or stay live) consistently: one end at most, one
            // fire per resume at most.
            #expect(!line.contains("fires 0"), "\(name): \(line)")
        }
    }

    // MARK: What a key costs and holds

    /// "A plain value (12 bytes, no reference count)".
    @Test func aKeyIsTwelveBytes() {
        #expect(MemoryLayout<TimerKey>.size == 12)
    }

    /// The backend holds the callback while its timer lives (the caller may drop it), lets go of
    /// it once `timerEnded` has returned — on cancel, fire, registry cancel and shutdown — and
    /// does not keep a callback whose schedule was refused (a cap, a shut-down backend, a bad
    /// delay). Many reschedules add no reference.
    @Test(arguments: ["cancel", "fire", "cancelByName", "shutdown", "refusedAtCap", "refusedShutDown", "refusedNegative"])
    func theBackendLetsGoOfTheCallback(how: String) throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let log = TimerLog()
        weak var weakCallback: LoggingCallback?
        let aliveInEnd = Locked<Bool?>(nil)
        var key: TimerKey?
        do {
            let callback = LoggingCallback(tag: 0, log: log, onEnded: { _, _, _ in aliveInEnd.withLock { $0 = true } })
            weakCallback = callback
            switch how {
            case "refusedAtCap":
                try backend.limitLiveTimers(to: 0)
                #expect(throws: TimerError.self) { try backend.schedule(.after(ms(10)), calling: callback) }
            case "refusedShutDown":
                backend.shutdown()
                #expect(throws: TimerError.self) { try backend.schedule(.after(ms(10)), calling: callback) }
            case "refusedNegative":
                #expect(throws: TimerError.self) { try backend.schedule(.after(ms(-10)), calling: callback) }
            case "cancelByName":
                key = try backend.schedule(.after(ms(10)), name: "named", calling: callback)
            default:
                key = try backend.schedule(.after(ms(10)), calling: callback)
            }
        }
        if let key {
            #expect(weakCallback != nil, "the backend keeps the callback of a live timer")
            for _ in 0..<1000 { try backend.reschedule(key, .after(ms(10))) }
            switch how {
            case "cancel": backend.cancel(key)
            case "fire": backend.advance(by: ms(10))
            case "cancelByName": try registry.cancel(named: "named")
            default: backend.shutdown()
            }
            #expect(aliveInEnd.current == true)
            #expect(log.ends.count == 1)
        }
        #expect(weakCallback == nil, "\(how): the callback is let go of")
    }

    /// "A backend takes at most 255 distinct callback types; the next one is refused with
    /// invalidOption." Types made at run time (a generic nested ever deeper): 255 are taken,
    /// the 256th refused, known types keep working, and another backend has its own 255.
    @Test func theCallbackTypeLimit() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let other = ManualBackend(registry: TimerRegistry())
        defer {
            backend.shutdown()
            other.shutdown()
        }
        let log = TimerLog()
        final class Typed<Marker>: TimerCallback, Sendable {
            let log: TimerLog
            init(_ log: TimerLog) { self.log = log }
            func timerFired(_ fire: TimerFire) { log.fired(0, index: fire.index, scheduled: fire.scheduled, actual: fire.actual) }
        }
        struct Nest<Inner> {}
        /// Schedules a timeout calling a `Typed<Nest^depth<Int>>` on `backend`; its error, if any.
        func schedule<T>(depth: Int, _: T.Type, on backend: ManualBackend) -> TimerError? {
            if depth > 0 { return schedule(depth: depth - 1, Nest<T>.self, on: backend) }
            do {
                try backend.schedule(.after(ms(10)), calling: Typed<T>(log))
                return nil
            } catch { return error }
        }
        // LoggingCallback is used by nothing here; each depth is a type of its own.
        var accepted = 0
        var firstRefusal: (Int, TimerError)?
        for depth in 0..<300 {
            if let error = schedule(depth: depth, Int.self, on: backend) {
                if firstRefusal == nil { firstRefusal = (depth, error) }
            } else {
                accepted += 1
            }
        }
        #expect(accepted == 255, "distinct callback types taken: \(accepted)")
        if let (depth, error) = firstRefusal {
            #expect(depth == 255)
            if case .invalidOption = error {} else { Issue.record("refusal: \(error)") }
        } else {
            Issue.record("no callback type was refused")
        }
        #expect(schedule(depth: 0, Int.self, on: backend) == nil, "a type already taken still works")
        #expect(schedule(depth: 254, Int.self, on: backend) == nil, "a type already taken still works")
        #expect(schedule(depth: 299, Int.self, on: other) == nil, "another backend has its own table")
        backend.advance(by: ms(10))
        #expect(log.fires.count == 257)
    }

    // MARK: Threads on a manual backend

    /// Two threads advance the manual clock (taking turns), three schedule, cancel and
    /// reschedule timeouts, and some handlers "take" time by advancing from inside: no hang,
    /// every timer ends exactly once, the end's fires are the calls seen (at most one unless a
    /// reschedule succeeded), and every call sees its own deadline.
    @Test func threadsOnAManualBackend() throws {
        let result = try runUnderWatchdog(20, "threads on a manual backend") { () throws -> [String] in
            let registry = TimerRegistry()
            let backend = ManualBackend(registry: registry)
            defer { backend.shutdown() }
            let log = TimerLog()
            let scheduled = Locked(0)
            let rescheduledOK = Locked(Set<Int>())
            let problems = Locked<[String]>([])
            let stop = Locked(false)
            let advancers = DispatchGroup()
            for _ in 0..<2 {
                advancers.enter()
                Thread {
                    defer { advancers.leave() }
                    while !stop.current { backend.advance(by: .microseconds(50)) }
                }.start()
            }
            let workers = DispatchGroup()
            for t in 0..<3 {
                workers.enter()
                Thread {
                    defer { workers.leave() }
                    var rng = SplitMix64(state: UInt64(t) + 1)
                    var mine: [(Int, HeldTimer)] = []
                    for i in 0..<3_000 {
                        let tag = t * 100_000 + i
                        let slow = rng.below(50) == 0
                        do {
                            var hook: (@Sendable () -> Void)? = nil
                            if slow { hook = { backend.advance(by: .microseconds(300)) } }
                            let path: TimerPath = rng.below(2) == 0 ? .key : .handle
                            let held = try backend.scheduleTimeout(
                                .microseconds(rng.below(2_000)), tag: tag, path: path, log: log, onFire: hook)
                            scheduled.withLock { $0 += 1 }
                            mine.append((tag, held))
                        } catch { problems.withLock { $0.append("schedule threw \(error)") } }
                        if mine.count > 10 { mine.removeFirst() }
                        let (victimTag, victim) = mine[rng.below(mine.count)]
                        switch rng.below(4) {
                        case 0: backend.cancel(held: victim)
                        case 1:
                            do {
                                try backend.reschedule(held: victim, after: .microseconds(rng.below(2_000)))
                                rescheduledOK.withLock { _ = $0.insert(victimTag) }
                            } catch {
                                if !isTimerEnded(error) { problems.withLock { $0.append("reschedule threw \(error)") } }
                            }
                        default: break
                        }
                    }
                }.start()
            }
            var out: [String] = []
            if workers.wait(timeout: .now() + 15) == .timedOut { out.append("the workers did not finish within 15 s") }
            stop.withLock { $0 = true }
            if advancers.wait(timeout: .now() + 5) == .timedOut { out.append("the advancing threads did not stop within 5 s") }
            backend.advance(by: .seconds(1))
            out += problems.current.prefix(10)
            var ends: [Int: [TimerLog.End]] = [:]
            for end in log.ends { ends[end.tag, default: []].append(end) }
            var calls: [Int: Int] = [:]
            for fire in log.fires { calls[fire.tag, default: 0] += 1 }
            let moved = rescheduledOK.current
            var bad = 0
            for (tag, list) in ends {
                let n = calls[tag] ?? 0
                if list.count != 1 || list[0].fires != n || (n > 1 && !moved.contains(tag)) {
                    bad += 1
                    if bad <= 10 { out.append("tag \(tag): ends \(list), calls \(n)") }
                }
            }
            if ends.count != scheduled.current { out.append("\(ends.count) ended of \(scheduled.current)") }
            for fire in log.fires where fire.actual < fire.scheduled {
                out.append("tag \(fire.tag) ran before its deadline")
                break
            }
            if registry.count != 0 { out.append("registry.count \(registry.count)") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// Keyed timeouts are in the registry under generated names. The generated name of an ended
    /// timer never reaches the timer that reused its slot: looking it up finds nothing,
    /// cancelling by it throws `noSuchTimer` and leaves the new timer alone.
    @Test func anEndedTimersGeneratedNameNeverReachesItsSlotsNextTimer() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let log = TimerLog()
        var oldNames: [String] = []
        var live: TimerKey?
        for round in 0..<50 {
            let key = try backend.schedule(.after(ms(10)), calling: LoggingCallback(tag: round, log: log))
            let names = registry.names
            #expect(names.count == 1, "\(names)")
            if round < 49 {
                oldNames.append(contentsOf: names)
                if round % 2 == 0 { backend.cancel(key) } else { try registry.cancel(named: names[0]) }
            } else {
                live = key
            }
        }
        #expect(Set(oldNames).count == oldNames.count, "generated names are never reused: \(oldNames.prefix(5))")
        let liveName = registry.names.first
        #expect(liveName.map { !oldNames.contains($0) } ?? false)
        for name in oldNames {
            #expect(registry.timer(named: name) == nil, "\(name) finds nothing")
            #expect(throws: TimerError.noSuchTimer(name)) { try registry.cancel(named: name) }
            #expect(throws: TimerError.noSuchTimer(name)) { try registry.suspend(named: name) }
        }
        #expect(backend.isActive(live!))
        if let liveName {
            #expect(registry.timer(named: liveName) != nil, "the live keyed timer is found by its generated name")
            try registry.suspend(named: liveName)
            backend.advance(by: ms(10))
            #expect(log.fireCount(of: 49) == 0, "suspended by name")
            try registry.resume(named: liveName)
            backend.runDue()
            #expect(log.fireCount(of: 49) == 1)
        }
        let byName = log.ends.filter { $0.reason == .cancelledByName }.count
        #expect(byName == 24 && log.ends.filter { $0.reason == .cancelled }.count == 25)
    }

    // MARK: Observers on keyed timeouts

    /// A registry observer sees keyed timeouts' calls with a handle (`Tick.timer`) naming the
    /// timer: its name is the registered one; a `willFire` that cancels another timeout due in
    /// the same turn keeps that one from running; the handle it was given still answers
    /// `fireCount`, `endReason`, `currentState` and `name` after the timer ended, and its
    /// calls then throw `timerEnded`.
    @Test func registryObserversOnKeyedTimeouts() throws {
        let result = try runUnderWatchdog(10, "observers on keyed timeouts") { () throws -> [String] in
            let registry = TimerRegistry()
            let backend = ManualBackend(registry: registry)
            defer { backend.shutdown() }
            let log = TimerLog()
            let a = try backend.schedule(.after(ms(10)), calling: LoggingCallback(tag: 0, log: log))
            let b = try backend.schedule(.after(ms(10)), calling: LoggingCallback(tag: 1, log: log))
            let names = registry.names
            let seen = Locked<[TimerHandle]>([])
            let didFireSeen = Locked<[String]>([])
            // The observer holds the backend, which holds the registry: removed at the end, so
            // that the three are not kept alive by each other.
            let token = registry.addObserver(
                TimerObserver(
                    willFire: { tick in
                        seen.withLock { $0.append(tick.timer) }
                        if seen.current.count == 1 { backend.cancel(b) }
                    },
                    didFire: { tick, _ in didFireSeen.withLock { $0.append(tick.timer.name) } }))
            defer { registry.removeObserver(token) }
            backend.advance(by: ms(10))
            var out: [String] = []
            let handles = seen.current
            if handles.count != 1 { out.append("willFire ran \(handles.count) times: \(handles.map(\.name))") }
            if log.firedTags != [0] { out.append("fired \(log.firedTags): the timer cancelled in willFire ran") }
            if let handle = handles.first {
                if !names.contains(handle.name) { out.append("the tick's handle is named \(handle.name), registered: \(names)") }
                if handle.currentState != .finished { out.append("state \(handle.currentState)") }
                if handle.fireCount != 1 { out.append("fireCount \(handle.fireCount)") }
                if handle.endReason != .completed { out.append("endReason \(String(describing: handle.endReason))") }
                if handle.isActive { out.append("the ended timer's handle is active") }
                do {
                    try handle.reschedule(.after(ms(1)))
                    out.append("reschedule through the ended timer's handle succeeded")
                } catch {
                    if !isTimerEnded(error) { out.append("reschedule threw \(error)") }
                }
            }
            if didFireSeen.current != handles.map(\.name) { out.append("didFire saw \(didFireSeen.current)") }
            if backend.isActive(a) || backend.isActive(b) { out.append("a key is still active") }
            let ends = log.ends
            if ends.sorted(by: { $0.tag < $1.tag }) != [
                .init(tag: 0, reason: .completed, fires: 1), .init(tag: 1, reason: .cancelled, fires: 0),
            ] {
                out.append("ends \(ends)")
            }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// A keyed timeout rescheduled through the handle an observer's tick gives (from inside
    /// `willFire`) — the same timer as its key: it fires again at the new deadline, and its key
    /// says it is active meanwhile.
    @Test func aKeyedTimeoutRescheduledThroughItsTicksHandle() throws {
        let result = try runUnderWatchdog(10, "keyed timeout moved through its tick's handle") { () throws -> [String] in
            let registry = TimerRegistry()
            let backend = ManualBackend(registry: registry)
            defer { backend.shutdown() }
            let log = TimerLog()
            let key = try backend.schedule(.after(ms(10)), calling: LoggingCallback(tag: 0, log: log))
            let errors = Locked<[String]>([])
            let token = registry.addObserver(
                TimerObserver(willFire: { tick in
                    if tick.index == 0 {
                        do { try tick.timer.reschedule(.after(ms(5))) } catch { errors.withLock { $0.append("\(error)") } }
                    }
                }))
            backend.advance(by: ms(10))
            var out = errors.current
            let activeBetween = backend.isActive(key)
            registry.removeObserver(token)
            backend.advance(by: ms(5))
            if !activeBetween { out.append("the key was not active after its timer was rescheduled through the tick's handle") }
            if log.fires.map(\.index) != [0, 1] { out.append("calls \(log.fires.map(\.index))") }
            if log.ends != [.init(tag: 0, reason: .completed, fires: 2)] { out.append("ends \(log.ends)") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// A repeating timer turned into a timeout by `reschedule(.after(d))` — moved later (kept
    /// in its queue entry) or earlier: it fires once more, as a one-shot (no interval, not
    /// missed, on the monotonic clock), then ends `.completed`; it does not keep repeating.
    @Test(arguments: TimerPath.allCases, ["later", "earlier"])
    fileprivate func aRepeatingTimerRescheduledAsATimeout(path: TimerPath, direction: String) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let fires = Locked<[(index: Int, interval: Duration?, missed: Int, clock: DeadlineClock, scheduled: MonotonicInstant)]>([])
        let ends = Locked<[(TimerEndReason, Int)]>([])
        let start = backend.now()
        let held: HeldTimer
        switch path {
        case .key:
            final class Sink: TimerCallback, Sendable {
                let fires: Locked<[(index: Int, interval: Duration?, missed: Int, clock: DeadlineClock, scheduled: MonotonicInstant)]>
                let ends: Locked<[(TimerEndReason, Int)]>
                init(
                    _ f: Locked<[(index: Int, interval: Duration?, missed: Int, clock: DeadlineClock, scheduled: MonotonicInstant)]>,
                    _ e: Locked<[(TimerEndReason, Int)]>
                ) {
                    fires = f
                    ends = e
                }
                func timerFired(_ fire: TimerFire) {
                    fires.withLock { $0.append((fire.index, fire.interval, fire.missed, fire.clock, fire.scheduled)) }
                }
                func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) { ends.withLock { $0.append((reason, fires)) } }
            }
            held = .key(try backend.schedule(.every(ms(10)), calling: Sink(fires, ends)))
        case .handle:
            let handle = try backend.schedule(.every(ms(10))) { tick in
                fires.withLock { $0.append((tick.index, tick.interval, tick.missed, tick.clock, tick.scheduled)) }
            }
            handle.onEnd { [handle] reason in ends.withLock { $0.append((reason, handle.fireCount)) } }
            held = .handle(handle)
        }
        backend.advance(by: ms(20))  // two calls: at 10 and 20; next due at 30
        #expect(fires.current.count == 2)
        let delay = direction == "later" ? ms(25) : ms(3)  // due at 45 (later than 30) or 23
        try backend.reschedule(held: held, after: delay)
        backend.advance(by: .seconds(1))
        let all = fires.current
        #expect(all.count == 3, "\(all.map(\.index))")
        if let last = all.last {
            #expect(last.index == 2)
            #expect(last.interval == nil, "a one-shot's tick has no interval")
            #expect(last.missed == 0 && last.clock == .monotonic)
            #expect(last.scheduled == start + ms(20) + delay)
        }
        #expect(ends.current.count == 1)
        #expect(ends.current.first?.0 == .completed && ends.current.first?.1 == 3)
    }
}
