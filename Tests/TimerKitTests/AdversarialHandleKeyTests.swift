import Dispatch
import Foundation
import Synchronization
import Testing
import TimerKit

/// Tries to break the public promises of `TimerHandle` and `TimerKey`: what they answer after
/// the end (also once their slot holds another timer), keys of other backends, cancels racing
/// fires on real threads, re-entrant deinits, rescheduling from inside a call, registry lookups
/// of keyed timers, and extreme deadlines.
@Suite("Adversarial handle and key")
struct AdversarialHandleKeyTests {

    // MARK: - Helpers

    /// A value shared between threads.
    final class Box<Value: Sendable>: Sendable {
        let mutex: Locked<Value>
        init(_ value: Value) { mutex = Locked(value) }
        var value: Value { mutex.withLock { $0 } }
        func with<R: Sendable>(_ body: (inout Value) -> R) -> R { mutex.withLock { body(&$0) } }
    }

    struct End: Sendable, Equatable {
        let key: TimerKey
        let reason: TimerEndReason
        let fires: Int
        /// The calls `timerFired` had seen for this key when `timerEnded` ran.
        let seen: Int
    }

    /// A callback that records every fire and end, and can run code on each fire.
    final class Recorder: TimerCallback {
        struct State {
            var fired: [TimerKey: Int] = [:]
            var indices: [TimerKey: [Int]] = [:]
            var ends: [End] = []
            var firedAfterEnd = 0
            var running: Set<TimerKey> = []
            var endWhileRunning = 0
        }
        let state = Locked(State())
        let endSignal = DispatchSemaphore(value: 0)
        let onFire: (@Sendable (TimerFire) -> Void)?

        init(onFire: (@Sendable (TimerFire) -> Void)? = nil) { self.onFire = onFire }

        func timerFired(_ fire: TimerFire) {
            state.withLock {
                if $0.ends.contains(where: { $0.key == fire.key }) { $0.firedAfterEnd += 1 }
                $0.fired[fire.key, default: 0] += 1
                $0.indices[fire.key, default: []].append(fire.index)
                $0.running.insert(fire.key)
            }
            onFire?(fire)
            _ = state.withLock { $0.running.remove(fire.key) }
        }

        func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) {
            state.withLock {
                if $0.running.contains(key) { $0.endWhileRunning += 1 }
                $0.ends.append(End(key: key, reason: reason, fires: fires, seen: $0.fired[key] ?? 0))
            }
            endSignal.signal()
        }

        var ends: [End] { state.withLock { $0.ends } }
        func ends(of key: TimerKey) -> [End] { state.withLock { $0.ends.filter { $0.key == key } } }
        func indices(of key: TimerKey) -> [Int] { state.withLock { $0.indices[key] ?? [] } }
    }

    final class Quiet: TimerCallback {
        func timerFired(_ fire: TimerFire) {}
    }

    /// Runs `body` on another thread; false if it has not returned within `seconds` (a deadlock).
    static func completes(within seconds: Double = 20, _ body: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            body()
            done.signal()
        }
        return done.wait(timeout: .now() + seconds) == .success
    }

    /// Polls `condition` until it holds or `seconds` pass.
    static func eventually(within seconds: Double = 20, _ condition: () -> Bool) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if condition() { return true }
            usleep(1_000)
        }
        return condition()
    }

    /// Waits for `count` signals of `semaphore`, in `seconds` overall.
    static func wait(_ semaphore: DispatchSemaphore, count: Int, within seconds: Double = 20) -> Int {
        let deadline = DispatchTime.now() + seconds
        var got = 0
        while got < count, semaphore.wait(timeout: deadline) == .success { got += 1 }
        return got
    }

    // MARK: - A handle after the end

    @Test func anEndedNamedHandleKeepsAnsweringAfterItsSlotAndNameAreReused() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let alpha = try backend.schedule(.after(.seconds(1)), name: "alpha") { _ in }
        backend.advance(by: .seconds(1))
        // New timers take the freed slot; a new timer takes the name too.
        var others: [TimerHandle] = []
        for index in 0..<64 { others.append(try backend.schedule(.after(.seconds(100)), name: "other\(index)") { _ in }) }
        let newAlpha = try backend.schedule(.after(.seconds(100)), name: "alpha") { _ in }

        #expect(alpha.name == "alpha")
        #expect(alpha.currentState == .finished)
        #expect(alpha.fireCount == 1)
        #expect(alpha.endReason == .completed)
        #expect(!alpha.isActive)
        #expect(alpha != newAlpha)

        alpha.cancel()
        alpha.cancel()
        #expect(alpha.endReason == .completed, "cancelling an ended timer changes nothing")
        #expect(alpha.currentState == .finished)
        #expect(newAlpha.isActive, "the old handle's cancel reached the new timer of its name")
        #expect(others.allSatisfy { $0.isActive }, "the old handle's cancel reached a timer in its old slot")

        let expected = TimerError.timerEnded(name: "alpha", state: .finished)
        #expect(thrown { try alpha.reschedule(.after(.seconds(1))) } == expected)
        #expect(thrown { try alpha.suspend() } == expected)
        #expect(thrown { try alpha.resume() } == expected)
        #expect(thrown { try alpha.addObserver(TimerObserver()) } == expected)
        #expect(newAlpha.currentState == .scheduled, "the old handle's operations changed the new timer")
        #expect(others.allSatisfy { $0.currentState == .scheduled })
        #expect(registry.timer(named: "alpha") === newAlpha)
    }

    @Test func anEndedUnnamedHandleKeepsItsGeneratedNameAndThrowsWithIt() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let fired = Box(0)
        let handle = try backend.schedule(.every(.seconds(1))) { _ in fired.with { $0 += 1 } }
        let name = handle.name
        backend.advance(by: .seconds(3))
        handle.cancel()
        handle.cancel()
        // Reuse its slot many times over.
        for _ in 0..<32 { try backend.schedule(.after(.seconds(1))) { _ in } }
        backend.advance(by: .seconds(1))
        let survivors = (0..<8).map { _ in try? backend.schedule(.after(.seconds(50))) { _ in } }

        #expect(handle.name == name)
        #expect(handle.currentState == .cancelled)
        #expect(handle.endReason == .cancelled)
        #expect(handle.fireCount == 3)
        #expect(fired.value == 3)
        #expect(handle.snapshot.state == .cancelled)
        #expect(handle.snapshot.fires == 3)
        #expect(handle.snapshot.nextDeadline == nil)
        let expected = TimerError.timerEnded(name: name, state: .cancelled)
        #expect(thrown { try handle.reschedule(.every(.seconds(1))) } == expected)
        #expect(thrown { try handle.suspend() } == expected)
        #expect(thrown { try handle.resume() } == expected)
        #expect(thrown { try handle.addObserver(TimerObserver(willFire: { _ in })) } == expected)
        handle.cancel()
        #expect(survivors.allSatisfy { $0?.currentState == .scheduled })
    }

    @Test func aOneShotCancelledInsideItsOwnCallEndsCancelledWithTheCallCounted() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        // By handle.
        let handle = try backend.schedule(.after(.seconds(1)), name: "self-cancel") { tick in tick.timer.cancel() }
        // By key.
        let recorder = Recorder(onFire: { fire in backend.cancel(fire.key) })
        let key = try backend.schedule(.after(.seconds(1)), name: "self-cancel-key", calling: recorder)
        backend.advance(by: .seconds(2))

        #expect(handle.endReason == .cancelled)
        #expect(handle.currentState == .cancelled)
        #expect(handle.fireCount == 1)
        #expect(recorder.ends(of: key) == [End(key: key, reason: .cancelled, fires: 1, seen: 1)])
        #expect(!backend.isActive(key))
    }

    // MARK: - A key after the end

    @Test func anEndedKeyAnswersOnlyThatItEndedAndNeverReachesTheTimerNowInItsSlot() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let recorder = Recorder()
        let old = try backend.schedule(.after(.seconds(1)), calling: recorder)
        backend.advance(by: .seconds(1))
        #expect(recorder.ends(of: old) == [End(key: old, reason: .completed, fires: 1, seen: 1)])

        // New timers reuse the slot (with a new generation).
        var fresh: [TimerKey] = []
        for _ in 0..<16 { fresh.append(try backend.schedule(.after(.seconds(10)), calling: recorder)) }
        #expect(!fresh.contains(old))

        #expect(!backend.isActive(old))
        backend.cancel(old)
        backend.cancel(old)
        #expect(thrown { try backend.reschedule(old, .after(.seconds(1))) } == .keyEnded(old))
        #expect(thrown { try backend.suspend(old) } == .keyEnded(old))
        #expect(thrown { try backend.resume(old) } == .keyEnded(old))
        #expect(fresh.allSatisfy { backend.isActive($0) }, "an ended key reached a new timer")
        #expect(recorder.ends(of: old).count == 1, "timerEnded must come once")

        // The fresh timers were not suspended or moved: all fire at 10 s.
        backend.advance(by: .seconds(10))
        for key in fresh { #expect(recorder.ends(of: key).map(\.reason) == [.completed]) }
    }

    @Test func aKeyOfAnotherBackendReachesNothingAndThrowsInvalidOptionKey() throws {
        // Both with one registry, so that the second backend's timer may sit in the same slot.
        let registry = TimerRegistry()
        let first = ManualBackend(registry: registry)
        let second = ManualBackend(registry: registry, name: "manual-2")
        let other = ManualBackend(registry: TimerRegistry(), name: "manual-3")
        defer {
            first.shutdown()
            second.shutdown()
            other.shutdown()
        }
        let recorder = Recorder()
        let key = try first.schedule(.after(.seconds(5)), calling: recorder)
        let secondKey = try second.schedule(.after(.seconds(5)), calling: recorder)
        let otherKey = try other.schedule(.after(.seconds(5)), calling: recorder)

        for (backend, ownKey) in [(second, secondKey), (other, otherKey)] as [(ManualBackend, TimerKey)] {
            #expect(!backend.isActive(key))
            backend.cancel(key)
            for error in [
                thrown { try backend.reschedule(key, .after(.seconds(1))) },
                thrown { try backend.suspend(key) },
                thrown { try backend.resume(key) },
            ] {
                guard case let .invalidOption(name, value, _)? = error else {
                    Issue.record("expected invalidOption(name: \"key\"), got \(String(describing: error)) on \(backend.name)")
                    continue
                }
                #expect(name == "key")
                #expect(value == key.description)
            }
            #expect(backend.isActive(ownKey))
        }
        #expect(first.isActive(key), "another backend's operations changed the key's own timer")
        for backend in [first, second, other] { backend.advance(by: .seconds(5)) }
        #expect(Set(recorder.ends.map(\.key)) == [key, secondKey, otherKey])
        #expect(recorder.ends.allSatisfy { $0.reason == .completed && $0.fires == 1 })
    }

    // MARK: - Registry lookups of keyed timers

    @Test func aKeyedTimerFoundByNameAndCancelledThroughTheHandleEndsOnceAsCancelled() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let recorder = Recorder()
        let key = try backend.schedule(.every(.seconds(1)), name: "keyed", calling: recorder)
        backend.advance(by: .seconds(2))
        let handle = try #require(registry.timer(named: "keyed"))
        #expect(handle.name == "keyed")
        #expect(handle.fireCount == 2)
        #expect(handle.currentState == .scheduled)
        let ended = Box<[TimerEndReason]>([])
        handle.onEnd { reason in ended.with { $0.append(reason) } }

        handle.cancel()
        handle.cancel()
        backend.cancel(key)
        backend.advance(by: .seconds(3))

        #expect(recorder.ends(of: key) == [End(key: key, reason: .cancelled, fires: 2, seen: 2)])
        #expect(ended.value == [.cancelled])
        #expect(!backend.isActive(key))
        #expect(handle.endReason == .cancelled)
        #expect(handle.currentState == .cancelled)
        #expect(handle.fireCount == 2)
        #expect(handle.name == "keyed")
        #expect(thrown { try backend.reschedule(key, .after(.seconds(1))) } == .keyEnded(key))
        #expect(thrown { try handle.resume() } == .timerEnded(name: "keyed", state: .cancelled))
        #expect(registry.timer(named: "keyed") == nil)
        #expect(registry.count == 0)
    }

    @Test func aKeyedTimerCancelledByNameTellsItsCallbackCancelledByNameOnce() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let recorder = Recorder()
        let key = try backend.schedule(.after(.seconds(5)), name: "by-name", calling: recorder)
        let handle = try #require(registry.timer(named: "by-name"))
        let ended = Box<[TimerEndReason]>([])
        handle.onEnd { reason in ended.with { $0.append(reason) } }

        try registry.cancel(named: "by-name")
        #expect(thrown { try registry.cancel(named: "by-name") } == .noSuchTimer("by-name"))
        handle.cancel()
        backend.cancel(key)

        #expect(recorder.ends(of: key) == [End(key: key, reason: .cancelledByName, fires: 0, seen: 0)])
        #expect(ended.value == [.cancelledByName])
        #expect(handle.endReason == .cancelledByName)
        #expect(!backend.isActive(key))
        // Rescheduling the looked-up handle of a live keyed timer works on the key's timer.
        let again = try backend.schedule(.after(.seconds(5)), name: "moved", calling: recorder)
        try #require(registry.timer(named: "moved")).reschedule(.after(.seconds(1)))
        backend.advance(by: .seconds(1))
        #expect(recorder.ends(of: again) == [End(key: again, reason: .completed, fires: 1, seen: 1)])
    }

    // MARK: - Rescheduling and suspending from inside a call

    @Test func aOneShotRescheduledInsideItsOwnHandlerMakesAnotherCall() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let indices = Box<[Int]>([])
        let handle = try backend.schedule(.after(.seconds(1))) { tick in
            indices.with { $0.append(tick.index) }
            if tick.index == 0 { try? tick.timer.reschedule(.after(.seconds(2))) }
        }
        backend.advance(by: .seconds(1))
        #expect(handle.isActive, "a one-shot rescheduled in its call is live again")
        #expect(handle.endReason == nil)
        backend.advance(by: .seconds(2))
        #expect(indices.value == [0, 1])
        #expect(handle.fireCount == 2)
        #expect(handle.endReason == .completed)
        #expect(handle.currentState == .finished)
    }

    @Test func aOneShotKeyRescheduledInsideItsCallbackMakesAnotherCallAndEndsOnce() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let recorder = Recorder(onFire: { fire in
            if fire.index < 2 { try? backend.reschedule(fire.key, .after(.seconds(1))) }
        })
        let key = try backend.schedule(.after(.seconds(1)), calling: recorder)
        backend.advance(by: .seconds(1))
        #expect(backend.isActive(key))
        #expect(recorder.ends(of: key).isEmpty, "timerEnded came while the rescheduled one-shot was live")
        backend.advance(by: .seconds(5))
        #expect(recorder.indices(of: key) == [0, 1, 2])
        #expect(recorder.ends(of: key) == [End(key: key, reason: .completed, fires: 3, seen: 3)])
    }

    @Test func suspendAndResumeInsideTheHandlerKeepTheRepeatGoing() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let calls = Box(0)
        let handle = try backend.schedule(.every(.seconds(1))) { tick in
            calls.with { $0 += 1 }
            try? tick.timer.suspend()
            try? tick.timer.resume()
        }
        backend.advance(by: .seconds(5))
        #expect(calls.value == 5)
        #expect(handle.currentState == .scheduled)

        // Suspended and rescheduled inside its call: it stays suspended, on its new schedule.
        let later = Box(0)
        let parked = try backend.schedule(.every(.seconds(1))) { tick in
            later.with { $0 += 1 }
            if tick.index == 0 {
                try? tick.timer.suspend()
                try? tick.timer.reschedule(.every(.seconds(10)))
            }
        }
        backend.advance(by: .seconds(30))
        #expect(later.value == 1, "a timer suspended in its call fired while suspended")
        #expect(parked.currentState == .suspended)
        try parked.resume()
        backend.runDue()
        backend.advance(by: .seconds(10))
        #expect(later.value >= 2)
        #expect(parked.currentState == .scheduled)
    }

    @Test func aOneShotRescheduledFromAnotherThreadWhileItsCallRunsMakesAnotherCall() throws {
        let backend = DispatchBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let calls = Box(0)
        let handle = try backend.schedule(.after(.milliseconds(1))) { _ in
            let call = calls.with {
                $0 += 1
                return $0
            }
            if call == 1 {
                entered.signal()
                _ = release.wait(timeout: .now() + 20)
            }
        }
        let recorder = Recorder(onFire: { fire in
            if fire.index == 0 {
                entered.signal()
                _ = release.wait(timeout: .now() + 20)
            }
        })
        let key = try backend.schedule(.after(.milliseconds(1)), calling: recorder)

        for _ in 0..<2 {
            try #require(entered.wait(timeout: .now() + 20) == .success)
            // Whichever is in its call now: reschedule both (the other is still waiting or
            // also live).
            if calls.value == 1 && handle.fireCount <= 1 { try? handle.reschedule(.after(.milliseconds(1))) }
            if recorder.indices(of: key) == [0] { try? backend.reschedule(key, .after(.milliseconds(1))) }
            release.signal()
        }
        #expect(Self.eventually { handle.endReason != nil && !recorder.ends(of: key).isEmpty })
        #expect(calls.value == 2)
        #expect(handle.fireCount == 2)
        #expect(handle.endReason == .completed)
        #expect(recorder.ends(of: key) == [End(key: key, reason: .completed, fires: 2, seen: 2)])
    }

    // MARK: - Re-entrant deinits

    /// Calls back into its backend when it goes.
    final class Reenter: @unchecked Sendable {
        let backend: any TimerBackend
        let gone: DispatchSemaphore
        init(_ backend: any TimerBackend, _ gone: DispatchSemaphore) {
            self.backend = backend
            self.gone = gone
        }
        deinit {
            if let handle = try? backend.schedule(.after(.seconds(3600)), handler: { _ in }) { handle.cancel() }
            if let key = try? backend.schedule(.after(.seconds(3600)), calling: Quiet()) {
                _ = backend.isActive(key)
                backend.cancel(key)
            }
            _ = backend.registry.snapshot()
            _ = backend.registry.count
            gone.signal()
        }
    }

    /// A callback that holds a `Reenter`.
    final class HoldingCallback: TimerCallback {
        let held: Reenter
        init(_ held: Reenter) { self.held = held }
        func timerFired(_ fire: TimerFire) {}
    }

    static func handleHolding(_ backend: any TimerBackend, _ gone: DispatchSemaphore, _ schedule: TimerSchedule, name: String? = nil) throws
        -> TimerHandle
    {
        let held = Reenter(backend, gone)
        return try backend.schedule(schedule, name: name) { _ in _ = held }
    }

    static func keyHolding(_ backend: any TimerBackend, _ gone: DispatchSemaphore, _ schedule: TimerSchedule, name: String? = nil) throws
        -> TimerKey
    {
        try backend.schedule(schedule, name: name, calling: HoldingCallback(Reenter(backend, gone)))
    }

    @Test func deinitsThatCallBackIntoTheBackendDoNotDeadlock() throws {
        let registry = TimerRegistry()
        let manual = ManualBackend(registry: registry)
        let dispatch = DispatchBackend(registry: registry)
        var healthy = true
        defer {
            if healthy {
                manual.shutdown()
                dispatch.shutdown()
            }
        }
        let gone = DispatchSemaphore(value: 0)

        // Handle, released by cancel().
        let cancelled = try Self.handleHolding(manual, gone, .after(.seconds(10)))
        healthy = healthy && Self.completes { cancelled.cancel() }
        // Handle, released after its last call.
        _ = try Self.handleHolding(manual, gone, .after(.seconds(1)))
        healthy = healthy && Self.completes { manual.advance(by: .seconds(1)) }
        // Key, released after timerEnded, by cancel.
        let key = try Self.keyHolding(manual, gone, .after(.seconds(10)))
        healthy = healthy && Self.completes { manual.cancel(key) }
        // Key, released after its last call.
        _ = try Self.keyHolding(manual, gone, .after(.seconds(1)))
        healthy = healthy && Self.completes { manual.advance(by: .seconds(1)) }
        // By name, through the registry: a handle's timer and a key's.
        _ = try Self.handleHolding(manual, gone, .after(.seconds(10)), name: "h")
        _ = try Self.keyHolding(manual, gone, .after(.seconds(10)), name: "k")
        healthy =
            healthy
            && Self.completes {
                try? registry.cancel(named: "h")
                try? registry.cancel(named: "k")
            }
        // Real threads: fired on the queue, and cancelled with cancelAndWait.
        _ = try Self.handleHolding(dispatch, gone, .after(.milliseconds(1)))
        _ = try Self.keyHolding(dispatch, gone, .after(.milliseconds(1)))
        let waited = try Self.handleHolding(dispatch, gone, .every(.milliseconds(1)))
        healthy =
            healthy
            && Self.completes {
                usleep(5_000)
                waited.cancelAndWait()
            }
        // cancelAll with both kinds.
        _ = try Self.handleHolding(dispatch, gone, .after(.seconds(10)))
        _ = try Self.keyHolding(dispatch, gone, .after(.seconds(10)))
        healthy = healthy && Self.completes { registry.cancelAll() }
        #expect(healthy, "a call that released a re-entrant capture did not return within 20 s")
        #expect(Self.wait(gone, count: 11) == 11, "every capture is released once its timer has ended")

        // Shutdown releasing them.
        let shut = DispatchBackend(registry: TimerRegistry())
        _ = try Self.handleHolding(shut, gone, .after(.seconds(10)))
        _ = try Self.keyHolding(shut, gone, .every(.milliseconds(1)))
        let shutDown = Self.completes { shut.shutdown() }
        #expect(shutDown, "shutdown releasing re-entrant captures did not return within 20 s")
        #expect(Self.wait(gone, count: 2) == 2)
        healthy = healthy && shutDown
    }

    // MARK: - Cancels racing fires on real threads

    @Test func keyedTimersCancelledFromTwoThreadsWhileFiringEndExactlyOnceWithHonestCounts() throws {
        let registry = TimerRegistry()
        let backend = DispatchBackend(registry: registry)
        defer { backend.shutdown() }
        let recorder = Recorder()
        var oneShots: [TimerKey] = []
        var repeats: [TimerKey] = []
        for round in 0..<6 {
            oneShots.removeAll()
            repeats.removeAll()
            for _ in 0..<150 {
                oneShots.append(try backend.schedule(.after(.microseconds(Int64.random(in: 0...3_000))), calling: recorder))
            }
            for _ in 0..<50 {
                repeats.append(try backend.schedule(.every(.microseconds(Int64.random(in: 200...800))), calling: recorder))
            }
            let all = oneShots + repeats
            usleep(UInt32.random(in: 0...2_000))
            let group = DispatchGroup()
            for order in [all, all.reversed()] {
                DispatchQueue.global().async(group: group) { for key in order { backend.cancel(key) } }
            }
            #expect(group.wait(timeout: .now() + 20) == .success, "round \(round): cancels did not return")
            #expect(Self.wait(recorder.endSignal, count: all.count) == all.count, "round \(round): not every key heard timerEnded")

            for key in oneShots {
                let ends = recorder.ends(of: key)
                #expect(ends.count == 1, "round \(round): one-shot \(key) ended \(ends.count) times")
                guard let end = ends.first else { continue }
                #expect(end.fires == end.seen, "one-shot \(key): fires \(end.fires) but \(end.seen) calls")
                #expect(end.fires <= 1)
                switch end.reason {
                case .completed: #expect(end.fires == 1)
                case .cancelled: break
                default: Issue.record("one-shot \(key) ended \(end.reason)")
                }
                #expect(!backend.isActive(key))
            }
            for key in repeats {
                let ends = recorder.ends(of: key)
                #expect(ends.count == 1, "round \(round): repeat \(key) ended \(ends.count) times")
                guard let end = ends.first else { continue }
                #expect(end.reason == .cancelled)
                #expect(end.fires == end.seen, "repeat \(key): fires \(end.fires) but \(end.seen) calls")
                #expect(!backend.isActive(key))
            }
        }
        usleep(20_000)
        let state = recorder.state.withLock { ($0.firedAfterEnd, $0.endWhileRunning, $0.ends.count) }
        #expect(state.0 == 0, "calls after timerEnded")
        #expect(state.1 == 0, "timerEnded while a call of the key ran")
        #expect(state.2 == 6 * 200, "a timerEnded came twice")
        #expect(registry.count == 0)
    }

    @Test func handlesCancelledFromTwoThreadsWhileFiringRunOnEndOnceAfterTheLastCall() throws {
        let registry = TimerRegistry()
        let backend = DispatchBackend(registry: registry)
        defer { backend.shutdown() }
        struct Facts {
            var calls: [UInt64: Int] = [:]
            var running: Set<UInt64> = []
            var ends: [UInt64: [(TimerEndReason, Int, Int, Bool, TimerEndReason?)]] = [:]
            var callsAfterEnd = 0
        }
        let facts = Box(Facts())
        let endSignal = DispatchSemaphore(value: 0)
        let handler: @Sendable (Tick) -> Void = { tick in
            let id = tick.timer.id
            facts.with {
                if $0.ends[id] != nil { $0.callsAfterEnd += 1 }
                $0.calls[id, default: 0] += 1
                $0.running.insert(id)
            }
            if Bool.random() { usleep(50) }
            _ = facts.with { $0.running.remove(id) }
        }
        for _ in 0..<5 {
            var handles: [TimerHandle] = []
            for index in 0..<200 {
                let schedule: TimerSchedule =
                    index % 4 == 0
                    ? .every(.microseconds(Int64.random(in: 200...800)))
                    : .after(.microseconds(Int64.random(in: 0...3_000)))
                let handle = try backend.schedule(schedule, handler: handler)
                let id = handle.id
                handle.onEnd { [handle] reason in
                    facts.with {
                        $0.ends[id, default: []].append(
                            (reason, handle.fireCount, $0.calls[id] ?? 0, $0.running.contains(id), handle.endReason))
                    }
                    endSignal.signal()
                }
                handles.append(handle)
            }
            usleep(UInt32.random(in: 0...2_000))
            let group = DispatchGroup()
            for order in [handles, handles.reversed()] {
                DispatchQueue.global().async(group: group) { for handle in order { handle.cancel() } }
            }
            #expect(group.wait(timeout: .now() + 20) == .success)
            #expect(Self.wait(endSignal, count: handles.count) == handles.count, "not every onEnd ran")
            for (index, handle) in handles.enumerated() {
                let ends = facts.with { $0.ends[handle.id] ?? [] }
                #expect(ends.count == 1, "onEnd ran \(ends.count) times")
                guard let (reason, fireCount, calls, running, endReason) = ends.first else { continue }
                #expect(!running, "onEnd ran while a call of the handler ran")
                #expect(fireCount == calls, "fireCount \(fireCount) but \(calls) calls")
                #expect(endReason == reason)
                #expect(handle.fireCount == calls)
                #expect(handle.currentState.hasEnded)
                if index % 4 == 0 {
                    #expect(reason == .cancelled)
                    #expect(handle.currentState == .cancelled)
                } else {
                    #expect(calls <= 1)
                    #expect(reason == .completed ? (calls == 1 && handle.currentState == .finished) : reason == .cancelled)
                }
            }
        }
        usleep(20_000)
        #expect(facts.with { $0.callsAfterEnd } == 0)
        #expect(registry.count == 0)
    }

    @Test func cancelAndWaitReturnsOnlyOnceNoCallRunsAndNoneBeginsAfter() throws {
        let backend = DispatchBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        for round in 0..<30 {
            let running = Box(false)
            let calls = Box(0)
            let handle = try backend.schedule(.every(.microseconds(300))) { _ in
                running.with { $0 = true }
                usleep(400)
                calls.with { $0 += 1 }
                running.with { $0 = false }
            }
            #expect(Self.eventually { calls.value >= 1 }, "round \(round): never fired")
            usleep(UInt32.random(in: 0...500))
            let other = Box(false)
            let group = DispatchGroup()
            DispatchQueue.global().async(group: group) {
                handle.cancelAndWait()
                other.with { $0 = !running.value }
            }
            handle.cancelAndWait()
            #expect(!running.value, "round \(round): a call was running after cancelAndWait returned")
            let after = calls.value
            #expect(group.wait(timeout: .now() + 20) == .success)
            #expect(other.value, "round \(round): a call was running after the other thread's cancelAndWait returned")
            usleep(3_000)
            #expect(calls.value == after, "round \(round): a call began after cancelAndWait returned")
            #expect(handle.endReason == .cancelled)
            #expect(handle.fireCount == calls.value)
        }
    }

    @Test func cancelAndWaitInsideItsOwnHandlerReturns() throws {
        let backend = DispatchBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let returned = DispatchSemaphore(value: 0)
        let handle = try backend.schedule(.every(.milliseconds(1))) { tick in
            tick.timer.cancelAndWait()
            returned.signal()
        }
        #expect(returned.wait(timeout: .now() + 20) == .success, "cancelAndWait from its own handler deadlocked")
        #expect(Self.eventually { handle.endReason != nil })
        #expect(handle.endReason == .cancelled)
        #expect(handle.fireCount == 1)
    }

    // MARK: - onEnd

    @Test func onEndRunsAtOnceOnAnEndedTimerAndOnceOnALiveOne() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let handle = try backend.schedule(.after(.seconds(1))) { _ in }
        let live = Box<[TimerEndReason]>([])
        handle.onEnd { reason in live.with { $0.append(reason) } }
        handle.onEnd { reason in live.with { $0.append(reason) } }
        #expect(live.value.isEmpty)
        backend.advance(by: .seconds(1))
        #expect(live.value == [.completed, .completed])
        handle.cancel()
        backend.advance(by: .seconds(1))
        #expect(live.value == [.completed, .completed])

        let late = Box<[TimerEndReason]>([])
        let thread = Box<pthread_t?>(nil)
        handle.onEnd { reason in
            late.with { $0.append(reason) }
            thread.with { $0 = pthread_self() }
        }
        #expect(late.value == [.completed], "onEnd of an ended timer runs at once")
        #expect(thread.value == pthread_self())

        // Ended by shutdown: onEnd and the key's callback hear backendShutDown once.
        let shut = ManualBackend(registry: TimerRegistry())
        let recorder = Recorder()
        let key = try shut.schedule(.every(.seconds(1)), calling: recorder)
        let repeating = try shut.schedule(.every(.seconds(1)), name: "rep") { _ in }
        let reasons = Box<[TimerEndReason]>([])
        repeating.onEnd { reason in reasons.with { $0.append(reason) } }
        shut.advance(by: .seconds(2))
        shut.shutdown()
        shut.shutdown()
        #expect(reasons.value == [.backendShutDown])
        #expect(repeating.endReason == .backendShutDown)
        #expect(repeating.fireCount == 2)
        #expect(thrown { try repeating.resume() } == .timerEnded(name: "rep", state: .cancelled))
        #expect(recorder.ends(of: key) == [End(key: key, reason: .backendShutDown, fires: 2, seen: 2)])
        #expect(!shut.isActive(key))
        shut.cancel(key)
    }

    // MARK: - Extreme deadlines

    @Test func theLongestDelaysAreAcceptedAndNeverFire() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let fired = Box(0)
        let recorder = Recorder()
        var handles: [TimerHandle] = []
        var keys: [TimerKey] = []
        let schedules: [(String, TimerSchedule)] = [
            ("after Int64.max s", .after(.seconds(Int64.max))),
            ("after Int64.max ns", .after(.nanoseconds(Int64.max))),
            ("every Int64.max s", .every(.seconds(Int64.max))),
            ("at distantFuture", .at(.distantFuture)),
            ("at horizon", .at(.horizon)),
            ("after greatest finite seconds", .after(seconds: .greatestFiniteMagnitude)),
            ("after 1e300 s", .after(seconds: 1e300)),
        ]
        for (label, schedule) in schedules {
            do {
                handles.append(try backend.schedule(schedule) { _ in fired.with { $0 += 1 } })
                keys.append(try backend.schedule(schedule, calling: recorder))
            } catch {
                Issue.record("\(label) threw \(error)")
            }
        }
        backend.advance(by: .seconds(Int64.max))
        backend.advance(to: .distantFuture)
        #expect(fired.value == 0)
        #expect(recorder.ends.isEmpty)
        #expect(handles.allSatisfy { $0.currentState == .scheduled })
        #expect(keys.allSatisfy { backend.isActive($0) })
        // They can still be moved, suspended and cancelled.
        for key in keys {
            try backend.suspend(key)
            try backend.resume(key)
            try backend.reschedule(key, .after(.seconds(Int64.max)))
            backend.cancel(key)
        }
        for handle in handles {
            try handle.reschedule(.after(.seconds(Int64.max)))
            handle.cancel()
            #expect(handle.endReason == .cancelled)
        }
        #expect(recorder.ends.count == keys.count)
        #expect(recorder.ends.allSatisfy { $0.reason == .cancelled && $0.fires == 0 })

        // On a real backend too.
        let real = DispatchBackend(registry: TimerRegistry())
        defer { real.shutdown() }
        let never = try real.schedule(.after(.seconds(Int64.max))) { _ in fired.with { $0 += 1 } }
        let neverKey = try real.schedule(.after(.nanoseconds(Int64.max)), calling: recorder)
        usleep(50_000)
        #expect(fired.value == 0)
        #expect(never.isActive && real.isActive(neverKey))
        never.cancel()
        real.cancel(neverKey)
        #expect(never.endReason == .cancelled)
    }

    @Test func aZeroDelayFiresAtTheNextChanceOnce() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let fired = Box(0)
        let recorder = Recorder()
        let handle = try backend.schedule(.after(.zero)) { _ in fired.with { $0 += 1 } }
        let key = try backend.schedule(.after(.zero), calling: recorder)
        let past = try backend.schedule(.at(MonotonicInstant(nanoseconds: 0))) { _ in fired.with { $0 += 1 } }
        backend.runDue()
        backend.runDue()
        backend.advance(by: .seconds(1))
        #expect(fired.value == 2)
        #expect(handle.endReason == .completed && handle.fireCount == 1)
        #expect(past.endReason == .completed && past.fireCount == 1)
        #expect(recorder.ends(of: key) == [End(key: key, reason: .completed, fires: 1, seen: 1)])

        let real = DispatchBackend(registry: TimerRegistry())
        defer { real.shutdown() }
        let done = DispatchSemaphore(value: 0)
        let realHandle = try real.schedule(.after(.zero)) { _ in done.signal() }
        let realRecorder = Recorder()
        let realKey = try real.schedule(.after(.zero), calling: realRecorder)
        #expect(done.wait(timeout: .now() + 20) == .success)
        #expect(realRecorder.endSignal.wait(timeout: .now() + 20) == .success)
        #expect(Self.eventually { realHandle.endReason == .completed })
        #expect(realRecorder.ends(of: realKey) == [End(key: realKey, reason: .completed, fires: 1, seen: 1)])
    }

    @Test func negativeDurationsThrowTypedErrorsAndAddNothing() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let recorder = Recorder()
        let oneAttosecondBelowZero = Duration(secondsComponent: 0, attosecondsComponent: -1)
        let cases: [(TimerSchedule, TimerError)] = [
            (.after(.seconds(-1)), .negativeDuration(parameter: "delay", value: .seconds(-1))),
            (.after(.nanoseconds(Int64.min)), .negativeDuration(parameter: "delay", value: .nanoseconds(Int64.min))),
            (.after(.seconds(Int64.min)), .negativeDuration(parameter: "delay", value: .seconds(Int64.min))),
            (.after(oneAttosecondBelowZero), .negativeDuration(parameter: "delay", value: oneAttosecondBelowZero)),
            (.after(seconds: -1), .negativeDuration(parameter: "delay", value: .seconds(-1))),
            (.every(.seconds(-1)), .negativeDuration(parameter: "interval", value: .seconds(-1))),
            (.every(.seconds(1), firstAfter: .seconds(-1)), .negativeDuration(parameter: "firstAfter", value: .seconds(-1))),
        ]
        let live = try backend.schedule(.after(.seconds(5))) { _ in }
        let liveKey = try backend.schedule(.after(.seconds(5)), calling: recorder)
        for (schedule, expected) in cases {
            #expect(thrown { try backend.schedule(schedule) { _ in } } == expected)
            #expect(thrown { try backend.schedule(schedule, name: "refused", calling: recorder) } == expected)
            #expect(thrown { try live.reschedule(schedule) } == expected)
            #expect(thrown { try backend.reschedule(liveKey, schedule) } == expected)
        }
        #expect(
            thrown { try backend.schedule(.after(.seconds(1)), tolerance: .seconds(-1)) { _ in } }
                == .negativeDuration(parameter: "tolerance", value: .seconds(-1)))
        #expect(registry.count == 2, "a refused schedule added a timer")
        #expect(registry.timer(named: "refused") == nil)
        #expect(live.isActive && backend.isActive(liveKey))
        backend.advance(by: .seconds(5))
        // Refused schedules called nothing of the callback: only the live key is heard of.
        #expect(recorder.ends.map(\.key) == [liveKey])
        #expect(live.endReason == .completed)
    }

    // MARK: - More races

    @Test func cancelWhileTheCallRunsReturnsAtOnceAndEndsCancelledWithTheCallCounted() throws {
        let backend = DispatchBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let inCall = Box(false)
        let handle = try backend.schedule(.after(.milliseconds(1))) { _ in
            inCall.with { $0 = true }
            entered.signal()
            _ = release.wait(timeout: .now() + 20)
            inCall.with { $0 = false }
        }
        let onEnd = Box<[(TimerEndReason, Bool)]>([])
        handle.onEnd { reason in onEnd.with { $0.append((reason, inCall.value)) } }
        try #require(entered.wait(timeout: .now() + 20) == .success)
        #expect(Self.completes(within: 5) { handle.cancel() }, "cancel() waited for the running call")
        #expect(handle.currentState.hasEnded, "cancel() returned but the timer is live")
        #expect(onEnd.with { $0.count } == 0, "onEnd ran while the handler still ran")
        release.signal()
        #expect(Self.eventually { onEnd.with { $0.count } == 1 })
        let ends = onEnd.value
        #expect(ends.map(\.0) == [.cancelled])
        #expect(ends.map(\.1) == [false])
        #expect(handle.endReason == .cancelled)
        #expect(handle.fireCount == 1)

        // By key.
        let recorder = Recorder(onFire: { _ in
            entered.signal()
            _ = release.wait(timeout: .now() + 20)
        })
        let key = try backend.schedule(.after(.milliseconds(1)), calling: recorder)
        try #require(entered.wait(timeout: .now() + 20) == .success)
        #expect(Self.completes(within: 5) { backend.cancel(key) }, "cancel(key) waited for the running call")
        #expect(!backend.isActive(key))
        #expect(recorder.ends(of: key).isEmpty, "timerEnded came while the call ran")
        release.signal()
        #expect(recorder.endSignal.wait(timeout: .now() + 20) == .success)
        #expect(recorder.ends(of: key) == [End(key: key, reason: .cancelled, fires: 1, seen: 1)])
        #expect(recorder.state.withLock { $0.endWhileRunning } == 0)
    }

    @Test func aRescheduleRacingTheLastCallEitherThrowsEndedOrGetsAnotherCall() throws {
        let backend = DispatchBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        for round in 0..<300 {
            let started = Box(0)
            let name = "race-\(round)"
            let handle = try backend.schedule(.after(.microseconds(Int64.random(in: 0...1_000))), name: name) { _ in
                started.with { $0 += 1 }
                if Bool.random() { usleep(100) }
            }
            let recorder = Recorder(onFire: { _ in if Bool.random() { usleep(100) } })
            let key = try backend.schedule(.after(.microseconds(Int64.random(in: 0...1_000))), calling: recorder)
            usleep(UInt32.random(in: 0...1_200))

            let handleBefore = started.value
            let handleError = thrown { try handle.reschedule(.after(.microseconds(100))) }
            let keyBefore = recorder.indices(of: key).count
            let keyError = thrown { try backend.reschedule(key, .after(.microseconds(100))) }

            #expect(Self.eventually { handle.endReason != nil }, "round \(round): handle never ended")
            #expect(recorder.endSignal.wait(timeout: .now() + 20) == .success, "round \(round): key never ended")
            if let handleError {
                #expect(handleError == .timerEnded(name: name, state: .finished), "round \(round)")
                #expect(handle.fireCount == 1)
            } else {
                #expect(handle.fireCount > handleBefore, "round \(round): rescheduled while live, yet no call after it")
                #expect(handle.fireCount == started.value)
            }
            #expect(handle.endReason == .completed)
            let end = try #require(recorder.ends(of: key).first)
            #expect(end.reason == .completed)
            #expect(end.fires == end.seen)
            if let keyError {
                #expect(keyError == .keyEnded(key), "round \(round)")
                #expect(end.fires == 1)
            } else {
                #expect(end.fires > keyBefore, "round \(round): key rescheduled while live, yet no call after it")
            }
        }
    }

    @Test func onEndAddedWhileTheTimerEndsRunsExactlyOnce() throws {
        let backend = DispatchBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let runs = Box<[UInt64: Int]>([:])
        let signal = DispatchSemaphore(value: 0)
        var handles: [TimerHandle] = []
        for _ in 0..<400 {
            handles.append(try backend.schedule(.after(.microseconds(Int64.random(in: 0...2_000)))) { _ in })
        }
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) { [handles] in
            for handle in handles {
                let id = handle.id
                handle.onEnd { _ in
                    runs.with { $0[id, default: 0] += 1 }
                    signal.signal()
                }
            }
        }
        DispatchQueue.global().async(group: group) { [handles] in
            for handle in handles.reversed() where Bool.random() { handle.cancel() }
        }
        #expect(group.wait(timeout: .now() + 20) == .success)
        #expect(Self.wait(signal, count: handles.count) == handles.count, "an onEnd never ran")
        usleep(20_000)
        #expect(runs.value.count == handles.count)
        #expect(runs.value.values.allSatisfy { $0 == 1 }, "an onEnd ran more than once")
    }

    @Test func cancelAndWaitThroughTheRegistryHandleOfAKeyedTimerWaitsForItsCallback() throws {
        let registry = TimerRegistry()
        let backend = DispatchBackend(registry: registry)
        defer { backend.shutdown() }
        for round in 0..<20 {
            let running = Box(false)
            let recorder = Recorder(onFire: { _ in
                running.with { $0 = true }
                usleep(500)
                running.with { $0 = false }
            })
            let key = try backend.schedule(.every(.microseconds(300)), name: "keyed-\(round)", calling: recorder)
            #expect(Self.eventually { !recorder.indices(of: key).isEmpty })
            let handle = try #require(registry.timer(named: "keyed-\(round)"))
            usleep(UInt32.random(in: 0...400))
            handle.cancelAndWait()
            #expect(!running.value, "round \(round): the key's callback ran after cancelAndWait returned")
            let after = recorder.indices(of: key).count
            usleep(3_000)
            #expect(recorder.indices(of: key).count == after, "round \(round): a call began after cancelAndWait")
            #expect(recorder.endSignal.wait(timeout: .now() + 20) == .success)
            #expect(recorder.ends(of: key).map(\.reason) == [.cancelled])
            #expect(recorder.ends(of: key).map(\.fires) == [after])
            #expect(handle.fireCount == after)
        }
    }

    @Test func shutdownRacingCancelsEndsEveryKeyAndHandleOnce() throws {
        for _ in 0..<10 {
            let registry = TimerRegistry()
            let backend = DispatchBackend(registry: registry)
            let recorder = Recorder()
            let keys = try (0..<200).map { index in
                try backend.schedule(
                    index.isMultiple(of: 2) ? .every(.microseconds(300)) : .after(.microseconds(Int64.random(in: 0...2_000))),
                    calling: recorder)
            }
            let onEnds = Box(0)
            let handles = try (0..<100).map { _ in try backend.schedule(.every(.microseconds(500))) { _ in } }
            for handle in handles { handle.onEnd { _ in onEnds.with { $0 += 1 } } }
            usleep(UInt32.random(in: 0...1_000))
            let group = DispatchGroup()
            DispatchQueue.global().async(group: group) { for key in keys { backend.cancel(key) } }
            DispatchQueue.global().async(group: group) { for handle in handles { handle.cancel() } }
            DispatchQueue.global().async(group: group) { backend.shutdown() }
            #expect(group.wait(timeout: .now() + 20) == .success)
            #expect(Self.wait(recorder.endSignal, count: keys.count) == keys.count)
            usleep(10_000)
            for (index, key) in keys.enumerated() {
                let ends = recorder.ends(of: key)
                #expect(ends.count == 1)
                guard let end = ends.first else { continue }
                #expect(end.fires == end.seen)
                let allowed: [TimerEndReason] =
                    index.isMultiple(of: 2) ? [.cancelled, .backendShutDown] : [.cancelled, .backendShutDown, .completed]
                #expect(allowed.contains(end.reason), "\(end.reason)")
            }
            #expect(Self.eventually { onEnds.value == handles.count })
            #expect(onEnds.value == handles.count)
            #expect(handles.allSatisfy { $0.endReason == .cancelled || $0.endReason == .backendShutDown })
            #expect(registry.count == 0)
        }
    }

    // MARK: - Looked-up handles, ids and names

    @Test func everyHandleLookedUpForAKeyedTimerAnswersAfterTheEndAndReachesNoSuccessor() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let recorder = Recorder()
        let key = try backend.schedule(.every(.seconds(1), count: 3), name: "job", calling: recorder)
        let first = try #require(registry.timer(named: "job"))
        backend.advance(by: .seconds(1))
        let second = try #require(registry.timer(named: "job"))
        let reasons = Box<[String]>([])
        first.onEnd { reason in reasons.with { $0.append("first \(reason)") } }
        second.onEnd { reason in reasons.with { $0.append("second \(reason)") } }
        backend.advance(by: .seconds(5))
        #expect(recorder.ends(of: key) == [End(key: key, reason: .completed, fires: 3, seen: 3)])
        #expect(reasons.value.sorted() == ["first completed", "second completed"])
        // The name is free again: a successor takes it and, likely, the slot.
        let successorRecorder = Recorder()
        let successor = try backend.schedule(.after(.seconds(10)), name: "job", calling: successorRecorder)
        for handle in [first, second] {
            #expect(handle.name == "job")
            #expect(handle.fireCount == 3)
            #expect(handle.endReason == .completed)
            #expect(handle.currentState == .finished)
            #expect(!handle.isActive)
            handle.cancel()
            #expect(thrown { try handle.suspend() } == .timerEnded(name: "job", state: .finished))
            #expect(thrown { try handle.reschedule(.after(.seconds(1))) } == .timerEnded(name: "job", state: .finished))
        }
        #expect(backend.isActive(successor), "an old handle reached the successor")
        let successorHandle = try #require(registry.timer(named: "job"))
        #expect(successorHandle.id != first.id)
        #expect(successorHandle.currentState == .scheduled)
        backend.advance(by: .seconds(10))
        #expect(successorRecorder.ends(of: successor) == [End(key: successor, reason: .completed, fires: 1, seen: 1)])
    }

    @Test func idsAndGeneratedNamesAreNeverReusedWithinARegistry() throws {
        let registry = TimerRegistry()
        let first = ManualBackend(registry: registry)
        let second = ManualBackend(registry: registry, name: "manual-2")
        defer {
            first.shutdown()
            second.shutdown()
        }
        var ids = Set<UInt64>()
        var names = Set<String>()
        var ended: [TimerHandle] = []
        for round in 0..<20 {
            for backend in [first, second] {
                for _ in 0..<10 {
                    let handle = try backend.schedule(.after(.seconds(1))) { _ in }
                    #expect(ids.insert(handle.id).inserted, "round \(round): id \(handle.id) reused")
                    #expect(names.insert(handle.name).inserted, "round \(round): name \(handle.name) reused")
                    ended.append(handle)
                }
                // Keyed timers take slots and ids too.
                try backend.schedule(.after(.seconds(1)), calling: Quiet())
                backend.advance(by: .seconds(1))
            }
        }
        // Old handles still answer with their own names, which no live timer has.
        for handle in ended.prefix(20) {
            #expect(names.contains(handle.name))
            #expect(handle.endReason == .completed)
            #expect(registry.timer(named: handle.name) == nil)
        }
        #expect(Set(ended.map(\.name)).count == ended.count)
    }

    @Test func aHandleOutlivingItsShutDownBackendStillAnswers() throws {
        let registry = TimerRegistry()
        var backend: ManualBackend? = ManualBackend(registry: registry)
        let handle = try #require(backend).schedule(.every(.seconds(1)), name: "orphan") { _ in }
        backend?.advance(by: .seconds(2))
        backend?.shutdown()
        backend = nil
        // The name and slot go to a timer of a new backend on the same registry.
        let next = ManualBackend(registry: registry)
        defer { next.shutdown() }
        let successor = try next.schedule(.after(.seconds(5)), name: "orphan") { _ in }
        #expect(handle.name == "orphan")
        #expect(handle.fireCount == 2)
        #expect(handle.endReason == .backendShutDown)
        #expect(handle.currentState == .cancelled)
        handle.cancel()
        #expect(thrown { try handle.resume() } == .timerEnded(name: "orphan", state: .cancelled))
        #expect(successor.isActive)
        #expect(registry.timer(named: "orphan") === successor)
    }

    // MARK: - Suspend, resume and reschedule by key and handle

    @Test func suspendedKeysAndHandlesStaySuspendedOnANewScheduleAndFireOnceOnResume() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let recorder = Recorder()
        let calls = Box(0)
        let key = try backend.schedule(.after(.seconds(2)), calling: recorder)
        let handle = try backend.schedule(.after(.seconds(2))) { _ in calls.with { $0 += 1 } }
        // Suspending twice and resuming once runs it again; here: twice, then reschedule.
        try backend.suspend(key)
        try backend.suspend(key)
        try handle.suspend()
        try handle.suspend()
        try backend.reschedule(key, .after(.seconds(1)))
        try handle.reschedule(.after(.seconds(1)))
        backend.advance(by: .seconds(5))
        #expect(recorder.indices(of: key).isEmpty, "a suspended key fired after reschedule")
        #expect(calls.value == 0, "a suspended handle fired after reschedule")
        #expect(backend.isActive(key))
        #expect(handle.currentState == .suspended)
        // A one-shot whose deadline passed while suspended fires once after resume.
        try backend.resume(key)
        try handle.resume()
        try backend.resume(key)
        try handle.resume()
        backend.runDue()
        backend.advance(by: .seconds(5))
        #expect(recorder.ends(of: key) == [End(key: key, reason: .completed, fires: 1, seen: 1)])
        #expect(calls.value == 1)
        #expect(handle.endReason == .completed)
    }

    @Test func aKeyedTimersCallbackMayCancelRescheduleAndShutDownFromItsCalls() throws {
        // Reschedule then cancel in the same call: no second call, cancelled with one fire.
        let manual = ManualBackend(registry: TimerRegistry())
        defer { manual.shutdown() }
        let recorder = Recorder(onFire: { fire in
            try? manual.reschedule(fire.key, .after(.seconds(1)))
            manual.cancel(fire.key)
        })
        let key = try manual.schedule(.after(.seconds(1)), calling: recorder)
        manual.advance(by: .seconds(5))
        #expect(recorder.ends(of: key) == [End(key: key, reason: .cancelled, fires: 1, seen: 1)])

        // An observer added through the looked-up handle of a keyed timer runs around its calls.
        let registry = TimerRegistry()
        let observed = ManualBackend(registry: registry)
        defer { observed.shutdown() }
        let hooks = Box(0)
        let watched = Recorder()
        let watchedKey = try observed.schedule(.every(.seconds(1), count: 3), name: "watched", calling: watched)
        try #require(registry.timer(named: "watched")).addObserver(
            TimerObserver(willFire: { _ in hooks.with { $0 += 1 } }, didFire: { _, _ in hooks.with { $0 += 100 } }))
        observed.advance(by: .seconds(3))
        #expect(watched.ends(of: watchedKey).map(\.fires) == [3])
        #expect(hooks.value == 303)

        // timerEnded that shuts its backend down and schedules on it returns (on real threads).
        let real = DispatchBackend(registry: TimerRegistry())
        final class ShutsDown: TimerCallback {
            let backend: DispatchBackend
            let done = DispatchSemaphore(value: 0)
            let outcome = Locked<TimerError?>(nil)
            init(_ backend: DispatchBackend) { self.backend = backend }
            func timerFired(_ fire: TimerFire) {}
            func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) {
                backend.shutdown()
                do { try backend.schedule(.after(.seconds(1)), calling: Quiet()) } catch { outcome.withLock { $0 = error } }
                backend.cancel(key)
                done.signal()
            }
        }
        let shuts = ShutsDown(real)
        try real.schedule(.after(.milliseconds(1)), calling: shuts)
        #expect(shuts.done.wait(timeout: .now() + 20) == .success, "timerEnded calling shutdown deadlocked")
        #expect(shuts.outcome.withLock { $0 } == .backendShutDown(backend: "dispatch"))
        #expect(Self.completes { real.shutdown() })
    }

    @Test func anUnnamedHandleKeepsItsNameAndIdAfterItsBackendsSlotsGoToAnotherBackend() throws {
        let registry = TimerRegistry()
        var handles: [TimerHandle] = []
        var names: [String] = []
        var ids: [UInt64] = []
        do {
            let gone = ManualBackend(registry: registry)
            for _ in 0..<4 {
                let handle = try gone.schedule(.after(.seconds(1))) { _ in }
                handles.append(handle)
                names.append(handle.name)
                ids.append(handle.id)
            }
            gone.advance(by: .seconds(1))
            gone.shutdown()
        }
        // A new backend on the same registry, likely lent the same chunk of slots.
        let next = ManualBackend(registry: registry)
        defer { next.shutdown() }
        var fresh: [TimerHandle] = []
        for _ in 0..<8 { fresh.append(try next.schedule(.after(.seconds(10))) { _ in }) }
        let freshKey = try next.schedule(.after(.seconds(10)), calling: Quiet())
        _ = freshKey
        #expect(handles.map(\.name) == names, "an ended handle's generated name changed")
        #expect(handles.map(\.id) == ids, "an ended handle's id changed")
        #expect(Set(fresh.map(\.name)).isDisjoint(with: names), "a generated name was reused in the registry")
        #expect(Set(fresh.map(\.id)).isDisjoint(with: ids), "an id was reused in the registry")
        for (handle, name) in zip(handles, names) {
            #expect(handle.endReason == .completed)
            #expect(handle.fireCount == 1)
            #expect(thrown { try handle.suspend() } == .timerEnded(name: name, state: .finished))
            handle.cancel()
        }
        #expect(fresh.allSatisfy { $0.isActive })
    }

    @Test func aLastCallIsLiveUntilItReturns() throws {
        // Rescheduled in the last call of a counted repeat: it is live, so the new schedule runs.
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let errors = Box<[String]>([])
        let handle = try backend.schedule(.every(.seconds(1), count: 2)) { tick in
            if tick.index == 1 {
                do { try tick.timer.reschedule(.after(.seconds(1))) } catch { errors.with { $0.append("\(error)") } }
            }
        }
        let recorder = Recorder(onFire: { fire in
            if fire.index == 1 {
                do { try backend.reschedule(fire.key, .after(.seconds(1))) } catch { errors.with { $0.append("\(error)") } }
            }
        })
        let key = try backend.schedule(.every(.seconds(1), count: 2), calling: recorder)
        backend.advance(by: .seconds(10))
        #expect(errors.value == [])
        #expect(handle.fireCount == 3)
        #expect(handle.endReason == .completed)
        #expect(recorder.ends(of: key) == [End(key: key, reason: .completed, fires: 3, seen: 3)])

        // Shut down from inside a one-shot's call: it ends for that reason, the call counted.
        let shut = ManualBackend(registry: TimerRegistry())
        let oneShot = try shut.schedule(.after(.seconds(1))) { _ in shut.shutdown() }
        let bystanderRecorder = Recorder()
        let bystander = try shut.schedule(.after(.seconds(1)), calling: bystanderRecorder)
        #expect(Self.completes { shut.advance(by: .seconds(1)) }, "shutdown from a handler deadlocked")
        #expect(oneShot.endReason == .backendShutDown)
        #expect(oneShot.fireCount == 1)
        #expect(bystanderRecorder.ends(of: bystander) == [End(key: bystander, reason: .backendShutDown, fires: 0, seen: 0)])

        // The same by key.
        let shutByKey = ManualBackend(registry: TimerRegistry())
        let shuttingRecorder = Recorder(onFire: { _ in shutByKey.shutdown() })
        let shutKey = try shutByKey.schedule(.after(.seconds(1)), calling: shuttingRecorder)
        #expect(Self.completes { shutByKey.advance(by: .seconds(1)) }, "shutdown from a callback deadlocked")
        #expect(!shutByKey.isActive(shutKey))
        #expect(shuttingRecorder.ends(of: shutKey) == [End(key: shutKey, reason: .backendShutDown, fires: 1, seen: 1)])

        // cancelAndWait of a keyed timer's looked-up handle from inside its callback returns.
        let registry = TimerRegistry()
        let real = DispatchBackend(registry: registry)
        defer { real.shutdown() }
        let returned = DispatchSemaphore(value: 0)
        let inside = Recorder(onFire: { _ in
            registry.timer(named: "inside")?.cancelAndWait()
            returned.signal()
        })
        let insideKey = try real.schedule(.every(.milliseconds(1)), name: "inside", calling: inside)
        #expect(returned.wait(timeout: .now() + 20) == .success, "cancelAndWait inside the key's callback deadlocked")
        #expect(inside.endSignal.wait(timeout: .now() + 20) == .success)
        #expect(inside.ends(of: insideKey) == [End(key: insideKey, reason: .cancelled, fires: 1, seen: 1)])
    }
}
