import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

@Suite("Registry")
struct RegistryTests {
    let registry = TimerRegistry()

    @Test func generatedNamesAreUniqueAndNeverReused() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        var seen = Set<String>()
        for _ in 0..<100 {
            let timer = try clock.schedule(.after(ms(5))) { _ in }
            #expect(seen.insert(timer.name).inserted)
            timer.cancel()  // the seeds' `count`-based scheme reuses names after this
        }
        let survivors = try (0..<10).map { _ in try clock.schedule(.after(ms(5))) { _ in } }
        #expect(survivors.allSatisfy { !seen.contains($0.name) })
        #expect(registry.count == 10)
    }

    @Test func duplicateNamesAreRefusedUntilTheFirstTimerEnds() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let first = try clock.schedule(.after(ms(5)), name: "poll") { _ in }
        #expect(throws: TimerError.duplicateName("poll")) {
            try clock.schedule(.after(ms(5)), name: "poll") { _ in }
        }
        first.cancel()
        #expect(throws: Never.self) { try clock.schedule(.after(ms(5)), name: "poll") { _ in } }
    }

    @Test func namesAreSharedAcrossBackendsOfOneRegistry() throws {
        let one = ManualBackend(registry: registry, name: "manual-a")
        let two = ManualBackend(registry: registry, name: "manual-b")
        try one.schedule(.after(ms(5)), name: "x") { _ in }
        #expect(throws: TimerError.duplicateName("x")) { try two.schedule(.after(ms(5)), name: "x") { _ in } }
        #expect(try registry.snapshot(named: "x").backend == "manual-a")
    }

    @Test func lookupAndControlByName() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        let timer = try clock.schedule(.every(ms(10)), name: "heartbeat", handler: log.record)
        #expect(registry.timer(named: "heartbeat") === timer)
        #expect(registry.timer(named: timer.name) === timer)
        try registry.suspend(named: "heartbeat")
        clock.advance(by: ms(50))
        #expect(log.count == 0)
        try registry.resume(named: "heartbeat")
        clock.advance(by: ms(10))
        #expect(log.count >= 1)
        try registry.cancel(named: "heartbeat")
        #expect(registry.timer(named: "heartbeat") == nil)
        #expect(throws: TimerError.noSuchTimer("heartbeat")) { try registry.cancel(named: "heartbeat") }
        #expect(throws: TimerError.noSuchTimer("nope")) { try registry.resume(named: "nope") }
        #expect(throws: TimerError.noSuchTimer("timer#0")) { try registry.suspend(named: "timer#0") }
    }

    @Test func generatedNameLookupFindsTheTimer() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let timer = try clock.schedule(.after(ms(10))) { _ in }
        #expect(timer.name.hasPrefix("timer#"))
        #expect(registry.timer(named: timer.name) === timer)
    }

    @Test func snapshotsDescribeEachTimer() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let start = clock.now()
        try clock.schedule(.every(ms(10)), name: "a") { _ in }
        let b = try clock.schedule(.after(ms(100)), name: "b") { _ in }
        try b.suspend()
        clock.advance(by: ms(25))
        let snaps = registry.snapshot()
        #expect(snaps.map(\.name) == ["a", "b"])
        #expect(snaps[0].backend == "manual")
        #expect(snaps[0].state == .scheduled)
        #expect(snaps[0].fires == 2)
        #expect(snaps[0].nextDeadline == start + ms(30))
        #expect(snaps[0].interval == ms(10))
        #expect(snaps[1].state == .suspended)
        #expect(snaps[1].nextDeadline == nil)
        #expect(snaps[1].interval == nil)
    }

    @Test func snapshotsNeverListEndedTimers() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let finished = try clock.schedule(.after(ms(1)), name: "once") { _ in }
        try clock.schedule(.every(ms(1)), name: "every") { _ in }
        clock.advance(by: ms(5))
        #expect(registry.snapshot().map(\.name) == ["every"])
        #expect(throws: TimerError.noSuchTimer("once")) { try registry.snapshot(named: "once") }
        #expect(finished.snapshot.state == .finished, "the handle itself still describes its ended timer")
    }

    @Test func removingAnObserverLetsItsHooksGoOutsideTheLock() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        final class CallsBack: Sendable {
            let registry: TimerRegistry
            init(_ registry: TimerRegistry) { self.registry = registry }
            deinit { _ = registry.addObserver(TimerObserver()) }  // re-enters the registry
        }
        var hook: CallsBack? = CallsBack(registry)
        let token = registry.addObserver(TimerObserver(willFire: { [hook] _ in _ = hook }))
        hook = nil
        try clock.schedule(.after(ms(1))) { _ in }
        clock.advance(by: ms(1))
        withWatchdog { registry.removeObserver(token) }
    }

    @Test func allTimersAtOnce() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        for i in 0..<5 { try clock.schedule(.every(ms(10)), name: "t\(i)", handler: log.record) }
        registry.suspendAll()
        clock.advance(by: ms(50))
        #expect(log.count == 0)
        registry.resumeAll()
        clock.runDue()
        #expect(log.count == 5, "each fires its latest missed tick once on resume")
        clock.advance(by: ms(10))
        #expect(log.count == 10)
        registry.cancelAll()
        #expect(registry.count == 0)
        #expect(registry.names.isEmpty)
    }

    @Test func separateRegistriesDoNotSeeEachOther() throws {
        let other = TimerRegistry()
        let a = ManualBackend(registry: registry)
        let b = ManualBackend(registry: other)
        try a.schedule(.after(ms(5)), name: "same") { _ in }
        try b.schedule(.after(ms(5)), name: "same") { _ in }
        #expect(registry.count == 1)
        #expect(other.count == 1)
    }

    @Test func theRegistryIsSafeUnderConcurrentUse() async throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    for i in 0..<500 {
                        let timer = try clock.schedule(.after(ms(1000)), name: "w\(worker)-\(i)") { _ in }
                        if i.isMultiple(of: 2) { timer.cancel() }
                        _ = self.registry.timer(named: "w\(worker)-\(i)")
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(registry.count == 1000)
    }

    /// A backend that has shut down, and its registry, are freed once the last reference goes,
    /// handles of ended timers included: nothing of the store keeps them alive.
    @Test func aShutDownBackendAndItsRegistryAreFreedWithTheirLastReferences() throws {
        weak var weakRegistry: TimerRegistry?
        weak var weakScheduler: TimerScheduler?
        var kept: TimerHandle?
        try {
            let registry = TimerRegistry()
            weakRegistry = registry
            let backend = DispatchBackend(registry: registry)
            weakScheduler = backend.scheduler
            kept = try backend.schedule(.after(.seconds(60)), name: "kept") { _ in }
            backend.shutdown()
            #expect(throws: TimerError.backendShutDown(backend: "dispatch")) { try backend.schedule(.after(.seconds(1))) { _ in } }
        }()
        #expect(kept?.currentState == .cancelled && kept?.name == "kept", "an ended handle still answers")
        kept = nil
        #expect(waitFor { weakScheduler == nil && weakRegistry == nil })
    }

    /// Growing the store never copies the records to a bigger table (at a million timers that
    /// copy held the lock for milliseconds): the first timer's record stays where it was while
    /// thousands more are scheduled after it, across chunks.
    @Test func growingNeverMovesTheRecords() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let first = try backend.schedule(.after(.seconds(60))) { _ in }
        let before = backend.scheduler.recordAddress(of: first.key)
        let more = try (0..<(3 * RecordChunk.size)).map { _ in try backend.schedule(.after(.seconds(60))) { _ in } }
        #expect(backend.scheduler.storeChunkCount == 4)
        #expect(backend.scheduler.recordAddress(of: first.key) == before)
        withExtendedLifetime(more) {}
    }

    /// A backend keeps its timers in chunks of slots of its own: a shutdown reads those only,
    /// and the registry's lock is not taken per timer (a million-timer shutdown beside other
    /// backends held it for 100 ms before); a backend that goes gives its chunk back, and the
    /// next reuses it instead of growing the table.
    @Test func aShutdownEndsItsOwnTimersAndReadsNoOtherBackendsSlots() throws {
        let registry = TimerRegistry()
        let busy = ManualBackend(registry: registry)
        defer { busy.shutdown() }
        let busyTimers = try (0..<10_000).map { _ in try busy.schedule(.after(.seconds(60))) { _ in } }
        let tableBefore = registry.chunkCount
        for _ in 0..<200 {
            try {
                let neighbour = ManualBackend(registry: registry)
                let scheduled = try neighbour.schedule(.after(.seconds(1))) { _ in }
                let suspended = try neighbour.schedule(.every(.seconds(1))) { _ in }
                try suspended.suspend()
                #expect(neighbour.scheduler.storeChunkCount == 1)
                let turns = registry.lockTurns
                neighbour.shutdown()
                #expect(registry.lockTurns - turns <= 2, "no turn of the registry's lock per timer")
                #expect(scheduled.currentState == .cancelled && suspended.currentState == .cancelled)
            }()
        }
        #expect(registry.chunkCount == tableBefore + 1, "the first neighbour adds a chunk; the others reuse it")
        #expect(registry.count == 10_000)
        #expect(busyTimers.allSatisfy { $0.currentState == .scheduled })
    }

    /// A backend maps its first chunk of records and of its queue as it starts (nothing of them
    /// resident until a timer is written), so that its first schedule maps nothing under the
    /// lock; a backend that goes gives its chunk back as before.
    @Test func aBackendMapsItsFirstChunksAsItStarts() throws {
        let registry = TimerRegistry()
        try {
            let backend = ManualBackend(registry: registry)
            #expect(backend.scheduler.storeChunkCount == 1)
            #expect(backend.scheduler.monotonicQueueChunkCount == 1)
            #expect(registry.chunkCount == 1)
            let timer = try backend.schedule(.after(.seconds(1))) { _ in }
            try backend.schedule(.after(.seconds(2)), calling: QuietTimeoutCallback())
            #expect(registry.chunkCount == 1, "the first schedules lend no chunk")
            #expect(backend.scheduler.storeChunkCount == 1)
            #expect(backend.scheduler.monotonicQueueChunkCount == 1, "nor map a queue chunk")
            backend.shutdown()
            #expect(timer.currentState == .cancelled)
        }()
        let next = ManualBackend(registry: registry)
        defer { next.shutdown() }
        #expect(registry.chunkCount == 1, "the next backend reuses the chunk the first gave back as it went")
    }

    @Test func aDroppedRegistryIsFreedOnceItsBackendsAreGone() throws {
        weak var weakRegistry: TimerRegistry?
        do {
            let registry = TimerRegistry()
            weakRegistry = registry
            let clock = ManualBackend(registry: registry)
            defer { clock.shutdown() }
            let timers = try (0..<10).map { _ in try clock.schedule(.every(ms(10))) { _ in } }
            for timer in timers.prefix(5) { timer.cancel() }  // ended, waiting in the removal batch
            clock.advance(by: ms(25))
        }
        #expect(weakRegistry == nil, "ended timers must not keep their registry alive")
    }
}

/// A callback that does nothing, for timers scheduled with a key.
private final class QuietTimeoutCallback: TimerCallback {
    func timerFired(_ fire: TimerFire) {}
}
