import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

@Suite("State machine and cancellation")
struct StateMachineTests {
    let registry = TimerRegistry()

    @Test func suspendTwiceResumeOnceRunsAgain() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let timer = try clock.schedule(.every(ms(10)), handler: log.record)
        try timer.suspend()
        try timer.suspend()
        #expect(timer.currentState == .suspended)
        clock.advance(by: ms(100))
        #expect(log.count == 0)
        try timer.resume()
        #expect(timer.currentState == .scheduled)
        clock.runDue()
        // Ten grid points passed while suspended: .skip fires the latest once.
        #expect(log.count == 1)
        #expect(log.all.first?.missed == 9)
        clock.advance(by: ms(10))
        #expect(log.count == 2)
    }

    @Test func resumingAScheduledTimerChangesNothing() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let timer = try clock.schedule(.every(ms(10)), handler: log.record)
        try timer.resume()
        clock.advance(by: ms(30))
        #expect(log.count == 3)
    }

    @Test func cancelIsIdempotentAndOperationsAfterItThrow() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let timer = try clock.schedule(.every(ms(10)), name: "t") { _ in }
        timer.cancel()
        timer.cancel()
        timer.cancelAndWait()
        #expect(timer.currentState == .cancelled)
        #expect(throws: TimerError.timerEnded(name: "t", state: .cancelled)) { try timer.resume() }
        #expect(throws: TimerError.timerEnded(name: "t", state: .cancelled)) { try timer.suspend() }
        #expect(throws: TimerError.timerEnded(name: "t", state: .cancelled)) { try timer.reschedule(.after(ms(1))) }
        #expect(throws: TimerError.timerEnded(name: "t", state: .cancelled)) { try timer.addObserver(TimerObserver()) }
        #expect(registry.count == 0)
    }

    @Test func operationsAfterFinishThrow() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let timer = try clock.schedule(.after(ms(1)), name: "once") { _ in }
        clock.advance(by: ms(1))
        #expect(throws: TimerError.timerEnded(name: "once", state: .finished)) { try timer.resume() }
        timer.cancel()
        #expect(timer.currentState == .finished)
    }

    @Test func noHandlerRunsAfterCancelReturns() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let timer = try clock.schedule(.every(ms(10)), handler: log.record)
        clock.advance(by: ms(20))
        timer.cancel()
        clock.advance(by: ms(100))
        #expect(log.count == 2)
    }

    @Test func aHandlerMayCancelItselfAndWaitWithoutDeadlock() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        try clock.schedule(.every(ms(10))) { tick in
            log.record(tick)
            if tick.index == 2 { tick.timer.cancelAndWait() }
        }
        clock.advance(by: ms(100))
        #expect(log.count == 3)
        #expect(registry.count == 0)
    }

    @Test func aHandlerSuspendingItselfStaysSuspended() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let timer = try clock.schedule(.every(ms(10))) { tick in
            log.record(tick)
            try? tick.timer.suspend()
        }
        clock.advance(by: ms(100))
        #expect(log.count == 1)
        #expect(timer.currentState == .suspended)
        try timer.resume()
        clock.advance(by: ms(10))
        #expect(log.count == 2)
    }

    /// A timer's last call (a one-shot's, a count's last) finishes it whatever the call did to
    /// it: a one-shot that suspends itself must not fire a second time when resumed.
    @Test func aLastCallThatSuspendsItsTimerStillFinishesIt() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let oneShot = try clock.schedule(.after(ms(10))) { tick in
            log.record(tick)
            try? tick.timer.suspend()
        }
        let counted = try clock.schedule(.every(ms(10), count: 2)) { tick in
            log.record(tick)
            try? tick.timer.suspend()
            if tick.index == 0 { try? tick.timer.resume() }
        }
        clock.advance(by: ms(100))
        #expect(oneShot.currentState == .finished)
        #expect(counted.currentState == .finished)
        #expect(throws: TimerError.timerEnded(name: oneShot.name, state: .finished)) { try oneShot.resume() }
        #expect(log.count == 3)
        #expect(registry.count == 0)
    }

    @Test func rescheduleReplacesTheSchedule() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let start = clock.now()
        let timer = try clock.schedule(.after(ms(100)), handler: log.record)
        try timer.reschedule(.every(ms(20), count: 2))
        clock.advance(by: ms(200))
        #expect(log.all.map { $0.scheduled - start } == [ms(20), ms(40)])
    }

    @Test func shutdownCancelsEveryTimerAndRefusesNewOnes() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let running = try clock.schedule(.every(ms(10)), handler: log.record)
        let paused = try clock.schedule(.every(ms(10)), handler: log.record)
        try paused.suspend()
        clock.shutdown()
        clock.shutdown()
        #expect(running.currentState == .cancelled)
        #expect(paused.currentState == .cancelled)
        #expect(registry.count == 0)
        clock.advance(by: ms(100))
        #expect(log.count == 0)
        #expect(throws: TimerError.backendShutDown(backend: "manual")) {
            try clock.schedule(.after(ms(1))) { _ in }
        }
    }

    @Test func aHandlerCapturingItsOwnHandleDoesNotLeak() throws {
        weak var weakTimer: TimerHandle?
        do {
            let clock = ManualBackend(registry: registry)
            defer { clock.shutdown() }
            let box = Locked<TimerHandle?>(nil)
            let timer = try clock.schedule(.every(ms(10))) { _ in _ = box.current }
            box.withLock { $0 = timer }  // a cycle through the handler
            weakTimer = timer
            timer.cancel()
        }
        #expect(weakTimer == nil)
    }

    @Test func aDriverThatRefusesToArmIsATypedErrorAndLeavesNothingBehind() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let refusal = TimerError.nativeFailure(backend: "manual", call: "event_add")
        clock.injectedWakeFailure = refusal
        #expect(throws: refusal) { try clock.schedule(.after(ms(10))) { _ in } }
        #expect(registry.count == 0)
        #expect(clock.scheduler.pendingCount == 0)
        clock.injectedWakeFailure = nil
        let log = TickLog()
        let timer = try clock.schedule(.every(ms(10)), handler: log.record)
        try timer.suspend()
        clock.injectedWakeFailure = refusal
        #expect(throws: refusal) { try timer.resume() }
        #expect(timer.currentState == .suspended, "a failed resume can be retried")
        clock.injectedWakeFailure = nil
        try timer.resume()
        clock.advance(by: ms(10))
        #expect(log.count >= 1)
    }

    /// A loop that cannot re-arm its wake-up would never fire again: it shuts its scheduler
    /// down with the reason instead of accepting timers that never fire.
    @Test func aRefusedReArmInsideTheLoopShutsTheSchedulerDownWithTheReason() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let refusal = TimerError.nativeFailure(backend: "manual", call: "event_add")
        let timer = try clock.schedule(.every(ms(10))) { _ in clock.injectedWakeFailure = refusal }
        let paused = try clock.schedule(.every(ms(10))) { _ in }
        try paused.suspend()
        clock.advance(by: ms(10))
        #expect(timer.currentState == .cancelled)
        #expect(paused.currentState == .cancelled)
        #expect(clock.scheduler.failure == refusal)
        #expect(registry.count == 0)
        clock.injectedWakeFailure = nil
        #expect(throws: TimerError.loopFailed(backend: "manual", cause: refusal)) { try clock.schedule(.after(ms(1))) { _ in } }
        #expect(TimerError.loopFailed(backend: "manual", cause: refusal).description.contains("event_add"))
    }
}

@Suite("Waiting for a timer to end")
struct EndedTests {
    @Test func aCancelledWaitLeavesNoWaiterBehind() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let timer = try clock.schedule(.every(.seconds(1))) { _ in }
        let waiting = Task { try await timer.ended }
        @Sendable func waiters() -> Int { timer.scheduler.endWaiterCount(of: timer.key) }
        #expect(await waitForAsync { waiters() == 1 })
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(waiters() == 0, "the cancelled wait took its waiter back")
        #expect(timer.currentState == .scheduled)
    }
}
