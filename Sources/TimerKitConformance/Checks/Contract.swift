import Dispatch
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit

/// The contract every backend meets, checked on every backend configuration. Real-time backends
/// are checked for ordering and generous bounds only; exact timing is checked on Manual.
/// Every test runs under the harness's watchdog, so a hang fails in seconds.
enum Checks {
    // MARK: Schedules

    static func oneShotFiresOnceAndNeverEarly(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        let before = h.backend.now()
        let timer = try h.backend.schedule(.after(ms(20)), handler: log.record)
        #expect(h.waitUntil { log.count == 1 })
        h.pass(ms(40))
        #expect(log.count == 1)
        let tick = try #require(log.all.first)
        #expect(tick.scheduled >= before + ms(20))
        expectOnTime(tick, "the one-shot", on: kind)
        #expect(tick.index == 0 && tick.missed == 0)
        #expect(h.waitUntil { timer.currentState == .finished && h.registry.count == 0 })
    }

    static func oneShotAtADeadline(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        let deadline = h.backend.now() + ms(15)
        try h.backend.schedule(.at(deadline), handler: log.record)
        #expect(h.waitUntil { log.count == 1 })
        let tick = try #require(log.all.first)
        #expect(tick.scheduled == deadline)
        expectOnTime(tick, "the one-shot", on: kind)
    }

    static func timersFireInDeadlineOrder(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let order = Locked<[Int]>([])
        let failure = Locked<(any Error)?>(nil)
        // Scheduled from inside a handler: the backend runs no other handler until this one
        // returns, so a thread that stalls past the deadlines (a loaded machine, a sanitizer)
        // leaves them all due together, which must still fire in deadline order.
        let backend = h.backend
        try backend.schedule(.after(.zero)) { _ in
            let base = backend.now()
            do {
                for delay in [60, 20, 40, 80, 1] {
                    try backend.schedule(.at(base + ms(delay))) { _ in order.withLock { $0.append(delay) } }
                }
            } catch { failure.withLock { $0 = error } }
        }
        #expect(h.waitUntil { order.current.count == 5 || failure.current != nil })
        #expect(failure.current == nil)
        #expect(order.current == [1, 20, 40, 60, 80])
    }

    /// Each clock has its own queue; timers overdue together on different clocks still fire in
    /// the order of their deadlines, however long overdue each is.
    static func overdueTimersOnDifferentClocksFireInDeadlineOrder(_ kind: BackendUnderTest) throws {
        let timers: [(name: String, delay: Int, clock: DeadlineClock)] = [
            ("continuous+160", 160, .continuous), ("monotonic+120", 120, .monotonic), ("continuous+80", 80, .continuous),
            ("wall+40", 40, .wall),
        ]
        // The deadlines are 40 ms apart only if the four are scheduled together: a thread
        // preempted between two schedules (seen on a loaded machine: 40 ms and more) moves the
        // later ones by as much, and their real order with them. An attempt whose schedules took
        // 20 ms or more cannot judge the order, and the check tries again.
        for _ in 0..<5 {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let order = Locked<[String]>([])
            let failure = Locked<(any Error)?>(nil)
            let schedulesTook = Locked<Duration?>(nil)
            let backend = h.backend
            // Scheduled from inside a handler that then holds the loop past every deadline: all
            // four are overdue together, by 40 to 160 ms, when it returns.
            try backend.schedule(.after(.zero)) { _ in
                let start = MonotonicInstant.now()
                do {
                    for timer in timers {
                        try backend.schedule(.after(ms(timer.delay), on: timer.clock)) { _ in order.withLock { $0.append(timer.name) } }
                    }
                } catch { failure.withLock { $0 = error } }
                schedulesTook.withLock { $0 = MonotonicInstant.now() - start }
                h.stall(ms(200))
            }
            #expect(h.waitUntil { order.current.count == 4 || failure.current != nil })
            #expect(failure.current == nil)
            guard let took = schedulesTook.current, took < ms(20) else { continue }
            #expect(order.current == ["wall+40", "continuous+80", "monotonic+120", "continuous+160"])
            return
        }
        Issue.record("no attempt of 5 scheduled its four timers within 20 ms: the order was not checked", severity: .warning)
    }

    static func equalDeadlinesFireInSchedulingOrder(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let order = Locked<[Int]>([])
        let deadline = h.backend.now() + ms(30)
        for index in 0..<50 {
            try h.backend.schedule(.at(deadline)) { _ in order.withLock { $0.append(index) } }
        }
        #expect(h.waitUntil { order.current.count == 50 })
        #expect(order.current == Array(0..<50))
    }

    static func aRescheduledTimerTakesItsPlaceAmongEqualDeadlinesAsOfItsReschedule(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let order = Locked<[String]>([])
        let failure = Locked<(any Error)?>(nil)
        // From inside a handler, as in `timersFireInDeadlineOrder`: a stalled thread leaves all
        // four due together, in the order of their last schedule or reschedule.
        let backend = h.backend
        try backend.schedule(.after(.zero)) { _ in
            let soon = backend.now() + ms(10)
            let deadline = soon + ms(10)
            do {
                let movedLater = try backend.schedule(.at(soon)) { _ in order.withLock { $0.append("moved later") } }
                try backend.schedule(.at(deadline)) { _ in order.withLock { $0.append("first") } }
                let movedEarlier = try backend.schedule(.at(deadline + ms(500))) { _ in order.withLock { $0.append("moved earlier") } }
                try backend.schedule(.at(deadline)) { _ in order.withLock { $0.append("second") } }
                try movedLater.reschedule(.at(deadline))
                try movedEarlier.reschedule(.at(deadline))
            } catch { failure.withLock { $0 = error } }
        }
        #expect(h.waitUntil { order.current.count == 4 || failure.current != nil })
        #expect(failure.current == nil)
        #expect(order.current == ["first", "second", "moved later", "moved earlier"])
    }

    static func repeatsWithACountStayOnTheGrid(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        let timer = try h.backend.schedule(.every(ms(10), firstAfter: ms(5), count: 5), handler: log.record)
        #expect(h.waitUntil { timer.currentState == .finished })
        h.pass(ms(30))
        let ticks = log.all
        #expect(ticks.map(\.index) == [0, 1, 2, 3, 4])
        let first = try #require(ticks.first).scheduled
        for tick in ticks {
            let offset = (tick.scheduled - first).components
            #expect(offset.attoseconds % 10_000_000_000_000_000 == 0, "fire \(tick.index) is off the 10 ms grid")
            expectOnTime(tick, on: kind)
        }
        #expect(h.registry.count == 0)
    }

    static func skipDropsMissedTicksAndStaysOnTheGrid(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        try h.backend.schedule(.every(ms(10)), missedTicks: .skip) { tick in
            log.record(tick)
            if tick.index == 0 { h.work(ms(35)) }
            log.recordReturn(of: tick, at: h.backend.now())
        }
        #expect(h.waitUntil { log.count >= 3 })
        let ticks = log.all
        #expect(ticks[1].missed >= 2)
        #expect((ticks[1].scheduled - ticks[0].scheduled) >= ms(30))
        for tick in ticks {
            #expect((tick.scheduled - ticks[0].scheduled).components.attoseconds % 10_000_000_000_000_000 == 0)
            expectOnTime(tick, notBefore: log.returnOfCall(before: tick), on: kind)
        }
    }

    static func burstDeliversEveryMissedTick(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        try h.backend.schedule(.every(ms(10)), missedTicks: .burst) { tick in
            log.record(tick)
            if tick.index == 0 { h.work(ms(35)) }
            log.recordReturn(of: tick, at: h.backend.now())
        }
        #expect(h.waitUntil { log.count >= 5 })
        let ticks = log.all.prefix(5)
        for (k, tick) in ticks.enumerated() {
            #expect(tick.scheduled == ticks[ticks.startIndex].scheduled + ms(10) * k)
            #expect(tick.missed == 0)
            expectOnTime(tick, notBefore: log.returnOfCall(before: tick), on: kind)
        }
    }

    static func delayRestartsTheGridAfterALateTick(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        try h.backend.schedule(.every(ms(10)), missedTicks: .delay) { tick in
            log.record(tick)
            if tick.index == 0 { h.work(ms(35)) }
            log.recordReturn(of: tick, at: h.backend.now())
        }
        #expect(h.waitUntil { log.count >= 3 })
        let ticks = log.all
        for tick in ticks { expectOnTime(tick, notBefore: log.returnOfCall(before: tick), on: kind) }
        #expect(ticks[1].missed >= 2)
        #expect(ticks[1].scheduled >= ticks[0].scheduled + ms(35))
        #expect(ticks[1].scheduled == ticks[1].actual, "the grid restarts at the late fire")
        // Tick 2 is on the new grid, unless it was itself late by the threshold or more (a
        // busy machine), in which case the grid restarted again, at its fire.
        let onGrid = ticks[1].scheduled + ms(10)
        let threshold = MissedTickPolicy.delayThreshold(interval: ms(10))
        #expect(ticks[2].scheduled == onGrid || (ticks[2].scheduled == ticks[2].actual && ticks[2].actual - onGrid >= threshold))
    }

    static func toleranceIsHonouredAsMayFireLate(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        try h.backend.schedule(.after(ms(10)), tolerance: ms(20), handler: log.record)
        #expect(h.waitUntil { log.count == 1 })
        let tick = try #require(log.all.first)
        expectOnTime(tick, "the one-shot", allowing: ms(20), on: kind)
    }

    static func handlersCanScheduleFromInsideAndFromManyThreads(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let fired = Locked(0)
        onThreads(4) { _ in
            for _ in 0..<50 {
                _ = try? h.backend.schedule(.after(ms(5))) { _ in
                    fired.withLock { $0 += 1 }
                    _ = try? h.backend.schedule(.after(ms(1))) { _ in fired.withLock { $0 += 1 } }
                }
            }
        }
        #expect(h.waitUntil { fired.current == 400 })
    }

    // MARK: States and cancellation

    static func suspendTwiceThenResumeOnceRunsAgain(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        let timer = try h.backend.schedule(.every(ms(5)), handler: log.record)
        #expect(h.waitUntil { log.count >= 2 })
        try timer.suspend()
        try timer.suspend()
        let atSuspend = log.count
        h.pass(ms(50))
        #expect(log.count <= atSuspend + 1, "at most a handler already running when suspend() returned")
        let settled = log.count
        h.pass(ms(50))
        #expect(log.count == settled)
        try timer.resume()
        #expect(h.waitUntil { log.count >= settled + 2 })
        #expect(h.registry.snapshot().first?.state == .scheduled)
    }

    static func noHandlerBeginsAfterCancelAndWaitReturns(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let began = Locked(0)
        let timer = try h.backend.schedule(.every(ms(1))) { _ in began.withLock { $0 += 1 } }
        #expect(h.waitUntil { began.current >= 3 })
        // cancel() promises only that no call *begins* after it returns; one may be under
        // way. cancelAndWait() also waits that one out, so the count is final.
        timer.cancelAndWait()
        timer.cancel()
        let atCancel = began.current
        h.pass(ms(50))
        #expect(began.current == atCancel)
        #expect(h.registry.count == 0)
    }

    static func operationsAfterCancelAreTypedErrors(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let timer = try h.backend.schedule(.every(ms(10)), name: "gone") { _ in }
        timer.cancel()
        let ended = TimerError.timerEnded(name: "gone", state: .cancelled)
        #expect(throws: ended) { try timer.resume() }
        #expect(throws: ended) { try timer.suspend() }
        #expect(throws: ended) { try timer.reschedule(.after(ms(5))) }
    }

    static func aHandlerCanCancelItself(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        let timer = try h.backend.schedule(.every(ms(2))) { tick in
            log.record(tick)
            if tick.index == 2 { tick.timer.cancelAndWait() }  // must not deadlock
        }
        #expect(h.waitUntil { timer.currentState == .cancelled })
        h.pass(ms(20))
        #expect(log.count == 3)
    }

    static func aOneShotIsLiveUntilItsCallReturns(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        // Rescheduled from its own call, a one-shot makes another; cancelled from it, it ends
        // cancelled, that call counted.
        let calls = Locked(0)
        let timer = try h.backend.schedule(.after(ms(2))) { tick in
            let call = calls.withLock {
                $0 += 1
                return $0
            }
            if call == 1 { try? tick.timer.reschedule(.after(ms(2))) } else { tick.timer.cancel() }
        }
        #expect(h.waitUntil { timer.endReason != nil })
        #expect(calls.current == 2)
        #expect(timer.endReason == .cancelled && timer.fireCount == 2)
        // Its backend shut down from its call, it ends for that.
        let shutting = try h.backend.schedule(.after(ms(2))) { [backend = h.backend] _ in backend.shutdown() }
        #expect(h.waitUntil { shutting.endReason != nil })
        #expect(shutting.endReason == .backendShutDown && shutting.fireCount == 1)
    }

    static func cancelAndWaitWaitsForARunningHandler(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let entered = DispatchSemaphore(value: 0)
        let finished = Locked(false)
        let timer = try h.backend.schedule(.after(ms(1))) { _ in
            entered.signal()
            blockRealTime(ms(100))
            finished.withLock { $0 = true }
        }
        h.driveInBackground(for: ms(5))
        #expect(entered.wait(timeout: .now() + .seconds(10)) == .success)
        timer.cancelAndWait()
        #expect(finished.current, "cancelAndWait returned while the handler was still running")
    }

    /// A call the loop has begun (here: its observer's `willFire` is running) is not stopped by
    /// `cancel()`: the handler may still start after `cancel()` returns, as the docs say.
    /// `cancelAndWait()` is the one that waits for it.
    static func aCallAlreadyBegunRunsItsHandlerAfterCancelAndCancelAndWaitWaitsForIt(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let inWillFire = DispatchSemaphore(value: 0)
        let letGo = DispatchSemaphore(value: 0)
        let handlerRan = Locked(false)
        // An hour away until its observer is in place: on a busy machine a 1 ms timer can fire first.
        let timer = try h.backend.schedule(.after(.seconds(3600))) { _ in
            blockRealTime(ms(20))
            handlerRan.withLock { $0 = true }
        }
        try timer.addObserver(
            TimerObserver(willFire: { _ in
                inWillFire.signal()
                letGo.wait()
            }))
        try timer.reschedule(.after(ms(1)))
        h.driveInBackground(for: ms(5))
        #expect(inWillFire.wait(timeout: .now() + .seconds(10)) == .success)
        timer.cancel()
        #expect(!handlerRan.current)
        letGo.signal()
        timer.cancelAndWait()
        #expect(handlerRan.current, "cancelAndWait() returned before the call already begun had run its handler")
    }

    static func shutdownCancelsTimersAndRefusesNewOnes(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        let began = Locked(0)
        let running = try h.backend.schedule(.every(ms(1))) { _ in began.withLock { $0 += 1 } }
        let paused = try h.backend.schedule(.every(ms(1))) { _ in }
        try paused.suspend()
        #expect(h.waitUntil { began.current >= 2 })
        h.backend.shutdown()
        h.backend.shutdown()
        let atShutdown = began.current
        #expect(running.currentState == .cancelled && paused.currentState == .cancelled)
        #expect(h.registry.count == 0)
        #expect(throws: TimerError.backendShutDown(backend: h.backend.name)) {
            try h.backend.schedule(.after(ms(1))) { _ in }
        }
        blockRealTime(ms(20))
        #expect(began.current == atShutdown)
        h.shutdown()
    }

    final class Token: Sendable {}

    /// Everything a backend was given (handlers and their captures, observers, handles) and the
    /// backend and registry themselves are freed once it is shut down and dropped.
    static func aShutDownBackendLetsGoOfEverythingItWasGiven(_ kind: BackendUnderTest) throws {
        weak var backend: AnyObject?
        weak var registry: TimerRegistry?
        weak var handlerCapture: Token?
        weak var observerCapture: Token?
        weak var handle: TimerHandle?
        try {
            let h = try kind.makeHarness()
            backend = h.backend
            registry = h.registry
            let forHandlers = Token()
            let forObserver = Token()
            handlerCapture = forHandlers
            observerCapture = forObserver
            let fired = Counter()
            let repeating = try h.backend.schedule(.every(ms(1))) { _ in withExtendedLifetime(forHandlers) { fired.increment() } }
            try repeating.addObserver(TimerObserver(willFire: { _ in withExtendedLifetime(forObserver) {} }))
            handle = repeating
            try h.backend.schedule(.after(.seconds(60))) { _ in withExtendedLifetime(forHandlers) {} }
            try h.backend.schedule(.every(ms(5))) { _ in withExtendedLifetime(forHandlers) {} }.suspend()
            #expect(h.waitUntil { fired.current >= 2 })
            h.shutdown()
        }()
        // Dispatch and CF release cancelled native timers a moment later, hence the wait.
        #expect(waitFor { backend == nil && registry == nil }, "the backend or its registry was not freed")
        #expect(handlerCapture == nil && observerCapture == nil && handle == nil)
    }

    // MARK: Registry, proxy, observers

    static func timersAreRegisteredUnderUniqueNames(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let named = try h.backend.schedule(.every(ms(50)), name: "poller") { _ in }
        let anonymous = try h.backend.schedule(.after(.seconds(60))) { _ in }
        #expect(throws: TimerError.duplicateName("poller")) { try h.backend.schedule(.after(ms(1)), name: "poller") { _ in } }
        #expect(h.registry.timer(named: "poller") === named)
        #expect(h.registry.timer(named: anonymous.name) === anonymous)
        let snapshot = try h.registry.snapshot(named: "poller")
        #expect(snapshot.backend == h.backend.name)
        #expect(snapshot.state == .scheduled)
        #expect(snapshot.nextDeadline != nil)
        try h.registry.cancel(named: "poller")
        #expect(h.registry.names == [anonymous.name])
    }

    final class Target: Sendable {
        let ticks = Locked(0)
        let deinitRan: Locked<Bool>
        init(_ flag: Locked<Bool>) { deinitRan = flag }
        deinit { deinitRan.withLock { $0 = true } }
    }

    static func aReleasedTargetEndsItsTimers(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let deinitRan = Locked(false)
        var target: Target? = Target(deinitRan)
        let timer = try h.backend.schedule(.every(ms(2)), target: target!) { target, _ in target.ticks.withLock { $0 += 1 } }
        #expect(h.waitUntil { (target?.ticks.current ?? 0) >= 2 })
        target = nil
        #expect(h.waitUntil { deinitRan.current })
        // The timer notices at its next due time (within 2 ms) and leaves the registry.
        #expect(h.waitUntil { h.registry.count == 0 })
        #expect(timer.currentState == .cancelled)
    }

    static func registryObserversRecordLateness(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let observed = TickLog()
        let handled = Locked(0)
        // Removed at the end: the ticks it keeps hold their timers, which hold the registry.
        let token = h.registry.addObserver(TimerObserver(didFire: { tick, _ in observed.record(tick) }))
        defer { h.registry.removeObserver(token) }
        try h.backend.schedule(.every(ms(2), count: 5)) { _ in handled.withLock { $0 += 1 } }
        #expect(h.waitUntil { observed.count == 5 })
        #expect(handled.current == 5)
        #expect(observed.all.allSatisfy { $0.lateness >= .zero })
        // The ticks the observer saw say when the calls were due and began: they are on time.
        for tick in observed.all { expectOnTime(tick, on: kind) }
    }
}
