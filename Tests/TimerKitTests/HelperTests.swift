import Testing
import TimerKitTestSupport

@_spi(BackendImplementation) @testable import TimerKit

/// The helpers' exact semantics, on virtual time.
@Suite("Helpers on virtual time: debounce, throttle, timeouts, owned timers, live-timer caps")
struct HelperTests {
    /// Records which work ran, and when (virtual ms since the test's start).
    final class Runs: Sendable {
        private let log = Locked<[(String, Int)]>([])
        let clock: ManualBackend
        let start: MonotonicInstant
        init(_ clock: ManualBackend) {
            self.clock = clock
            start = clock.now()
        }
        func work(_ label: String) -> @Sendable () -> Void {
            { [self] in log.withLock { $0.append((label, Int((clock.now() - start) / .milliseconds(1)))) } }
        }
        var labels: [String] { log.current.map(\.0) }
        var times: [Int] { log.current.map(\.1) }
    }

    /// Advances virtual time to `ms` after the test's start.
    func at(_ ms: Int, _ clock: ManualBackend, _ runs: Runs) {
        clock.advance(to: runs.start + .milliseconds(ms))
    }

    // MARK: Debounce

    @Test func aBurstRunsOnlyTheLastCallsWorkOnceTheCallsStop() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let debouncer = try Debouncer(for: ms(300), on: clock)
        try debouncer.call(runs.work("a"))
        at(100, clock, runs)
        try debouncer.call(runs.work("b"))
        at(200, clock, runs)
        try debouncer.call(runs.work("c"))
        #expect(debouncer.isPending)
        at(499, clock, runs)
        #expect(runs.labels == [], "299 ms after the last call: still waiting")
        at(500, clock, runs)
        #expect(runs.labels == ["c"])
        #expect(runs.times == [500])
        #expect(!debouncer.isPending)
        at(5_000, clock, runs)
        #expect(runs.labels == ["c"], "once")
    }

    @Test func aBurstReusesOneTimerAndItWaitsSuspendedBetweenBursts() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let debouncer = try Debouncer(for: ms(50), name: "save", on: clock)
        #expect(clock.registry.count == 0, "no timer before the first call")
        try debouncer.call(runs.work("a"))
        let first = try #require(clock.registry.timer(named: "save"))
        #expect(first.currentState == .scheduled)
        #expect(first.snapshot.nextDeadline == runs.start + ms(50))
        for k in 1...100 {
            at(k, clock, runs)
            try debouncer.call(runs.work("b"))
        }
        #expect(clock.registry.timer(named: "save") === first, "one timer for the whole burst")
        #expect(first.snapshot.nextDeadline == runs.start + ms(150))
        at(150, clock, runs)
        #expect(runs.labels == ["b"])
        #expect(first.currentState == .suspended, "between bursts it waits, suspended, in the registry")
        try debouncer.call(runs.work("c"))
        #expect(clock.registry.timer(named: "save") === first, "the next burst reuses it")
        at(200, clock, runs)
        #expect(runs.labels == ["b", "c"])
        #expect(runs.times == [150, 200])
    }

    @Test func aCallDuringTheWorkStartsTheNextWaitFromThatCall() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let debouncer = try Debouncer(for: ms(100), on: clock)
        let record = runs.work("second")
        try debouncer.call { [clock] in
            runs.work("first")()
            clock.advance(by: ms(30))  // the work takes 30 ms, and a call comes meanwhile
            try? debouncer.call(record)
        }
        at(100, clock, runs)
        #expect(runs.labels == ["first"])
        at(229, clock, runs)
        #expect(runs.labels == ["first"], "100 ms after the call made at 130 ms, not after the work began")
        at(230, clock, runs)
        #expect(runs.labels == ["first", "second"])
    }

    @Test func cancellingMidWaitDropsTheWorkAndTheNextCallStartsAfresh() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let debouncer = try Debouncer(for: ms(100), name: "d", on: clock)
        try debouncer.call(runs.work("dropped"))
        at(50, clock, runs)
        debouncer.cancel()
        debouncer.cancel()  // idempotent
        #expect(!debouncer.isPending)
        #expect(clock.registry.timer(named: "d")?.currentState == .suspended)
        at(1_000, clock, runs)
        #expect(runs.labels == [])
        try debouncer.call(runs.work("next"))
        at(1_100, clock, runs)
        #expect(runs.labels == ["next"])
    }

    @Test func cancellingItsTimerByNameDropsTheWorkAndTheNextCallSchedulesAnother() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let debouncer = try Debouncer(for: ms(100), name: "d", on: clock)
        try debouncer.call(runs.work("dropped"))
        try clock.registry.cancel(named: "d")
        #expect(!debouncer.isPending)
        at(500, clock, runs)
        #expect(runs.labels == [])
        try debouncer.call(runs.work("next"))
        #expect(clock.registry.timer(named: "d")?.isActive == true)
        at(600, clock, runs)
        #expect(runs.labels == ["next"])
    }

    @Test func afterShutdownACallThrowsTheBackendsError() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        let runs = Runs(clock)
        let debouncer = try Debouncer(for: ms(100), on: clock)
        try debouncer.call(runs.work("dropped"))
        clock.shutdown()
        #expect(throws: TimerError.backendShutDown(backend: "manual")) { try debouncer.call(runs.work("late")) }
        #expect(!debouncer.isPending)
        #expect(clock.registry.count == 0)
    }

    @Test func releasingADebouncerCancelsItsTimerAndItsWorkNeverRuns() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        do {
            let debouncer = try Debouncer(for: ms(100), on: clock)
            try debouncer.call(runs.work("dropped"))
            #expect(clock.registry.count == 1)
        }
        #expect(clock.registry.count == 0)
        at(500, clock, runs)
        #expect(runs.labels == [])
    }

    @Test func replacedWorkWhoseCapturesCallBackIntoTimerKitIsReleasedOutsideTheLock() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let debouncer = try Debouncer(for: ms(100), on: clock)
        let reentered = Counter()
        final class CallsBack: Sendable {
            let debouncer: Debouncer
            let reentered: Counter
            init(_ debouncer: Debouncer, _ reentered: Counter) {
                self.debouncer = debouncer
                self.reentered = reentered
            }
            deinit {
                _ = debouncer.isPending  // would deadlock if released under the debouncer's lock
                reentered.increment()
            }
        }
        do {
            let capture = CallsBack(debouncer, reentered)
            try debouncer.call { _ = capture }
        }
        try debouncer.call {}  // displaces the first work: its capture's deinit runs
        #expect(reentered.current == 1)
        do {
            let capture = CallsBack(debouncer, reentered)
            try debouncer.call { _ = capture }
        }
        debouncer.cancel()
        #expect(reentered.current == 2)
    }

    @Test func debounceByNameIsRegisteredOnlyWhileWorkWaits() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        try clock.debounce("save", for: ms(300), runs.work("a"))
        at(100, clock, runs)
        try clock.debounce("save", for: ms(300), runs.work("b"))
        #expect(clock.registry.names == ["save"])
        #expect(clock.registry.snapshot().first?.nextDeadline == runs.start + ms(400))
        at(399, clock, runs)
        #expect(runs.labels == [])
        at(400, clock, runs)
        #expect(runs.labels == ["b"])
        #expect(clock.registry.count == 0, "nothing left registered once the work has run")
        try clock.debounce("save", for: ms(10), runs.work("c"))
        at(410, clock, runs)
        #expect(runs.labels == ["b", "c"])
    }

    @Test func debounceByNameCancelledByNameDropsTheWork() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        try clock.debounce("save", for: ms(300), runs.work("dropped"))
        try clock.registry.cancel(named: "save")
        #expect(clock.registry.count == 0)
        at(1_000, clock, runs)
        #expect(runs.labels == [])
        try clock.debounce("save", for: ms(300), runs.work("next"))
        at(1_300, clock, runs)
        #expect(runs.labels == ["next"])
    }

    @Test func debounceByNameRefusesBadInputNamingIt() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        try clock.schedule(.after(.seconds(60)), name: "plain") { _ in }
        #expect(throws: TimerError.duplicateName("plain")) { try clock.debounce("plain", for: ms(10)) {} }
        #expect(throws: TimerError.negativeDuration(parameter: "delay", value: ms(-1))) { try clock.debounce("d", for: ms(-1)) {} }
        #expect(throws: TimerError.emptyName) { try clock.debounce("", for: ms(1)) {} }
        #expect(throws: TimerError.reservedName("timer#1")) { try clock.debounce("timer#1", for: ms(1)) {} }
        #expect(throws: TimerError.negativeDuration(parameter: "delay", value: ms(-5))) { try Debouncer(for: ms(-5), on: clock) }
        try clock.throttle("t", every: ms(10)) {}
        #expect(throws: TimerError.duplicateName("t"), "a throttler's name is not a debouncer's") {
            try clock.debounce("t", for: ms(10)) {}
        }
        #expect(clock.registry.names == ["plain", "t"])
    }

    // MARK: Throttle

    @Test func leadingRunsTheFirstCallAtOnceAndDropsTheRestOfItsWindow() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let throttler = try Throttler(every: ms(100), edge: .leading, on: clock)
        try throttler.call(runs.work("a"))
        clock.runDue()
        #expect(runs.labels == ["a"])
        #expect(runs.times == [0])
        at(10, clock, runs)
        try throttler.call(runs.work("dropped"))
        at(99, clock, runs)
        try throttler.call(runs.work("dropped too"))
        #expect(!throttler.isPending)
        at(100, clock, runs)
        try throttler.call(runs.work("b"))
        clock.runDue()
        #expect(runs.labels == ["a", "b"])
        #expect(runs.times == [0, 100])
    }

    @Test func trailingRunsTheLatestCallWhenTheWindowCloses() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let throttler = try Throttler(every: ms(100), edge: .trailing, on: clock)
        try throttler.call(runs.work("a"))
        at(10, clock, runs)
        try throttler.call(runs.work("b"))
        at(50, clock, runs)
        try throttler.call(runs.work("c"))
        at(99, clock, runs)
        #expect(runs.labels == [])
        at(100, clock, runs)
        #expect(runs.labels == ["c"])
        at(130, clock, runs)
        try throttler.call(runs.work("d"))
        at(229, clock, runs)
        #expect(runs.labels == ["c"])
        at(230, clock, runs)
        #expect(runs.labels == ["c", "d"])
    }

    @Test func bothRunsTheFirstAtOnceAndTheLatestAtTheEndAndKeepsRunsAnIntervalApart() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let throttler = try Throttler(every: ms(100), edge: .both, on: clock)
        try throttler.call(runs.work("a"))
        clock.runDue()
        at(10, clock, runs)
        try throttler.call(runs.work("b"))
        at(60, clock, runs)
        try throttler.call(runs.work("c"))
        at(100, clock, runs)
        #expect(runs.labels == ["a", "c"])
        at(120, clock, runs)
        try throttler.call(runs.work("d"))
        clock.runDue()
        #expect(runs.labels == ["a", "c"], "the trailing run at 100 opened a window: d waits for its end")
        at(200, clock, runs)
        #expect(runs.labels == ["a", "c", "d"])
        at(400, clock, runs)
        try throttler.call(runs.work("e"))
        clock.runDue()
        #expect(runs.labels == ["a", "c", "d", "e"], "no window open: runs at once")
        #expect(runs.times == [0, 100, 200, 400])
    }

    @Test(arguments: [Throttler.Edge.leading, .both])
    func aLateLeadingRunStillKeepsTheNextRunAnIntervalAway(_ edge: Throttler.Edge) throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let throttler = try Throttler(every: ms(100), edge: edge, on: clock)
        try throttler.call(runs.work("a"))
        clock.stall(for: ms(80))  // the loop is busy: the leading run comes 80 ms late
        clock.runDue()
        #expect(runs.times == [80])
        at(100, clock, runs)
        try throttler.call(runs.work("b"))
        at(179, clock, runs)
        #expect(runs.labels == ["a"], "the window runs from the run at 80, not the call at 0")
        at(180, clock, runs)
        if edge == .both {
            #expect(runs.labels == ["a", "b"])
            #expect(runs.times == [80, 180])
        } else {
            #expect(runs.labels == ["a"], "inside the window: dropped")
            try throttler.call(runs.work("c"))
            clock.runDue()
            #expect(runs.times == [80, 180])
        }
    }

    @Test func aCallDuringATrailingRunWaitsForTheNextWindow() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let throttler = try Throttler(every: ms(100), edge: .both, on: clock)
        try throttler.call(runs.work("a"))
        clock.runDue()
        let late = runs.work("during")
        try throttler.call {
            runs.work("b")()
            try? throttler.call(late)
        }
        at(100, clock, runs)
        #expect(runs.labels == ["a", "b"])
        at(200, clock, runs)
        #expect(runs.labels == ["a", "b", "during"])
        #expect(runs.times == [0, 100, 200])
    }

    @Test func cancellingAThrottlerDropsWaitingWorkAndClosesTheWindow() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        let throttler = try Throttler(every: ms(100), edge: .trailing, name: "scroll", on: clock)
        try throttler.call(runs.work("dropped"))
        at(50, clock, runs)
        throttler.cancel()
        at(300, clock, runs)
        #expect(runs.labels == [])
        try throttler.call(runs.work("next"))
        at(400, clock, runs)
        #expect(runs.labels == ["next"])
        // Cancelled by name inside a window: the window goes too, and the next call opens one.
        try throttler.call(runs.work("dropped by name"))
        try clock.registry.cancel(named: "scroll")
        at(450, clock, runs)
        try throttler.call(runs.work("after"))
        at(549, clock, runs)
        #expect(runs.labels == ["next"])
        at(550, clock, runs)
        #expect(runs.labels == ["next", "after"])
    }

    @Test func throttleByNameLeavesTheRegistryOnceItsWindowClosesIdle() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let runs = Runs(clock)
        try clock.throttle("scroll", every: ms(100), edge: .leading, runs.work("a"))
        clock.runDue()
        at(50, clock, runs)
        try clock.throttle("scroll", every: ms(100), edge: .leading, runs.work("dropped"))
        #expect(clock.registry.names == ["scroll"], "registered while its window is open")
        at(100, clock, runs)
        #expect(clock.registry.count == 0)
        try clock.throttle("scroll", every: ms(100), edge: .leading, runs.work("b"))
        clock.runDue()
        #expect(runs.labels == ["a", "b"])
        #expect(throws: TimerError.zeroInterval(parameter: "interval")) { try clock.throttle("x", every: .zero) {} }
        #expect(throws: TimerError.negativeDuration(parameter: "interval", value: ms(-1))) {
            try Throttler(every: ms(-1), on: clock)
        }
    }

    // MARK: Timeouts

    @Test func anOperationThatRunsOutOfTimeIsCancelledAndThrowsTimeoutError() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let sawCancellation = Locked(false)
        let start = clock.now()
        let attempt = Task(executorPreference: clock.taskExecutor) {
            try await withTimeout(.seconds(2), on: clock, name: "fetch") {
                do {
                    try await clock.clock.sleep(for: .seconds(5))
                } catch {
                    sawCancellation.withLock { $0 = error is CancellationError }
                    throw error
                }
                return "reply"
            }
        }
        await clock.settle()
        #expect(clock.registry.names.contains("fetch"))
        await clock.advanceAndSettle(by: .milliseconds(1_999))
        #expect(clock.registry.count == 2, "the timeout and the operation's sleep, both waiting")
        await clock.advanceAndSettle(by: .milliseconds(1))
        await #expect(throws: TimeoutError(timerName: "fetch", backend: "manual", limit: .seconds(2), deadline: start + .seconds(2))) {
            try await attempt.value
        }
        #expect(sawCancellation.current)
        #expect(clock.registry.count == 0, "nothing left registered")
    }

    @Test func anOperationThatFinishesInTimeReturnsItsValueAndLeavesNothingRegistered() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let attempt = Task(executorPreference: clock.taskExecutor) {
            let value = try await withTimeout(.seconds(2), on: clock, name: "limit") {
                try await clock.clock.sleep(for: .seconds(1))
                return 42
            }
            // (The operation's own sleep, a one-shot that fired, may still be leaving the registry.)
            return (value, clock.registry.names.filter { $0 == "limit" }.count)
        }
        await clock.advanceAndSettle(by: .seconds(1))
        let (value, registeredAfter) = try await attempt.value
        #expect(value == 42)
        #expect(registeredAfter == 0, "the timeout's timer is gone when withTimeout returns")
    }

    @Test func withTimeoutReturnsOnlyOnceACancelledOperationHasReturned() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let gate = Locked<CheckedContinuation<Void, Never>?>(nil)
        let returned = Locked(false)
        let attempt = Task(executorPreference: clock.taskExecutor) {
            defer { returned.withLock { $0 = true } }
            return try await withTimeout(.seconds(1), on: clock) {
                // Ignores cancellation: waits for the test to let it go.
                await withCheckedContinuation { continuation in gate.withLock { $0 = continuation } }
                return 1
            }
        }
        await clock.advanceAndSettle(by: .seconds(1))
        #expect(!returned.current, "time ran out, but the operation has not returned")
        let waiting = gate.withLock { $0.take() }
        #expect(waiting != nil)
        waiting?.resume()
        await #expect(throws: TimeoutError.self, "its value came too late to count") { try await attempt.value }
    }

    @Test func theOperationsOwnErrorIsRethrown() async throws {
        struct Refused: Error, Equatable {}
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        await #expect(throws: Refused()) {
            try await withTimeout(.seconds(2), on: clock) { () async throws -> Int in throw Refused() }
        }
        #expect(clock.registry.count == 0)
    }

    @Test func aDeadlineAlreadyPastTimesOutAtOnce() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        clock.advance(by: .seconds(10))
        let past = MonotonicInstant(nanoseconds: clock.now().nanoseconds - 1_000_000_000)
        let attempt = Task(executorPreference: clock.taskExecutor) {
            try await withDeadline(past, on: clock) { try await clock.clock.sleep(for: .seconds(60)) }
        }
        await clock.advanceAndSettle(by: .zero)
        await #expect(throws: TimeoutError(timerName: nil, backend: "manual", limit: .zero, deadline: past)) { try await attempt.value }
        #expect(clock.registry.count == 0)
        // Cancellation is cooperative: an operation that never suspends returns its value.
        #expect(try await withDeadline(past, on: clock) { 5 } == 5)
        #expect(clock.registry.count == 0)
    }

    @Test func cancellingTheTimeoutByNameLetsTheOperationFinish() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let attempt = Task(executorPreference: clock.taskExecutor) {
            try await withTimeout(.seconds(1), on: clock, name: "limit") {
                try await clock.clock.sleep(for: .seconds(3))
                return "done"
            }
        }
        await clock.settle()
        try clock.registry.cancel(named: "limit")
        await clock.advanceAndSettle(by: .seconds(3))
        #expect(try await attempt.value == "done")
    }

    @Test func badTimeoutInputIsATypedError() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        await #expect(throws: TimerError.negativeDuration(parameter: "limit", value: .seconds(-1))) {
            try await withTimeout(.seconds(-1), on: clock) { 1 }
        }
        await #expect(throws: TimerError.reservedName("timer#3")) { try await withTimeout(.seconds(1), on: clock, name: "timer#3") { 1 } }
        await #expect(throws: TimerError.negativeDuration(parameter: "tolerance", value: .seconds(-1))) {
            try await withTimeout(.seconds(1), on: clock, tolerance: .seconds(-1)) { 1 }
        }
        try clock.schedule(.after(.seconds(60)), name: "held") { _ in }
        await #expect(throws: TimerError.duplicateName("held"), "an operation that never suspends too") {
            try await withTimeout(.seconds(1), on: clock, name: "held") { 1 }
        }
        clock.shutdown()
        await #expect(throws: TimerError.backendShutDown(backend: "manual")) {
            try await withTimeout(.seconds(1), on: clock) { try await Task.sleep(for: .seconds(3600)) }
        }
        await #expect(throws: TimerError.backendShutDown(backend: "manual"), "an operation that never suspends too") {
            try await withTimeout(.seconds(1), on: clock) { 1 }
        }
    }

    // MARK: Owned timers

    @Test func anOwnedTimerEndsWithItsOwner() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let fires = Counter()
        final class Poller {
            var refresh: OwnedTimer?
        }
        var poller: Poller? = Poller()
        poller?.refresh = try OwnedTimer(clock.schedule(.every(ms(10))) { _ in fires.increment() })
        let handle = try #require(clock.registry.snapshot().first)
        clock.advance(by: ms(30))
        #expect(fires.current == 3)
        poller = nil
        #expect(clock.registry.count == 0, "releasing the owner cancelled \(handle.name)")
        clock.advance(by: ms(30))
        #expect(fires.current == 3)
        withExtendedLifetime(poller) {}
    }

    @Test func reassigningOrReleasingAnOwnedTimer() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        var owned = try OwnedTimer(clock.schedule(.after(.seconds(1)), name: "first") { _ in })
        let first = owned.handle
        owned = try OwnedTimer(clock.schedule(.after(.seconds(1)), name: "second") { _ in })
        #expect(first.currentState == .cancelled, "the value it replaced was destroyed")
        let kept = owned.release()
        #expect(kept.currentState == .scheduled, "release gives the timer up without cancelling it")
        #expect(clock.registry.names == ["second"])
    }

    // MARK: Live-timer caps

    @Test func aBackendsCapRefusesTheNextTimerNamingTheCap() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        #expect(clock.maxLiveTimers == nil)
        try clock.limitLiveTimers(to: 3)
        #expect(clock.maxLiveTimers == 3)
        let a = try clock.schedule(.after(ms(10))) { _ in }
        let b = try clock.schedule(.every(ms(10))) { _ in }
        try b.suspend()
        _ = try clock.schedule(.after(.seconds(60))) { _ in }
        #expect(throws: TimerError.liveTimerLimit(scope: "manual backend", limit: 3), "suspended timers count") {
            try clock.schedule(.after(ms(1))) { _ in }
        }
        #expect(clock.registry.count == 3, "a refused timer is not registered")
        #expect(clock.refusedByLiveTimerLimit == 1, "and is counted")
        clock.advance(by: ms(10))  // `a` fires and finishes
        #expect(a.currentState == .finished)
        try clock.schedule(.after(.seconds(60))) { _ in }
        #expect(throws: TimerError.liveTimerLimit(scope: "manual backend", limit: 3)) { try clock.debounce("d", for: ms(1)) {} }
        b.cancel()
        try clock.debounce("d", for: ms(1)) {}
        try clock.limitLiveTimers(to: 1)
        #expect(clock.registry.count == 3, "a lower cap keeps the timers live already")
        try clock.limitLiveTimers(to: nil)
        try clock.schedule(.after(ms(1))) { _ in }
        #expect(throws: TimerError.invalidOption(name: "limit", value: "-1", allowed: "0... or nil")) { try clock.limitLiveTimers(to: -1) }
    }

    @Test func aRegistrysCapCountsEveryBackendOnIt() throws {
        let registry = TimerRegistry()
        let one = ManualBackend(registry: registry)
        let two = ManualBackend(registry: registry)
        defer {
            one.shutdown()
            two.shutdown()
        }
        try registry.limitLiveTimers(to: 2)
        #expect(registry.maxLiveTimers == 2)
        try one.schedule(.after(.seconds(1))) { _ in }
        let last = try two.schedule(.after(.seconds(1))) { _ in }
        #expect(throws: TimerError.liveTimerLimit(scope: "registry", limit: 2)) { try one.schedule(.after(.seconds(1))) { _ in } }
        #expect(registry.refusedByLiveTimerLimit == 1)
        #expect(one.refusedByLiveTimerLimit == 0, "the registry's cap refused it, not the backend's")
        last.cancel()
        try one.schedule(.after(.seconds(1))) { _ in }
        two.shutdown()
        #expect(registry.count == 2)
    }

    /// Timers scheduled while the registry has no cap count against one set later: the count
    /// is kept whether or not a cap is set.
    @Test func aRegistrysCapCountsTimersScheduledBeforeItWasSet() throws {
        let registry = TimerRegistry()
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let first = try clock.schedule(.after(.seconds(1))) { _ in }
        try clock.schedule(.after(.seconds(1)), calling: QuietCallback())
        try registry.limitLiveTimers(to: 2)
        #expect(throws: TimerError.liveTimerLimit(scope: "registry", limit: 2)) { try clock.schedule(.after(.seconds(1))) { _ in } }
        first.cancel()
        try clock.schedule(.after(.seconds(1))) { _ in }
        try registry.limitLiveTimers(to: nil)
        try clock.schedule(.after(.seconds(1))) { _ in }
        try registry.limitLiveTimers(to: 3)
        #expect(throws: TimerError.liveTimerLimit(scope: "registry", limit: 3)) { try clock.schedule(.after(.seconds(1))) { _ in } }
        #expect(registry.refusedByLiveTimerLimit == 2)
    }
}

extension HelperTests {
    @Test func aTimerEndedByItsLoopsFailureIsToldTheError() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let timer = try clock.schedule(.every(.seconds(1))) { _ in }
        let told = Locked<TimerEndReason?>(nil)
        timer.onEnd { reason in told.withLock { $0 = reason } }
        let cause = TimerError.systemCall(call: "epoll_wait", errno: 9)
        clock.scheduler.fail(with: cause)
        #expect(try await timer.ended == .loopFailed(cause))
        #expect(told.current == .loopFailed(cause))
        // Told at once when it has ended already.
        timer.onEnd { reason in told.withLock { $0 = reason == .loopFailed(cause) ? nil : reason } }
        #expect(told.current == nil)
    }
}

// MARK: Jitter

extension HelperTests {
    /// Runs `timers` repeating timers of `interval` with `jitter`, all on one grid, for
    /// `fires` intervals of virtual time in 1 ms steps, and returns each one's ticks.
    func jitteredTicks(
        timers: Int, interval: Duration, jitter: Duration, fires: Int, seed: UInt64, policy: MissedTickPolicy = .skip
    ) throws -> (start: MonotonicInstant, ticks: [[Tick]]) {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        clock.seedJitter(seed)
        let start = clock.now()
        let logs = (0..<timers).map { _ in TickLog() }
        for log in logs {
            try clock.schedule(.every(interval, jitter: jitter), missedTicks: policy, handler: log.record)
        }
        for _ in 0..<(fires * Int(interval / .milliseconds(1))) { clock.advance(by: .milliseconds(1)) }
        return (start, logs.map(\.all))
    }

    @Test func eachFireIsJitteredAfterItsGridPointAndTheGridNeverDrifts() throws {
        for policy in [MissedTickPolicy.skip, .delay, .burst] {
            let (start, ticks) = try jitteredTicks(timers: 20, interval: ms(100), jitter: ms(40), fires: 30, seed: 7, policy: policy)
            var offsets = Set<Duration>()
            for timerTicks in ticks {
                #expect(timerTicks.count >= 29, "\(policy)")
                for tick in timerTicks {
                    let gridPoint = start + ms(100) * (tick.index + 1)
                    let offset = tick.scheduled - gridPoint
                    #expect(offset >= .zero && offset <= ms(40), "\(policy): tick \(tick.index) is \(offset) from its grid point")
                    #expect(tick.actual >= tick.scheduled, "never early")
                    #expect(tick.actual - tick.scheduled < ms(1), "fired at its jittered time (1 ms steps)")
                    #expect(tick.missed == 0)
                    offsets.insert(offset)
                }
            }
            #expect(offsets.count > 30, "\(policy): the delays are spread over the window, not one value")
        }
    }

    @Test func aSeedMakesTheDrawsRepeatable() throws {
        func delays(_ seed: UInt64) throws -> [Duration] {
            let (start, ticks) = try jitteredTicks(timers: 3, interval: ms(50), jitter: ms(20), fires: 10, seed: seed)
            return ticks.flatMap { $0.map { $0.scheduled - start - ms(50) * ($0.index + 1) } }
        }
        #expect(try delays(42) == delays(42))
        #expect(try delays(42) != delays(43))
    }

    @Test func aHerdWithJitterIsSpreadOverTheWindow() throws {
        let (_, together) = try jitteredTicks(timers: 1_000, interval: ms(100), jitter: .zero, fires: 2, seed: 1)
        let (_, spread) = try jitteredTicks(timers: 1_000, interval: ms(100), jitter: ms(50), fires: 2, seed: 1)
        func busiestMillisecond(_ ticks: [[Tick]]) -> Int {
            Dictionary(grouping: ticks.joined(), by: { $0.actual.nanoseconds / 1_000_000 }).values.map(\.count).max() ?? 0
        }
        #expect(busiestMillisecond(together) == 1_000, "without jitter all thousand fire in one millisecond")
        #expect(busiestMillisecond(spread) < 60, "with 50 ms of jitter about 20 a millisecond")
    }

    @Test func badJitterIsATypedErrorNamingIt() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        #expect(throws: TimerError.negativeDuration(parameter: "jitter", value: ms(-1))) {
            try clock.schedule(.every(ms(10), jitter: ms(-1))) { _ in }
        }
        #expect(
            throws: TimerError.invalidOption(
                name: "jitter", value: "0.01 seconds", allowed: "0 up to less than the interval (0.01 seconds)")
        ) {
            try clock.schedule(.every(ms(10), jitter: ms(10))) { _ in }
        }
        let timer = try clock.schedule(.every(ms(10))) { _ in }
        #expect(throws: TimerError.negativeDuration(parameter: "jitter", value: ms(-2))) {
            try timer.reschedule(.every(ms(10), startingAt: clock.now(), jitter: ms(-2)))
        }
        #expect(clock.registry.count == 1)
    }
}

// MARK: Async work

extension HelperTests {
    @Test func asyncDebouncedWorkRunsAsATaskAndRunsNeverOverlap() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let log = Locked<[String]>([])
        let debouncer = try Debouncer(for: ms(100), on: clock)
        try debouncer.call {
            log.withLock { $0.append("first begins") }
            try? await clock.clock.sleep(for: ms(500))  // outlasts the next burst's wait
            log.withLock { $0.append("first ends") }
        }
        await clock.advanceAndSettle(by: ms(100))
        #expect(log.current == ["first begins"])
        let second: @Sendable () async -> Void = { log.withLock { $0.append("second") } }
        try debouncer.call(second)
        await clock.advanceAndSettle(by: ms(100))
        #expect(log.current == ["first begins"], "due, but the first run's task has not returned")
        await clock.advanceAndSettle(by: ms(400))
        #expect(log.current == ["first begins", "first ends", "second"])
    }

    @Test func cancellingAHelperCancelsItsRunningTask() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let sawCancellation = Locked(false)
        let throttler = try Throttler(every: ms(100), on: clock)
        try throttler.call {
            do { try await clock.clock.sleep(for: .seconds(3600)) } catch { sawCancellation.withLock { $0 = error is CancellationError } }
        }
        clock.runDue()
        await clock.settle()
        throttler.cancel()
        await clock.settle()
        #expect(sawCancellation.current)
    }

    @Test func asyncWorkByName() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let ran = Locked<[String]>([])
        for text in ["a", "ab", "abc"] {
            let search: @Sendable () async -> Void = { ran.withLock { $0.append(text) } }
            let scroll: @Sendable () async -> Void = { ran.withLock { $0.append("scroll " + text) } }
            try clock.debounce("search", for: ms(300), search)
            try clock.throttle("scroll", every: ms(300), edge: .trailing, scroll)
        }
        await clock.advanceAndSettle(by: ms(300))
        #expect(ran.current.sorted() == ["abc", "scroll abc"])
        #expect(clock.registry.count == 0)
    }
}

/// A callback that does nothing, for timers scheduled with a key.
private final class QuietCallback: TimerCallback {
    func timerFired(_ fire: TimerFire) {}
}
