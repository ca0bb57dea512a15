import Dispatch
import Foundation
import Testing
import TimerKitEpoll
import TimerKitTestSupport
import TimerKitURing

@testable @_spi(BackendImplementation) import TimerKit

// MARK: - Helpers

/// A driver that arms nothing: the test is the loop (it calls `fireDueTimers()` itself).
private final class ArmsNothing: TimerDriver {
    func wake(at deadline: MonotonicInstant) throws(TimerError) {}
}

/// A backend that forgets to shut down: no `deinit`.
private final class Forgetful: TimerBackend {
    let scheduler: TimerScheduler
    init(registry: TimerRegistry) {
        scheduler = TimerScheduler(backendName: "forgetful", registry: registry)
        scheduler.attach(owning: ArmsNothing())
    }
    func shutdown() { scheduler.shutdown() }
}

/// A key's callback with hooks for both calls.
private final class Hooks: TimerCallback {
    let fired: @Sendable (TimerFire) -> Void
    let ended: @Sendable (TimerKey, TimerEndReason, Int) -> Void
    init(
        fired: @escaping @Sendable (TimerFire) -> Void = { _ in },
        ended: @escaping @Sendable (TimerKey, TimerEndReason, Int) -> Void = { _, _, _ in }
    ) {
        self.fired = fired
        self.ended = ended
    }
    func timerFired(_ fire: TimerFire) { fired(fire) }
    func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) { ended(key, reason, fires) }
}

/// A key's callback that does nothing.
private final class Quiet: TimerCallback {
    func timerFired(_ fire: TimerFire) {}
}

/// Runs `body` when released.
private final class OnDeinit: @unchecked Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    deinit { body() }
}

/// A key's callback that runs `body` when released (the backend lets go of it after `timerEnded`).
private final class CallbackWithDeinit: TimerCallback {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    func timerFired(_ fire: TimerFire) {}
    deinit { body() }
}

/// What a throwing call threw; nil when it returned. An error that is not a `TimerError` comes
/// back as a `nativeFailure` naming it, which no expected error equals.
func thrown(_ body: () throws -> Void) -> TimerError? {
    do {
        try body()
        return nil
    } catch let error as TimerError {
        return error
    } catch {
        return .nativeFailure(backend: "test", call: "not a TimerError: \(error)")
    }
}

/// Whether `error` is `invalidOption` naming "key" and `key`.
private func isForeignKeyError(_ error: TimerError?, _ key: TimerKey) -> Bool {
    guard case .invalidOption(let name, let value, _)? = error else { return false }
    return name == "key" && value == "\(key)"
}

// MARK: - Tests

@Suite("Seams, adversarially", .onAThreadOfItsOwn)
struct SeamsAdversarialTests {

    // MARK: Promise 1: shutdown from the code it runs

    /// Many end callbacks (handles' `onEnd` and keys' `timerEnded`) each call `shutdown()`, try to
    /// schedule, cancel other timers, look timers up, list the registry and call `cancelAll()`.
    /// Every one must hear `.backendShutDown` once, the schedules are refused with
    /// `backendShutDown`, and no timer ends for any other reason.
    @Test func nestedShutdownsFromManyCallbacksThatAlsoCancelLookUpAndSchedule() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        let reasons = Locked<[String: [TimerEndReason]]>([:])
        let scheduleErrors = Locked<[TimerError?]>([])
        let lookups = Locked<[String]>([])
        let snapshots = Locked<[Int]>([])
        var handles: [TimerHandle] = []
        for index in 0..<40 {
            handles.append(try backend.schedule(.after(.seconds(60 + index)), name: "h\(index)") { _ in })
        }
        let allHandles = handles
        let names = (0..<40).map { "h\($0)" } + (0..<40).map { "k\($0)" }
        var keys: [TimerKey] = []
        @Sendable func endCallback(_ label: String, _ reason: TimerEndReason) {
            reasons.withLock { $0[label, default: []].append(reason) }
            backend.shutdown()
            let error = thrown { try backend.schedule(.after(.seconds(1))) { _ in } }
            scheduleErrors.withLock { $0.append(error) }
            for other in allHandles { other.cancel() }
            for name in names where registry.timer(named: name) != nil { lookups.withLock { $0.append("\(label) found \(name)") } }
            snapshots.withLock { $0.append(registry.snapshot().count) }
            registry.cancelAll()
            backend.shutdown()
        }
        for (index, handle) in handles.enumerated() {
            handle.onEnd { reason in endCallback("h\(index)", reason) }
        }
        for index in 0..<40 {
            keys.append(
                try backend.schedule(
                    .after(.seconds(30 + index)), name: "k\(index)",
                    calling: Hooks(ended: { _, reason, _ in endCallback("k\(index)", reason) })))
        }
        #expect(returns { backend.shutdown() }, "the outer shutdown did not return")
        #expect(returns { backend.shutdown() }, "a later shutdown did not return")
        let told = reasons.current
        #expect(told.count == 80)
        for (label, list) in told {
            #expect(list == [.backendShutDown], "\(label) heard \(list)")
        }
        #expect(scheduleErrors.current.count == 80)
        #expect(scheduleErrors.current.allSatisfy { $0 == .backendShutDown(backend: "manual") }, "\(scheduleErrors.current.prefix(3))")
        #expect(lookups.current.isEmpty, "\(lookups.current.prefix(5))")
        #expect(snapshots.current.allSatisfy { $0 == 0 }, "\(snapshots.current.prefix(5))")
        for handle in handles { #expect(handle.endReason == .backendShutDown, "\(handle.name): \(String(describing: handle.endReason))") }
        #expect(keys.allSatisfy { !backend.isActive($0) })
        #expect(registry.count == 0)
        #expect(thrown { try backend.schedule(.after(.seconds(1))) { _ in } } == .backendShutDown(backend: "manual"))
    }

    /// The same through the loop-failure path: every callback hears `.loopFailed(cause)`, calls
    /// `shutdown()` and `fail(with:)` again, and schedules are refused with `loopFailed`.
    @Test func nestedShutdownsAndFailuresFromTheCallbacksOfALoopFailure() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        let cause = TimerError.systemCall(call: "epoll_wait", errno: 9)
        let other = TimerError.nativeFailure(backend: "manual", call: "again")
        let reasons = Locked<[TimerEndReason]>([])
        let scheduleErrors = Locked<[TimerError?]>([])
        let found = Locked(0)
        var handles: [TimerHandle] = []
        let endCallback: @Sendable (TimerEndReason) -> Void = { reason in
            reasons.withLock { $0.append(reason) }
            backend.shutdown()
            backend.scheduler.fail(with: other)
            scheduleErrors.withLock { $0.append(thrown { try backend.schedule(.after(.seconds(1))) { _ in } }) }
            if registry.timer(named: "h3") != nil || registry.timer(named: "k3") != nil { found.withLock { $0 += 1 } }
            registry.cancelAll()
        }
        for index in 0..<10 {
            let handle = try backend.schedule(.every(.seconds(5), on: index.isMultiple(of: 2) ? .wall : .continuous), name: "h\(index)") {
                _ in
            }
            handle.onEnd(endCallback)
            handles.append(handle)
        }
        try handles[5].suspend()
        var keys: [TimerKey] = []
        for index in 0..<10 {
            keys.append(
                try backend.schedule(
                    .after(.seconds(60)), name: "k\(index)", calling: Hooks(ended: { _, reason, _ in endCallback(reason) })))
        }
        try backend.suspend(keys[7])
        #expect(returns { backend.scheduler.fail(with: cause) }, "fail(with:) did not return")
        #expect(returns { backend.shutdown() })
        #expect(reasons.current.count == 20)
        #expect(reasons.current.allSatisfy { $0 == .loopFailed(cause) }, "\(reasons.current)")
        #expect(
            scheduleErrors.current.allSatisfy { $0 == .loopFailed(backend: "manual", cause: cause) }, "\(scheduleErrors.current.prefix(3))")
        #expect(found.current == 0)
        #expect(backend.scheduler.failure == cause)
        for handle in handles { #expect(handle.endReason == .loopFailed(cause)) }
        #expect(thrown { try backend.schedule(.after(.seconds(1))) { _ in } } == .loopFailed(backend: "manual", cause: cause))
    }

    /// `shutdown()` from the `deinit` of objects that handlers and callbacks capture (or that are
    /// callbacks), released by the shutdown: it returns, and the objects do go.
    @Test(arguments: [false, true])
    func shutdownFromTheDeinitOfCapturedObjects(failing: Bool) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let cause = TimerError.systemCall(call: "io_uring_enter", errno: 5)
        let deinits = Counter()
        let reasons = Locked<[TimerEndReason]>([])
        for index in 0..<20 {
            let captured = OnDeinit {
                backend.shutdown()
                deinits.increment()
            }
            let handle = try backend.schedule(.after(.seconds(10 + index))) { _ in _ = captured }
            handle.onEnd { reason in reasons.withLock { $0.append(reason) } }
            try backend.schedule(
                .after(.seconds(10 + index), on: .wall),
                calling: CallbackWithDeinit {
                    backend.shutdown()
                    deinits.increment()
                })
            let capturedByRepeat = OnDeinit {
                backend.shutdown()
                deinits.increment()
            }
            let repeating = try backend.schedule(
                .every(.seconds(3), on: .continuous), name: "r\(index)", calling: Hooks(fired: { _ in _ = capturedByRepeat }))
            if index.isMultiple(of: 4) { try backend.suspend(repeating) }
        }
        #expect(deinits.current == 0)
        let ran = returns {
            if failing { backend.scheduler.fail(with: cause) } else { backend.shutdown() }
        }
        #expect(ran, "the shutdown did not return")
        #expect(waitFor(.seconds(10)) { deinits.current == 60 }, "deinits: \(deinits.current)")
        let expected: TimerEndReason = failing ? .loopFailed(cause) : .backendShutDown
        #expect(reasons.current.count == 20)
        #expect(reasons.current.allSatisfy { $0 == expected }, "\(reasons.current)")
    }

    /// The first shutdown blocks in an end callback; several other threads' shutdowns each return
    /// once every timer has ended, and every later call sees the backend shut down.
    @Test func manyShutdownsFromOtherThreadsWhileAnEndCallbackBlocks() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        let inCallback = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let handles = try (0..<20_000).map { index in
            try backend.schedule(.after(.seconds(60) + .milliseconds(index), on: index.isMultiple(of: 3) ? .wall : .monotonic)) { _ in }
        }
        for handle in handles[1000..<9000] { handle.cancel() }
        for handle in handles[12_000..<12_100] { try handle.suspend() }
        let blocker = try backend.schedule(.after(.seconds(5))) { _ in }
        blocker.onEnd { _ in
            inCallback.signal()
            _ = release.wait(timeout: .now() + .seconds(30))
            backend.shutdown()
        }
        let first = DispatchSemaphore(value: 0)
        onBackgroundThread {
            backend.shutdown()
            first.signal()
        }
        #expect(inCallback.wait(timeout: .now() + .seconds(20)) == .success)
        let others = Counter()
        let states = Locked<[Bool]>([])
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<4 {
            onBackgroundThread {
                backend.shutdown()
                let allEnded = handles.allSatisfy { $0.endReason != nil } && registry.count == 0
                states.withLock { $0.append(allEnded) }
                others.increment()
                done.signal()
            }
        }
        for _ in 0..<4 { #expect(done.wait(timeout: .now() + .seconds(20)) == .success) }
        #expect(states.current == [true, true, true, true])
        #expect(thrown { try backend.schedule(.after(.seconds(1))) { _ in } } == .backendShutDown(backend: "manual"))
        release.signal()
        #expect(first.wait(timeout: .now() + .seconds(20)) == .success)
        #expect(handles[1000..<9000].allSatisfy { $0.endReason == .cancelled })
        #expect(handles[0..<1000].allSatisfy { $0.endReason == .backendShutDown })
        #expect(handles[9000...].allSatisfy { $0.endReason == .backendShutDown })
    }

    /// 20,000 timers, many cancelled in the middle and some suspended, shut down while other
    /// threads suspend, resume, cancel and reschedule keys and handles. In a process of its own:
    /// a debug build's queue check traps.
    @Test func aShutdownOfTwentyThousandTimersRacingOtherThreads() async {
        await #expect(processExitsWith: .success) {
            let registry = TimerRegistry()
            let backend = ManualBackend(registry: registry)
            var keys: [TimerKey] = []
            var handles: [TimerHandle] = []
            let clocks: [DeadlineClock] = [.monotonic, .wall, .continuous]
            for index in 0..<20_000 {
                let schedule = TimerSchedule.after(.seconds(60) + .microseconds(index * 7 % 20_000), on: clocks[index % 3])
                if index.isMultiple(of: 2) {
                    keys.append(try backend.schedule(schedule, calling: Quiet()))
                } else {
                    handles.append(try backend.schedule(schedule) { _ in })
                }
            }
            for key in keys[2_000..<7_000] { backend.cancel(key) }
            for handle in handles[2_000..<7_000] { handle.cancel() }
            for key in keys[8_000..<8_100] { try backend.suspend(key) }
            for handle in handles[8_000..<8_100] { try handle.suspend() }
            let allKeys = keys
            let allHandles = handles
            let stop = Locked(false)
            let started = DispatchSemaphore(value: 0)
            let stopped = DispatchSemaphore(value: 0)
            let oddErrors = Locked<[String]>([])
            let shutDownDone = Locked(false)
            for thread in 0..<3 {
                onBackgroundThread {
                    started.signal()
                    var index = thread * 977
                    while !stop.current {
                        index = (index &+ 7919) % 9_800
                        let key = allKeys[index]
                        let handle = allHandles[index]
                        let afterShutdown = shutDownDone.current
                        for error in [
                            thrown { try backend.suspend(key) }, thrown { try backend.resume(key) },
                            thrown { try backend.reschedule(key, .after(.seconds(90))) },
                        ] {
                            guard let error, error != .keyEnded(key) else { continue }
                            // While the shutdown runs, a live timer's key may hear that the backend is shut down.
                            // Keys 10,000..<35,000 were cancelled before any of this began.
                            if afterShutdown || error != .backendShutDown(backend: "manual") || (2_000..<7_000).contains(index) {
                                let when = afterShutdown ? "after shutdown() returned" : "during the shutdown"
                                oddErrors.withLock { $0.append("\(when), key #\(index): \(error)") }
                            }
                        }
                        try? handle.suspend()
                        try? handle.resume()
                        try? handle.reschedule(.after(.seconds(90), on: .wall))
                        if index.isMultiple(of: 5) {
                            backend.cancel(key)
                            handle.cancel()
                        }
                        if index.isMultiple(of: 11) { _ = try? backend.schedule(.after(.seconds(5)), calling: Quiet()) }
                    }
                    stopped.signal()
                }
            }
            for _ in 0..<3 { started.wait() }
            usleep(20_000)
            backend.shutdown()
            shutDownDone.withLock { $0 = true }
            usleep(20_000)
            stop.withLock { $0 = true }
            for _ in 0..<3 { stopped.wait() }
            backend.scheduler.checkQueueInvariants()
            for key in allKeys {
                for error in [
                    thrown { try backend.suspend(key) }, thrown { try backend.resume(key) },
                    thrown { try backend.reschedule(key, .after(.seconds(90))) },
                ] where error != .keyEnded(key) {
                    oddErrors.withLock { $0.append("once quiet: \(String(describing: error))") }
                }
            }
            let live = allKeys.filter { backend.isActive($0) }.count + allHandles.filter { $0.isActive }.count
            let badReasons = allHandles.filter { $0.endReason != .cancelled && $0.endReason != .backendShutDown }.count
            guard live == 0, badReasons == 0, registry.count == 0, oddErrors.current.isEmpty else {
                let errors = oddErrors.current
                let kinds = Set(errors.map { $0.replacingOccurrences(of: #"#\d+"#, with: "#N", options: .regularExpression) })
                let text = "live \(live), bad reasons \(badReasons), registry \(registry.count), \(errors.count) errors: \(kinds)"
                try? text.write(toFile: "/tmp/adv-exit-diagnosis.txt", atomically: true, encoding: .utf8)
                exit(1)
            }
        }
    }

    /// On a real loop: a handler (on the loop's thread) calls `shutdown()`; the end callbacks it
    /// runs call `shutdown()` and `fail(with:)` again, and schedule. All of it returns.
    @Test(arguments: ["epoll", "dispatch"])
    func aShutdownFromAHandlerOnARealLoopWhoseEndCallbacksShutDownAgain(kind: String) throws {
        let backend: any TimerBackend =
            kind == "epoll" ? try EpollBackend(registry: TimerRegistry()) : DispatchBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        try withWatchdog {
            let reasons = Locked<[TimerEndReason]>([])
            let errors = Locked<[TimerError?]>([])
            for index in 0..<50 {
                let handle = try backend.schedule(.after(.seconds(60), on: index.isMultiple(of: 2) ? .wall : .monotonic)) { _ in }
                handle.onEnd { reason in
                    backend.shutdown()
                    backend.scheduler.fail(with: .systemCall(call: "late", errno: 1))
                    errors.withLock { $0.append(thrown { try backend.schedule(.after(.seconds(1))) { _ in } }) }
                    reasons.withLock { $0.append(reason) }
                }
                try backend.schedule(
                    .after(.seconds(60)),
                    calling: Hooks(ended: { _, reason, _ in
                        backend.shutdown()
                        reasons.withLock { $0.append(reason) }
                    }))
            }
            let returned = DispatchSemaphore(value: 0)
            let shooter = try backend.schedule(.after(.milliseconds(5))) { _ in
                backend.shutdown()
                returned.signal()
            }
            #expect(returned.wait(timeout: .now() + .seconds(20)) == .success, "shutdown() from a handler did not return")
            #expect(waitFor(.seconds(10)) { reasons.current.count == 100 }, "\(reasons.current.count) of 100 end callbacks ran")
            #expect(reasons.current.allSatisfy { $0 == .backendShutDown }, "\(Set(reasons.current.map(\.description)))")
            #expect(errors.current.allSatisfy { $0 == .backendShutDown(backend: backend.name) }, "\(errors.current.prefix(2))")
            #expect(shooter.endReason == .backendShutDown, "\(String(describing: shooter.endReason))")
            #expect(backend.scheduler.failure == nil)
        }
    }

    // MARK: Promise 2: a backend released without shutdown

    /// Each way a timer can end frees the forgetful backend's scheduler and registry once it was
    /// the last live one, on every clock, suspended or not.
    @Test(arguments: ["key", "handle", "name", "generatedName", "cancelAll", "finished", "suspendedThenCancelAll"])
    func aForgetfulBackendGoesOnceItsLastTimerEnds(how: String) throws {
        weak var scheduler: TimerScheduler?
        weak var weakRegistry: TimerRegistry?
        var registry: TimerRegistry? = TimerRegistry()
        var backend: Forgetful? = Forgetful(registry: registry!)
        var handle: TimerHandle?
        var generatedName = ""
        scheduler = backend!.scheduler
        weakRegistry = registry
        // Timers that ended before: one of each clock, by handle and by key.
        for clock in DeadlineClock.allCases {
            try backend!.schedule(.after(.seconds(60), on: clock)) { _ in }.cancel()
            backend!.cancel(try backend!.schedule(.after(.seconds(60), on: clock), calling: Quiet()))
        }
        switch how {
        case "key":
            let key = try backend!.schedule(.after(.seconds(60), on: .wall), calling: Quiet())
            try backend!.suspend(key)
            backend!.cancel(key)
        case "handle":
            let made = try backend!.schedule(.after(.seconds(60), on: .continuous)) { _ in }
            try made.suspend()
            handle = made
        case "name":
            try backend!.schedule(.after(.seconds(60), on: .wall), name: "named", calling: Quiet())
        case "generatedName":
            generatedName = try backend!.schedule(.every(.seconds(60), on: .continuous)) { _ in }.name
        case "cancelAll":
            try backend!.schedule(.every(.seconds(1), on: .wall), name: "w") { _ in }
            try backend!.schedule(.after(.seconds(60), on: .continuous), calling: Quiet())
        case "finished":
            try backend!.schedule(.after(.zero, on: .wall)) { _ in }
            try backend!.schedule(.after(.zero, on: .continuous), calling: Quiet())
            try backend!.schedule(.after(.zero)) { _ in }
        default:
            let made = try backend!.schedule(.after(.seconds(60), on: .wall), calling: Quiet())
            try backend!.suspend(made)
        }
        backend = nil
        if how == "key" {
            #expect(scheduler == nil, "a forgetful backend with no live timer kept its scheduler")
        } else if how == "finished" {
            #expect(scheduler != nil)
            // The test is the loop: fire what is due (after a moment: the wall timer due "now").
            usleep(2000)
            scheduler?.fireDueTimers()
            #expect(registry!.count == 0)
            #expect(scheduler == nil, "finished timers kept the scheduler")
        } else {
            #expect(scheduler != nil, "a live timer did not keep its scheduler")
            #expect(registry!.count >= 1)
            switch how {
            case "handle":
                handle?.cancel()
                handle = nil
            case "name":
                try registry!.cancel(named: "named")
            case "generatedName":
                try registry!.cancel(named: generatedName)
            default:
                registry!.cancelAll()
            }
            #expect(scheduler == nil, "the scheduler outlived its last timer (\(how))")
        }
        registry = nil
        #expect(weakRegistry == nil, "the registry outlived its forgetful backend (\(how))")
    }

    /// A backend of TimerKit's own dropped without `shutdown()`, with timers live on each clock:
    /// its scheduler goes.
    @Test(arguments: ["manual", "dispatch"])
    func aBackendOfTimerKitsDroppedWithoutShutdownLetsItsSchedulerGo(kind: String) throws {
        weak var scheduler: TimerScheduler?
        weak var weakRegistry: TimerRegistry?
        let ended = Locked<[TimerEndReason]>([])
        do {
            let registry = TimerRegistry()
            weakRegistry = registry
            let backend: any TimerBackend = kind == "manual" ? ManualBackend(registry: registry) : DispatchBackend(registry: registry)
            scheduler = backend.scheduler
            for clock in DeadlineClock.allCases {
                try backend.schedule(.after(.seconds(60), on: clock)) { _ in }.onEnd { reason in ended.withLock { $0.append(reason) } }
                try backend.schedule(
                    .every(.seconds(60), on: clock), name: "n-\(clock)",
                    calling: Hooks(ended: { _, reason, _ in ended.withLock { $0.append(reason) } }))
                let suspended = try backend.schedule(.after(.seconds(60), on: clock)) { _ in }
                try suspended.suspend()
            }
        }
        #expect(waitFor(.seconds(10)) { scheduler == nil }, "the \(kind) backend's scheduler is still alive")
        #expect(waitFor(.seconds(10)) { weakRegistry == nil }, "its registry is still alive")
        #expect(ended.current.count == 6)
        #expect(ended.current.allSatisfy { $0 == .backendShutDown }, "\(ended.current)")
    }

    /// Lookups by generated name race the end of a forgetful backend's last timers (and another
    /// backend of the registry taking slots): each answers nil or the very timer named.
    @Test func lookupsByGeneratedNameRacingTheLastTimersEnd() throws {
        for round in 0..<30 {
            let registry = TimerRegistry()
            weak var scheduler: TimerScheduler?
            var endedNames: [String] = []
            let other = ManualBackend(registry: registry)
            do {
                let backend = Forgetful(registry: registry)
                scheduler = backend.scheduler
                for index in 0..<8 {
                    let handle = try backend.schedule(.after(.seconds(60), on: index.isMultiple(of: 2) ? .wall : .monotonic)) { _ in }
                    endedNames.append(handle.name)
                    handle.cancel()
                }
                for index in 0..<8 {
                    try backend.schedule(.after(.seconds(60), on: index.isMultiple(of: 2) ? .continuous : .monotonic), calling: Quiet())
                }
            }
            let liveNames = registry.snapshot().map(\.name)
            #expect(liveNames.count == 8)
            let liveIDs = Dictionary(uniqueKeysWithValues: liveNames.map { ($0, registry.timer(named: $0)!.id) })
            let onlyEnded = endedNames.filter { !liveNames.contains($0) }
            let allNames = endedNames + liveNames + (0..<64).map { "timer#\($0)" } + (4090..<4110).map { "timer#\($0)" }
            let wrong = Locked<[String]>([])
            let go = DispatchSemaphore(value: 0)
            let lookups = DispatchSemaphore(value: 0)
            let otherHandles = Locked<[TimerHandle]>([])
            for thread in 0..<2 {
                onBackgroundThread {
                    go.wait()
                    for _ in 0..<200 {
                        for name in allNames {
                            guard let found = registry.timer(named: name) else { continue }
                            if found.name != name { wrong.withLock { $0.append("\(name) -> \(found.name)") } }
                            if let id = liveIDs[name], found.backendName == "forgetful", found.id != id {
                                wrong.withLock { $0.append("\(name): id \(found.id), not \(id)") }
                            }
                            if onlyEnded.contains(name), found.backendName == "forgetful" {
                                wrong.withLock { $0.append("ended \(name) found live") }
                            }
                        }
                        if thread == 1, let handle = try? other.schedule(.after(.seconds(60)), handler: { _ in }) {
                            otherHandles.withLock { $0.append(handle) }
                        }
                    }
                    lookups.signal()
                }
            }
            go.signal()
            go.signal()
            for name in liveNames.shuffled().prefix(7) { try? registry.cancel(named: name) }
            usleep(1000)
            // The last one ends by name or by cancelAll while the lookups run.
            if round.isMultiple(of: 2) {
                for name in liveNames { try? registry.cancel(named: name) }
            } else {
                for handle in otherHandles.current { handle.cancel() }
                registry.cancelAll()
            }
            for _ in 0..<2 { #expect(lookups.wait(timeout: .now() + .seconds(20)) == .success) }
            #expect(wrong.current.isEmpty, "round \(round): \(wrong.current.prefix(5))")
            #expect(waitFor(.seconds(5)) { scheduler == nil }, "round \(round): the forgetful scheduler is alive")
            for name in allNames {
                if let found = registry.timer(named: name) {
                    #expect(found.backendName == "manual" && found.name == name, "round \(round): \(name) -> \(found)")
                }
            }
            other.shutdown()
        }
    }

    // MARK: Promise 3: keys of ended timers

    private static let endings = ["key", "name", "cancelAll", "completed", "shutdown", "loopFailed", "fromOwnCall"]

    /// Through the key of an ended timer, whether its slot is reused or not, whatever its name
    /// and end: `keyEnded(key)` exactly, `cancel` nothing, `isActive` false, and the timer in its
    /// slot untouched.
    @Test(arguments: endings, [false, true])
    func theKeyOfAnEndedTimerThrowsKeyEndedAndTouchesNothing(ending: String, named: Bool) throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        let endedHeard = Locked<[TimerEndReason]>([])
        let inEndCallback = Locked<[TimerError?]>([])
        let schedule: TimerSchedule = ending == "completed" || ending == "fromOwnCall" ? .after(.seconds(1)) : .after(.seconds(100))
        let callback = Hooks(
            fired: { fire in
                if ending == "fromOwnCall" { backend.cancel(fire.key) }
            },
            ended: { key, reason, _ in
                endedHeard.withLock { $0.append(reason) }
                inEndCallback.withLock {
                    $0 += [
                        thrown { try backend.reschedule(key, .after(.seconds(5))) }, thrown { try backend.suspend(key) },
                        thrown { try backend.resume(key) },
                    ]
                }
            })
        let key = try backend.schedule(schedule, name: named ? "mine" : nil, calling: callback)
        switch ending {
        case "key": backend.cancel(key)
        case "name":
            if named { try registry.cancel(named: "mine") } else { try registry.cancel(named: registry.names[0]) }
        case "cancelAll": registry.cancelAll()
        case "completed", "fromOwnCall": backend.advance(by: .seconds(2))
        case "shutdown": backend.shutdown()
        default: backend.scheduler.fail(with: .systemCall(call: "x", errno: 1))
        }
        #expect(endedHeard.current.count == 1)
        #expect(inEndCallback.current.allSatisfy { $0 == .keyEnded(key) }, "from timerEnded: \(inEndCallback.current)")
        func check(_ when: String) {
            #expect(!backend.isActive(key), "\(when)")
            #expect(thrown { try backend.reschedule(key, .after(.seconds(5))) } == .keyEnded(key), "\(when)")
            #expect(thrown { try backend.reschedule(key, .every(.seconds(5), on: .wall)) } == .keyEnded(key), "\(when)")
            #expect(thrown { try backend.suspend(key) } == .keyEnded(key), "\(when)")
            #expect(thrown { try backend.resume(key) } == .keyEnded(key), "\(when)")
            backend.cancel(key)
        }
        check("before reuse")
        guard ending != "shutdown", ending != "loopFailed" else { return }
        // Reuse the slot, by keys and by handles, named and not.
        var reusedKeys: [TimerKey] = []
        var reusedHandles: [TimerHandle] = []
        for index in 0..<4 {
            reusedKeys.append(try backend.schedule(.after(.seconds(50)), name: named ? "mine" : nil, calling: Quiet()))
            if index == 0 { check("slot reused by a key") }
            backend.cancel(reusedKeys.removeLast())
            reusedHandles.append(try backend.schedule(.after(.seconds(50)), name: index == 1 && named ? "mine-h" : nil) { _ in })
        }
        reusedKeys.append(try backend.schedule(.after(.seconds(50)), name: named ? "mine" : nil, calling: Quiet()))
        let before = registry.snapshot().map { "\($0.name) \($0.state) \(String(describing: $0.nextDeadline))" }
        check("after reuse")
        #expect(reusedKeys.allSatisfy { backend.isActive($0) })
        #expect(reusedHandles.allSatisfy { $0.currentState == .scheduled })
        let after = registry.snapshot().map { "\($0.name) \($0.state) \(String(describing: $0.nextDeadline))" }
        #expect(before == after)
        backend.shutdown()
    }

    /// Races: one thread ends keys and schedules new timers (reusing their slots) while others
    /// suspend, resume and reschedule the old keys: each call succeeds or throws `keyEnded` of
    /// its own key, and the new timers are never touched.
    @Test func oldKeysRacingSlotReuseNeverReachTheNewTimers() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        for round in 0..<20 {
            let old = try (0..<200).map { _ in try backend.schedule(.after(.seconds(100)), calling: Quiet()) }
            let odd = Locked<[String]>([])
            let start = DispatchSemaphore(value: 0)
            let done = DispatchSemaphore(value: 0)
            let stop = Locked(false)
            for _ in 0..<2 {
                onBackgroundThread {
                    start.wait()
                    while !stop.current {
                        for key in old {
                            for error in [
                                thrown { try backend.suspend(key) }, thrown { try backend.resume(key) },
                                thrown { try backend.reschedule(key, .after(.seconds(7))) },
                            ] {
                                if let error, error != .keyEnded(key) { odd.withLock { $0.append("\(error)") } }
                            }
                        }
                    }
                    done.signal()
                }
            }
            start.signal()
            start.signal()
            var fresh: [TimerKey] = []
            for (index, key) in old.enumerated() {
                backend.cancel(key)
                fresh.append(try backend.schedule(.after(.seconds(300)), name: "r\(round)-\(index)", calling: Quiet()))
            }
            // Old keys hammered a little longer after every slot is reused.
            usleep(20_000)
            stop.withLock { $0 = true }
            for _ in 0..<2 { #expect(done.wait(timeout: .now() + .seconds(20)) == .success) }
            #expect(odd.current.isEmpty, "\(odd.current.prefix(3))")
            let expected = backend.now() + .seconds(300)
            for index in fresh.indices {
                let snapshot = try registry.snapshot(named: "r\(round)-\(index)")
                #expect(snapshot.state == .scheduled, "round \(round): \(snapshot)")
                #expect(snapshot.nextDeadline == expected, "round \(round): \(snapshot)")
            }
            for key in fresh { backend.cancel(key) }
        }
        backend.shutdown()
    }

    /// A key of another backend, live or ended there, or of a backend that has gone: `isActive`
    /// false, `cancel` nothing, the rest `invalidOption` naming "key".
    @Test func foreignKeysLiveEndedAndOfAGoneBackend() throws {
        let registry = TimerRegistry()
        let first = ManualBackend(registry: registry)
        let second = ManualBackend(registry: registry)
        let live = try first.schedule(.after(.seconds(10)), calling: Quiet())
        let ended = try first.schedule(.after(.seconds(10)), calling: Quiet())
        first.cancel(ended)
        var gone: TimerKey?
        do {
            let third = ManualBackend(registry: TimerRegistry())
            gone = try third.schedule(.after(.seconds(10)), calling: Quiet())
            third.shutdown()
        }
        // The second backend's timers sit in the same slots.
        let mine = try (0..<3).map { _ in try second.schedule(.after(.seconds(20)), calling: Quiet()) }
        for foreign in [live, ended, gone!] {
            #expect(!second.isActive(foreign))
            second.cancel(foreign)
            #expect(isForeignKeyError(thrown { try second.reschedule(foreign, .after(.seconds(1))) }, foreign), "\(foreign)")
            #expect(isForeignKeyError(thrown { try second.suspend(foreign) }, foreign), "\(foreign)")
            #expect(isForeignKeyError(thrown { try second.resume(foreign) }, foreign), "\(foreign)")
        }
        #expect(mine.allSatisfy { second.isActive($0) })
        #expect(registry.snapshot().filter { $0.backend == "manual" && $0.state == .scheduled }.count == 4)
        #expect(first.isActive(live))
        second.advance(by: .seconds(15))
        #expect(mine.allSatisfy { second.isActive($0) }, "a foreign reschedule moved a timer")
        first.shutdown()
        second.shutdown()
    }

    // MARK: Promise 4: overdue timers on different clocks

    /// A wall step forward, after a stall, makes a wall timer overdue by less than a monotonic
    /// one that was already overdue: the monotonic one must fire first.
    @Test func aWallStepAfterAStallKeepsDeadlineOrder() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let order = Locked<[String]>([])
        try backend.schedule(.after(.seconds(1))) { _ in order.withLock { $0.append("mono(-14s)") } }
        try backend.schedule(.after(.seconds(20), on: .wall)) { _ in order.withLock { $0.append("wall(-5s)") } }
        try backend.schedule(.after(.seconds(3), on: .continuous)) { _ in order.withLock { $0.append("cont(-12s)") } }
        try backend.schedule(.after(.seconds(14), on: .wall)) { _ in order.withLock { $0.append("wall(-11s)") } }
        backend.stall(for: .seconds(15))
        backend.stepWallClock(by: .seconds(10))
        backend.runDue()
        #expect(order.current == ["mono(-14s)", "cont(-12s)", "wall(-11s)", "wall(-5s)"])
        backend.shutdown()
    }

    /// A suspend after a stall: continuous and wall timers that came due in it are overdue by
    /// less than the stalled monotonic one.
    @Test func aSuspendAfterAStallKeepsDeadlineOrder() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let order = Locked<[String]>([])
        try backend.schedule(.after(.seconds(1))) { _ in order.withLock { $0.append("mono(-14s)") } }
        try backend.schedule(.after(.seconds(20), on: .continuous)) { _ in order.withLock { $0.append("cont(-5s)") } }
        try backend.schedule(.after(.seconds(18), on: .wall)) { _ in order.withLock { $0.append("wall(-7s)") } }
        try backend.schedule(.after(.seconds(16))) { _ in order.withLock { $0.append("mono(not due)") } }
        backend.stall(for: .seconds(15))
        backend.simulateSuspend(for: .seconds(10))
        backend.runDue()
        #expect(order.current == ["mono(-14s)", "wall(-7s)", "cont(-5s)"])
        backend.advance(by: .seconds(1))
        #expect(order.current.last == "mono(not due)")
        backend.shutdown()
    }

    /// A handler that holds the loop (moves the clock from inside), with equal deadlines across
    /// clocks: deadline order, and among equals, the order scheduled or last rescheduled.
    @Test func aHandlerHoldingTheLoopThenEqualDeadlinesAcrossClocks() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let order = Locked<[String]>([])
        try backend.schedule(.after(.seconds(1))) { _ in
            order.withLock { $0.append("holder") }
            backend.advance(by: .seconds(30))
        }
        let a = try backend.schedule(.after(.seconds(10))) { _ in order.withLock { $0.append("a") } }
        try backend.schedule(.after(.seconds(10), on: .continuous)) { _ in order.withLock { $0.append("b") } }
        try backend.schedule(.after(.seconds(10))) { _ in order.withLock { $0.append("c") } }
        try backend.schedule(.after(.seconds(5), on: .wall)) { _ in order.withLock { $0.append("w5") } }
        try backend.schedule(.after(.seconds(10), on: .continuous)) { _ in order.withLock { $0.append("d") } }
        // Rescheduled to the same deadline: it goes after the others of that deadline.
        try a.reschedule(.after(.seconds(10), on: .continuous))
        try backend.schedule(.after(.seconds(7), on: .continuous)) { _ in order.withLock { $0.append("c7") } }
        backend.advance(by: .seconds(1))
        // "What came due fires after the handler returns": in this advance, or the next runDue.
        let inTheAdvance = order.current
        backend.runDue()
        #expect(order.current == ["holder", "w5", "c7", "b", "c", "d", "a"], "in the advance: \(inTheAdvance)")
        backend.shutdown()
    }

    /// The documentation of `advance(to:)` and "Testing with ManualBackend": called from inside a
    /// handler, `advance` moves the clock without firing; what came due fires in the outer call if
    /// a timer of its window is still to fire there, and otherwise at the next `advance` or
    /// `runDue()`.
    @Test(arguments: [true, false])
    func whatCameDueInsideAHandlersAdvanceFiresInTheOuterCallOrTheNext(outerWindowHasMore: Bool) throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let order = Locked<[String]>([])
        try backend.schedule(.after(.seconds(1))) { _ in backend.advance(by: .seconds(30)) }
        if outerWindowHasMore {
            try backend.schedule(.after(.milliseconds(1500))) { _ in order.withLock { $0.append("due at 1.5 s") } }
        }
        try backend.schedule(.after(.seconds(10))) { _ in order.withLock { $0.append("due at 10 s") } }
        backend.advance(by: .seconds(2))
        #expect(backend.now() == MonotonicInstant(nanoseconds: 32_000_000_000))
        #expect(order.current == (outerWindowHasMore ? ["due at 1.5 s", "due at 10 s"] : []))
        backend.runDue()
        #expect(order.current.last == "due at 10 s")
    }

    /// Repeating timers on three clocks stalled across several periods, with `.burst`: every
    /// overdue tick fires, all in the order of their deadlines.
    @Test func burstTicksOfThreeClocksInterleaveByDeadline() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        let fired = Locked<[(MonotonicInstant, String)]>([])
        for (clock, first) in [(DeadlineClock.monotonic, 100), (.continuous, 130), (.wall, 160)] {
            try backend.schedule(.every(.milliseconds(100), on: clock, firstAfter: .milliseconds(first)), missedTicks: .burst) { tick in
                fired.withLock { $0.append((tick.scheduled, "\(clock)#\(tick.index)")) }
            }
        }
        backend.stall(for: .seconds(1))
        backend.runDue()
        let deadlines = fired.current.map(\.0)
        #expect(fired.current.count >= 27)
        #expect(deadlines == deadlines.sorted(), "\(fired.current.map(\.1))")
        backend.shutdown()
    }

    // MARK: Promise 5: the epoll (both modes) and io_uring loops

    fileprivate enum Loop: String, CaseIterable, CustomTestStringConvertible {
        case timerfd, epollPwait2, ioURing
        var testDescription: String { rawValue }
        func make(_ registry: TimerRegistry) throws(TimerError) -> any TimerBackend {
            switch self {
            case .timerfd: try EpollBackend(options: .init(waitMode: .timerfd), registry: registry)
            case .epollPwait2: try EpollBackend(options: .init(waitMode: .epollPwait2), registry: registry)
            case .ioURing: try IOURingBackend(registry: registry)
            }
        }
    }

    /// Makes the loop's backend, or nil where it cannot run here.
    private func backend(_ loop: Loop) throws -> (any TimerBackend)? {
        do {
            return try loop.make(TimerRegistry())
        } catch .unavailable(_, let reason) {
            print("skipping \(loop): \(reason)")
            return nil
        }
    }

    /// One-shots one after another, each the only timer: each fires once, never early.
    @Test(arguments: Loop.allCases)
    fileprivate func oneShotsInSuccessionEachTheOnlyTimer(loop: Loop) throws {
        guard let backend = try backend(loop) else { return }
        defer { backend.shutdown() }
        withWatchdog {
            let early = Locked<[String]>([])
            let fires = Locked<[Int: Int]>([:])
            let done = DispatchSemaphore(value: 0)
            let total = 60
            @Sendable func next(_ index: Int) {
                guard index < total else {
                    done.signal()
                    return
                }
                let delay = Duration.microseconds([0, 1, 50, 500, 1500, 3000][index % 6])
                let deadline = MonotonicInstant.now() + delay
                do {
                    try backend.schedule(.after(delay)) { tick in
                        let now = MonotonicInstant.now()
                        if now < deadline || tick.actual < tick.scheduled || tick.scheduled < deadline {
                            early.withLock { $0.append("#\(index): now \(now) deadline \(deadline) tick \(tick.scheduled)/\(tick.actual)") }
                        }
                        let count = fires.withLock { fires -> Int in
                            fires[index, default: 0] += 1
                            return fires[index]!
                        }
                        if count == 1 { next(index + 1) }
                    }
                } catch { early.withLock { $0.append("#\(index): \(error)") } }
            }
            next(0)
            #expect(done.wait(timeout: .now() + .seconds(20)) == .success, "stuck at \(fires.current.count) of \(total)")
            blockRealTime(.milliseconds(50))
            #expect(early.current.isEmpty, "\(early.current.prefix(3))")
            #expect(fires.current.values.allSatisfy { $0 == 1 }, "\(fires.current.filter { $0.value != 1 })")
            #expect(fires.current.count == total)
        }
    }

    /// Timers scheduled from several threads at scattered deadlines fire once each, in deadline
    /// order, never early.
    @Test(arguments: Loop.allCases)
    fileprivate func scatteredTimersFromSeveralThreadsFireInDeadlineOrder(loop: Loop) throws {
        guard let backend = try backend(loop) else { return }
        defer { backend.shutdown() }
        withWatchdog {
            let fired = Locked<[(MonotonicInstant, Int)]>([])
            let early = Locked<[String]>([])
            let base = MonotonicInstant.now() + .seconds(1)
            onThreads(4) { thread in
                for index in 0..<50 {
                    let id = thread * 50 + index
                    let deadline = base + .microseconds((id * 7919) % 150_000)
                    _ = try? backend.schedule(.at(deadline)) { tick in
                        let now = MonotonicInstant.now()
                        if now < deadline { early.withLock { $0.append("#\(id) at \(now), due \(deadline)") } }
                        fired.withLock { $0.append((tick.scheduled, id)) }
                    }
                }
            }
            #expect(waitFor(.seconds(10)) { fired.current.count >= 200 })
            blockRealTime(.milliseconds(50))
            let list = fired.current
            #expect(list.count == 200)
            #expect(Set(list.map(\.1)).count == list.count, "a timer fired twice")
            #expect(list.map(\.0) == list.map(\.0).sorted(), "out of deadline order")
            #expect(early.current.isEmpty, "\(early.current.prefix(3))")
        }
    }

    /// A timer cancelled by the handler of another one due at the same instant (scheduled first)
    /// never fires; one cancelled from another thread just as it is due fires at most once; the
    /// loop goes on firing after.
    @Test(arguments: Loop.allCases)
    fileprivate func timersCancelledJustAsTheyAreDue(loop: Loop) throws {
        guard let backend = try backend(loop) else { return }
        defer { backend.shutdown() }
        try withWatchdog {
            let problems = Locked<[String]>([])
            for round in 0..<25 {
                let deadline = MonotonicInstant.now() + .milliseconds(50)
                let victimFires = Counter()
                let victim = Locked<TimerHandle?>(nil)
                let cancellerRan = DispatchSemaphore(value: 0)
                try backend.schedule(.at(deadline)) { _ in
                    victim.current?.cancel()
                    cancellerRan.signal()
                }
                let made = try backend.schedule(.at(deadline)) { _ in victimFires.increment() }
                victim.withLock { $0 = made }
                // And one cancelled from this thread around its deadline.
                let raced = try backend.schedule(.after(.microseconds(2000 + round * 80))) { _ in }
                blockRealTime(.milliseconds(2))
                raced.cancel()
                #expect(cancellerRan.wait(timeout: .now() + .seconds(10)) == .success)
                blockRealTime(.milliseconds(5))
                if victimFires.current != 0 { problems.withLock { $0.append("round \(round): the victim fired after its cancel") } }
                if made.endReason != .cancelled {
                    problems.withLock { $0.append("round \(round): victim ended \(String(describing: made.endReason))") }
                }
                let reason = raced.endReason
                let racedFires = raced.fireCount
                if !(racedFires <= 1 && (reason == .cancelled || (reason == .completed && racedFires == 1))) {
                    problems.withLock { $0.append("round \(round): raced \(racedFires) fires, \(String(describing: reason))") }
                }
            }
            let after = DispatchSemaphore(value: 0)
            try backend.schedule(.after(.milliseconds(1))) { _ in after.signal() }
            #expect(after.wait(timeout: .now() + .seconds(10)) == .success, "the loop stopped firing")
            #expect(problems.current.isEmpty, "\(problems.current.prefix(5))")
        }
    }

    /// A one-shot rescheduled from another thread around its deadline: it fires for a deadline
    /// it had, never early, and a reschedule that succeeded is not lost.
    @Test(arguments: Loop.allCases)
    fileprivate func aOneShotRescheduledFromAnotherThreadAroundItsDeadline(loop: Loop) throws {
        guard let backend = try backend(loop) else { return }
        defer { backend.shutdown() }
        try withWatchdog {
            let problems = Locked<[String]>([])
            for round in 0..<30 {
                let calls = Locked<[(MonotonicInstant, MonotonicInstant)]>([])
                let first = MonotonicInstant.now() + .milliseconds(2)
                let timer = try backend.schedule(.at(first)) { tick in
                    calls.withLock { $0.append((tick.scheduled, MonotonicInstant.now())) }
                }
                let outcome = Locked<(MonotonicInstant, TimerError?)?>(nil)
                let moved = DispatchSemaphore(value: 0)
                onBackgroundThread {
                    blockRealTime(.microseconds(1500 + round * 30))
                    let later = MonotonicInstant.now() + .milliseconds(3)
                    let error = thrown { try timer.reschedule(.at(later)) }
                    outcome.withLock { $0 = (later, error) }
                    moved.signal()
                }
                #expect(moved.wait(timeout: .now() + .seconds(10)) == .success)
                #expect(waitFor(.seconds(10)) { timer.endReason != nil })
                blockRealTime(.milliseconds(5))
                let list = calls.current
                guard let (later, error) = outcome.current else { continue }
                let known = error == nil ? [first, later] : [first]
                for (scheduled, at) in list {
                    if !known.contains(scheduled) {
                        problems.withLock { $0.append("round \(round): fired for \(scheduled), not one of \(known)") }
                    }
                    if at < scheduled { problems.withLock { $0.append("round \(round): early: \(at) < \(scheduled)") } }
                }
                if list.isEmpty || list.count > 2 { problems.withLock { $0.append("round \(round): \(list.count) calls") } }
                if error == nil, list.last?.0 != later {
                    problems.withLock { $0.append("round \(round): the reschedule to \(later) was lost: calls \(list.map(\.0))") }
                }
                if let error, error != .timerEnded(name: timer.name, state: .finished) {
                    problems.withLock { $0.append("round \(round): reschedule threw \(error)") }
                }
                if timer.fireCount != list.count {
                    problems.withLock { $0.append("round \(round): fireCount \(timer.fireCount) vs \(list.count)") }
                }
                if timer.endReason != .completed {
                    problems.withLock { $0.append("round \(round): ended \(String(describing: timer.endReason))") }
                }
            }
            #expect(problems.current.isEmpty, "\(problems.current.prefix(5))")
        }
    }
}
