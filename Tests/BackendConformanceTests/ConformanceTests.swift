import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitTestSupport

/// Every check of the backend contract (TimerKitConformance) on every one of TimerKit's backend
/// configurations, as a backend author's test target runs them on theirs.
@Suite("Backend conformance")
struct ConformanceTests {
    /// The checks to run, when a developer names some: `TIMERKIT_CHECKS=name1,name2 swift test
    /// --filter ConformanceTests` runs those on every backend (test filters do not reach a
    /// parameterized test's arguments). Every check otherwise.
    static func isSelected(_ check: ConformanceCheck) -> Bool {
        guard let names = ProcessInfo.processInfo.environment["TIMERKIT_CHECKS"], !names.isEmpty else { return true }
        return names.split(separator: ",").contains { $0 == check.name }
    }

    @Test(arguments: ConformanceCheck.all, BackendKind.allCases)
    func contract(_ check: ConformanceCheck, _ kind: BackendKind) async throws {
        if !Self.isSelected(check) { return }
        if try kind.checkedUnavailable(check.name) { return }
        try await check.run(on: kind.underTest)
    }

    /// Every check again with the timers kept as timers scheduled with a key
    /// (`BackendUnderTest.throughKeys`): the key path's calls and ends under the whole contract.
    @Test(arguments: ConformanceCheck.all, BackendKind.allCases)
    func contractThroughKeys(_ check: ConformanceCheck, _ kind: BackendKind) async throws {
        if !Self.isSelected(check) { return }
        if try kind.checkedUnavailable(check.name) { return }
        try await check.run(on: kind.underTest.throughKeys)
    }
}

/// Checks that need a child process of their own (descriptors and CPU time counted where no
/// other test runs): they re-make the backend in the child from its `BackendKind`.
extension ConformanceTests {
    /// Backends that own descriptors or threads give every one back at shutdown. Counted in
    /// a child process, where no other test opens descriptors meanwhile.
    @Test(arguments: BackendKind.allCases)
    func creatingAndShuttingDownManyBackendsLeaksNoDescriptor(_ kind: BackendKind) async throws {
        if try kind.checkedUnavailable("the descriptor count") { return }
        await #expect(processExitsWith: .success) { [kind] in
            warmUpDispatch()
            try kind.makeHarness().shutdown()  // one round first: lazily made process-wide state
            let before = openLoopDescriptors().count
            for _ in 0..<200 {
                let h = try kind.makeHarness()
                try h.backend.schedule(.after(.seconds(60))) { _ in }
                h.shutdown()
            }
            // A leak adds at least 200. The slack absorbs what Dispatch and CoreFoundation open
            // and free lazily: a bare thread that runs a run loop 50 times, with no TimerKit
            // code, moves the count by 3 here.
            letAsynchronousReleasesFinish()
            let added = openLoopDescriptors().count - before
            exit(added <= 10 ? 0 : Int32(min(added, 250)))
        }
    }

    /// "Park it forever" deadlines must neither fire nor spin. Each backend runs in a
    /// child process, where the process's CPU time is the backend's alone.
    @Test(arguments: BackendKind.allCases)
    func extremeDeadlinesNeverFireAndBurnNoCPU(_ kind: BackendKind) async throws {
        if try kind.checkedUnavailable("the extreme deadlines") { return }
        await #expect(processExitsWith: .success) { [kind] in
            let outcome = try Self.parkForeverAndMeasure(kind)
            letAsynchronousReleasesFinish()
            exit(outcome)
        }
    }

    /// The body of `extremeDeadlinesNeverFireAndBurnNoCPU`, in a function of its own so the
    /// backend is gone before the child exits (when LeakSanitizer looks). Returns 0 or the
    /// number of the broken promise.
    static func parkForeverAndMeasure(_ kind: BackendKind) throws -> Int32 {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let fired = Counter()
        let record: @Sendable (Tick) -> Void = { _ in fired.increment() }
        let schedules: [TimerSchedule] = [
            .after(.seconds(Int64.max)), .at(.distantFuture), .after(seconds: 1e300), .at(MonotonicInstant.horizon),
            .every(.seconds(Int64.max)), .every(ms(1), firstAfter: .seconds(Int64.max)),
            .every(seconds: 1e300), .at(MonotonicInstant(nanoseconds: UInt64.max - 1)),
        ]
        for schedule in schedules {
            try h.backend.schedule(schedule, handler: record)
            try h.backend.schedule(schedule, tolerance: .seconds(Int64.max), handler: record)
        }
        // A far but ordinary deadline with a huge tolerance still arms, for an hour away.
        try h.backend.schedule(.after(.seconds(3600)), tolerance: .seconds(Int64.max), handler: record)
        let before = processCPUSeconds()
        if let manual = h.manual {
            manual.advance(by: .seconds(1))
        } else {
            blockRealTime(.seconds(1))
        }
        let cpu = processCPUSeconds() - before
        if fired.current != 0 { return 2 }
        if cpu > 0.25 { return 3 }  // a spinning loop burns about 1 s here
        if h.registry.count != 17 { return 4 }
        return 0
    }

    @Test func onManualTheLoopsExecutorIsTheTestExecutor() throws {
        let h = try BackendKind.manual.makeHarness()
        defer { h.shutdown() }
        #expect(h.backend.taskExecutor as? ManualTaskExecutor === h.taskExecutor)
    }
}
