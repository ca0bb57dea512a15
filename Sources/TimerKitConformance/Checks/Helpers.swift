import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit

extension Checks {
    /// Debounce, throttle, timeouts, owned timers and live-timer caps on every backend
    /// configuration. (Their exact timing is tested on virtual time, in HelperTests.)
    enum Helpers {
        /// The values of the work that ran, and whether each ran on the backend's loop.
        final class Runs: Sendable {
            private let log = Locked<[(value: Int, onLoop: Bool)]>([])
            func record(_ value: Int, on backend: any TimerBackend) {
                let onLoop = backend.scheduler.isOnLoop
                log.withLock { $0.append((value, onLoop)) }
            }
            var values: [Int] { log.current.map(\.value) }
            var allOnTheLoop: Bool { log.current.allSatisfy(\.onLoop) }
            var count: Int { log.current.count }
        }

        static func aDebouncedBurstRunsTheLastCallsWorkOnceOnTheLoop(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let runs = Runs()
            let delay = ms(300)
            let started = ContinuousClock.now
            for value in 0..<20 {
                try h.backend.debounce("save", for: delay) { [backend = h.backend] in runs.record(value, on: backend) }
            }
            let callsTook = ContinuousClock.now - started
            let registered = h.registry.names
            if ContinuousClock.now - started < delay { #expect(registered == ["save"], "registered while work waits") }
            #expect(await h.waitUntilAsync { runs.count >= 1 })
            await h.passAsync(ms(100))
            #expect(runs.values.last == 19, "the last call's work")
            if callsTook < delay { #expect(runs.count == 1, "the calls came within \(delay) of each other: one run") }
            #expect(runs.allOnTheLoop)
            #expect(await h.waitUntilAsync { h.registry.count == 0 }, "nothing registered once the work has run")
        }

        static func aLeadingThrottlerRunsTheFirstCallAndDropsTheRestOfItsWindow(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let runs = Runs()
            let throttler = try Throttler(every: .seconds(3600), edge: .leading, name: "scroll", on: h.backend)
            for value in 0..<100 { try throttler.call { [backend = h.backend] in runs.record(value, on: backend) } }
            #expect(await h.waitUntilAsync { runs.count >= 1 })
            await h.passAsync(ms(50))
            #expect(runs.values == [0])
            #expect(runs.allOnTheLoop)
            #expect(try h.registry.snapshot(named: "scroll").state == .scheduled, "its window is open")
            throttler.cancel()
            try throttler.call { [backend = h.backend] in runs.record(100, on: backend) }
            #expect(await h.waitUntilAsync { runs.count == 2 }, "cancelling closed the window: the next call runs at once")
        }

        static func withTimeoutCancelsAnOperationThatRunsOutOfTime(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let backend = h.backend
            for _ in 0..<5 {
                await #expect(throws: TimeoutError.self) {
                    try await h.drive {
                        try await withTimeout(ms(20), on: backend, name: "limit") { try await backend.clock.sleep(for: .seconds(3600)) }
                    }
                }
                // At once, not eventually: the fired limit's timer has left the registry when it throws.
                #expect(h.registry.timer(named: "limit") == nil, "the limit's timer is gone when withTimeout throws")
            }
            #expect(await waitForAsync { h.registry.count == 0 }, "nothing left registered")
            let value = try await h.drive { try await withTimeout(.seconds(3600), on: backend) { 7 } }
            #expect(value == 7)
            #expect(h.registry.timer(named: "limit") == nil)
        }

        static func callsAndCancelsRacingTheFiresFromOtherThreadsKeepTheirPromises(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let runs = Counter()
            let debouncer = try Debouncer(for: .microseconds(200), name: "raced", on: h.backend)
            let throttler = try Throttler(every: .microseconds(300), edge: .both, on: h.backend)
            h.driveInBackground(for: ms(200))
            await onThreadsAsync(3) { thread in
                let until = ContinuousClock.now + .milliseconds(150)
                while ContinuousClock.now < until {
                    try? debouncer.call { runs.increment() }
                    try? throttler.call { runs.increment() }
                    if thread == 0 { debouncer.cancel() }
                    if thread == 1 { try? h.registry.cancel(named: "raced") }
                }
            }
            // Whatever the race left, a debouncer called once more runs that call's work.
            let last = Locked(false)
            try debouncer.call { last.withLock { $0 = true } }
            #expect(await h.waitUntilAsync { last.current }, "the last call's work ran")
            #expect(h.registry.timer(named: "raced") != nil, "the debouncer's timer waits for its next call")
        }

        static func workWhoseCapturesCallBackIntoTimerKitWhenReleased(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let released = Counter()
            final class CallsBack: Sendable {
                let backend: any TimerBackend
                let released: Counter
                init(_ backend: any TimerBackend, _ released: Counter) {
                    self.backend = backend
                    self.released = released
                }
                deinit {
                    // Re-enters the registry and the scheduler from wherever the work is let go of.
                    try? backend.debounce("from-deinit", for: .seconds(3600)) {}
                    _ = backend.registry.snapshot()
                    released.increment()
                }
            }
            do {
                let ran = CallsBack(h.backend, released)
                try h.backend.debounce("ran", for: ms(1)) { _ = ran }
                let displaced = CallsBack(h.backend, released)
                try h.backend.throttle("displaced", every: .seconds(3600), edge: .trailing) { _ = displaced }
                try h.backend.throttle("displaced", every: .seconds(3600), edge: .trailing) {}
            }
            #expect(await h.waitUntilAsync { released.current == 2 }, "both captures were released, neither under a lock")
            #expect(h.registry.timer(named: "from-deinit") != nil)
        }

        static func shuttingDownFromInsideDebouncedWork(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let ran = Counter()
            try h.backend.debounce("last", for: ms(1)) { [backend = h.backend] in
                backend.shutdown()
                ran.increment()
            }
            #expect(await h.waitUntilAsync { ran.current == 1 })
            #expect(await h.waitUntilAsync { h.backend.scheduler.hasShutDown })
            #expect(throws: TimerError.backendShutDown(backend: h.backend.name)) { try h.backend.debounce("after", for: ms(1)) {} }
        }

        static func anOwnedTimerIsCancelledWhenItsOwnerGoes(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let handle: TimerHandle
            do {
                let owned = try OwnedTimer(h.backend.schedule(.every(ms(5))) { _ in })
                handle = owned.handle
                #expect(h.registry.count == 1)
            }
            #expect(handle.currentState == .cancelled)
            #expect(h.registry.count == 0)
        }

        static func theLiveTimerCapHolds(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            try h.backend.limitLiveTimers(to: 2)
            let first = try h.backend.schedule(.after(.seconds(3600))) { _ in }
            try h.backend.schedule(.every(.seconds(3600))) { _ in }
            #expect(throws: TimerError.liveTimerLimit(scope: "\(h.backend.name) backend", limit: 2)) {
                try h.backend.schedule(.after(ms(1))) { _ in }
            }
            #expect(h.backend.refusedByLiveTimerLimit == 1)
            first.cancel()
            try h.backend.schedule(.after(.seconds(3600))) { _ in }
            #expect(h.registry.count == 2)
        }
    }
}

extension Checks.Helpers {
    static func everyTimerIsToldWhyItEnded(_ kind: BackendUnderTest) async throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let told = Locked<[String: TimerEndReason]>([:])
        func watch(_ timer: TimerHandle, as label: String) {
            timer.onEnd { reason in told.withLock { $0[label] = reason } }
        }
        final class Target: Sendable {}
        let oneShot = try h.backend.schedule(.after(ms(1))) { _ in }
        watch(oneShot, as: "one-shot")
        let counted = try h.backend.schedule(.every(ms(1), count: 2)) { _ in }
        watch(counted, as: "counted")
        let byHandle = try h.backend.schedule(.every(.seconds(3600))) { _ in }
        watch(byHandle, as: "handle")
        let byName = try h.backend.schedule(.every(.seconds(3600)), name: "by-name") { _ in }
        watch(byName, as: "name")
        var target: Target? = Target()
        let orphan = try h.backend.schedule(.every(.seconds(3600)), target: try #require(target), name: "orphan") { _, _ in }
        watch(orphan, as: "target")
        #expect(byHandle.endReason == nil, "nil while live")

        #expect(try await h.drive { try await oneShot.ended } == .completed)
        #expect(try await h.drive { try await counted.ended } == .completed)
        byHandle.cancel()
        #expect(try await byHandle.ended == .cancelled)
        try h.registry.cancel(named: "by-name")
        #expect(try await byName.ended == .cancelledByName)
        target = nil
        #expect(h.registry.timer(named: "orphan") == nil, "a lookup ends a timer whose target is gone")
        #expect(try await orphan.ended == .targetReleased)

        let survivors = try (0..<2).map { _ in try h.backend.schedule(.every(.seconds(3600))) { _ in } }
        h.registry.cancelAll()
        for timer in survivors { #expect(try await timer.ended == .cancelledByCancelAll) }
        let lastOne = try h.backend.schedule(.every(.seconds(3600))) { _ in }
        watch(lastOne, as: "shutdown")
        h.backend.shutdown()
        #expect(try await lastOne.ended == .backendShutDown)
        #expect(lastOne.endReason == .backendShutDown)
        #expect(await waitForAsync { told.current.count == 6 })
        #expect(
            told.current == [
                "one-shot": .completed, "counted": .completed, "handle": .cancelled, "name": .cancelledByName,
                "target": .targetReleased, "shutdown": .backendShutDown,
            ])
    }
}

extension Checks.Helpers {
    static func aJitteredTimerFiresWithinItsWindowAfterEachGridPoint(_ kind: BackendUnderTest) async throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let log = TickLog()
        let start = h.backend.now()
        try h.backend.schedule(.every(ms(20), startingAt: start + ms(20), count: 5, jitter: ms(10)), handler: log.record)
        #expect(await h.waitUntilAsync { log.count == 5 })
        for tick in log.all {
            // On a busy machine a late tick may skip grid points: measure from the one it fired for.
            let sinceStart = tick.scheduled.nanoseconds - start.nanoseconds
            let afterGridPoint = sinceStart % 20_000_000
            #expect(sinceStart >= 20_000_000, "tick \(tick.index)")
            #expect(afterGridPoint <= 10_000_000, "tick \(tick.index): \(afterGridPoint) ns after its grid point")
            expectOnTime(tick, on: kind)  // never before its jittered time, and not long after
        }
    }
}

extension Checks.Helpers {
    static func asyncDebouncedWorkRunsOnceAsATaskOnTheLoop(_ kind: BackendUnderTest) async throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let runs = Runs()
        for value in 0..<10 {
            let work: @Sendable () async -> Void = { [backend = h.backend] in
                await Task.yield()
                runs.record(value, on: backend)
            }
            try h.backend.debounce("save", for: ms(300), work)
        }
        #expect(await h.waitUntilAsync { runs.count >= 1 })
        await h.passAsync(ms(50))
        #expect(runs.values.last == 9)
        // Manual's taskExecutor is its test executor, a thread of its own.
        if kind.isRealTime { #expect(runs.allOnTheLoop, "the task ran on the backend's loop (its taskExecutor)") }
    }
}
