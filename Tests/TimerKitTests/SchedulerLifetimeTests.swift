import Dispatch
import Foundation
import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// A driver that arms nothing: the scheduler's own wake-up state, which it owns.
private final class ArmsNothing: TimerDriver {
    func wake(at deadline: MonotonicInstant) throws(TimerError) {}
}

/// What keeps a scheduler alive, and what lets it go: every strong reference the core holds to
/// a scheduler (the clock watcher's, the registry's lent chunks') has a release on every path,
/// a shutdown that races a schedule, or no shutdown at all.
@Suite("A scheduler's lifetime", .onAThreadOfItsOwn)
struct SchedulerLifetimeTests {
    /// The defect this pins: a wall timer scheduled while its scheduler shut down told the clock
    /// watcher of the scheduler after the shutdown had let the watcher go of it, and the watcher
    /// kept it for ever (21–65 of 4,000 schedulers).
    @Test func aWallTimerScheduledWhileItsSchedulerShutsDownLeavesNothingWatched() {
        let registry = TimerRegistry()
        var stillWatched = 0
        var scheduledBeforeTheShutdown = 0
        for round in 0..<2_000 {
            let scheduler = TimerScheduler(backendName: "race", registry: registry)
            scheduler.attach(owning: ArmsNothing())
            let accepted = Locked(false)
            let clock: DeadlineClock = round.isMultiple(of: 2) ? .wall : .continuous
            onThreads(2) { index in
                if index == 0 {
                    let key = try? scheduler.schedule(
                        .after(.seconds(3600), on: clock), name: nil, tolerance: .zero, policy: .skip, calling: Callback(),
                        of: Callback.self)
                    accepted.withLock { $0 = key != nil }
                } else {
                    scheduler.shutdown()
                }
            }
            if accepted.current { scheduledBeforeTheShutdown += 1 }
            if ClockWatcher.shared.isWatching(scheduler) { stillWatched += 1 }
        }
        #expect(stillWatched == 0, "\(stillWatched) of 2,000 schedulers still watched after their shutdown")
        #expect(scheduledBeforeTheShutdown > 0, "no round scheduled before its shutdown: the race was never run")
    }

    /// A backend as an author might write it: it owns its scheduler and never shuts it down.
    private final class ForgetfulBackend: TimerBackend {
        let scheduler: TimerScheduler
        init(registry: TimerRegistry) {
            scheduler = TimerScheduler(backendName: "forgetful", registry: registry)
            scheduler.attach(owning: ArmsNothing())
        }
        func shutdown() { scheduler.shutdown() }
    }

    /// The process's address space, in bytes (`/proc/self/statm`'s first field).
    private static func addressSpace() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
            let pages = Int(text.split(separator: " ").first ?? "")
        else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// The defect this pins: the registry's lent chunk held its scheduler strongly from
    /// `attach` until a shutdown, so a backend released without one kept its scheduler, its
    /// records' chunks and its registry for ever: 500 such backends added 218 MiB of address
    /// space.
    @Test func aBackendReleasedWithoutShutdownFreesItsSchedulerAndRegistry() throws {
        weak var scheduler: TimerScheduler?
        weak var registry: TimerRegistry?
        do {
            let ownRegistry = TimerRegistry()
            let backend = ForgetfulBackend(registry: ownRegistry)
            let timer = try backend.schedule(.after(.seconds(60))) { _ in }
            let key = try backend.schedule(.after(.seconds(60), on: .wall), calling: Callback())
            timer.cancel()
            backend.cancel(key)
            scheduler = backend.scheduler
            registry = ownRegistry
            #expect(scheduler != nil)
        }
        #expect(scheduler == nil, "a scheduler whose backend went without shutdown() is still alive")
        #expect(registry == nil, "its registry is still alive")
    }

    /// Measured in a child process of its own: other tests' timers move the address space too.
    @Test func fiveHundredBackendsReleasedWithoutShutdownGiveTheirMemoryBack() async {
        await #expect(processExitsWith: .success) {
            let registry = TimerRegistry()
            for _ in 0..<20 { _ = ForgetfulBackend(registry: registry) }  // the registry's first chunks
            let before = Self.addressSpace()
            for round in 0..<500 {
                let backend = ForgetfulBackend(registry: registry)
                if round.isMultiple(of: 2) { try backend.schedule(.after(.milliseconds(1)), calling: Callback()) }
                try backend.schedule(.after(.seconds(60))) { _ in }.cancel()
                if round.isMultiple(of: 2) { registry.cancelAll() }
            }
            let grown = Self.addressSpace() - before
            // Before: 218 MiB (each backend's records and queue, never given back).
            guard grown < 32 << 20, registry.chunkCount <= 21 else {
                print("500 backends released without shutdown() added \(grown >> 20) MiB; \(registry.chunkCount) chunks")
                exit(1)
            }
        }
    }

    /// A live timer keeps its scheduler (a lookup by name may reach it): the backend's release
    /// without shutdown frees the scheduler once its last timer ends, however it ends.
    @Test func aLiveTimerKeepsItsSchedulerUntilItEnds() throws {
        let registry = TimerRegistry()
        weak var scheduler: TimerScheduler?
        var key: TimerKey?
        do {
            let backend = ForgetfulBackend(registry: registry)
            key = try backend.schedule(.after(.seconds(60)), calling: Callback())
            try backend.schedule(.after(.seconds(60)), name: "kept") { _ in }
            scheduler = backend.scheduler
        }
        #expect(scheduler != nil, "a scheduler with live timers went")
        #expect(registry.count == 2)
        #expect(registry.snapshot().count == 2, "a listing reaches the live timers of a backend released without shutdown")
        try registry.cancel(named: "kept")
        #expect(scheduler != nil)
        #expect(key != nil)
        registry.cancelAll()
        #expect(scheduler == nil, "the scheduler outlived its last timer")
    }

    /// A shut-down scheduler keeps nothing alive either: its link let go with its last timer.
    @Test func aShutDownSchedulerGoesWithItsBackend() throws {
        weak var scheduler: TimerScheduler?
        do {
            let backend = ManualBackend(registry: TimerRegistry())
            for index in 0..<5000 {
                try backend.schedule(.after(.seconds(index + 1), on: index.isMultiple(of: 3) ? .wall : .monotonic), calling: Callback())
            }
            scheduler = backend.scheduler
            backend.shutdown()
        }
        #expect(scheduler == nil)
    }

    /// The defect this pins: a chunk's owner was set under the registry's lock as it was lent,
    /// and its place in the owner's store later, under the owner's lock; a lookup by generated
    /// name between the two read the previous owner's place, and an ended `timer#5` of one
    /// backend resolved to another's live `timer#4101`. Here the lookup comes between the two
    /// halves of a loan on purpose.
    @Test func aLookupByGeneratedNameDuringALoanFindsNoOtherTimer() throws {
        let registry = TimerRegistry()
        let second: ManualBackend
        let live: [TimerHandle]
        let endedName: String
        do {
            let first = ManualBackend(registry: registry)
            second = ManualBackend(registry: registry)
            let ended = try (0..<6).map { _ in try first.schedule(.after(.seconds(60))) { _ in } }
            endedName = ended[5].name
            live = try (0..<6).map { _ in try second.schedule(.after(.seconds(60))) { _ in } }
            first.shutdown()
        }
        #expect(endedName == "timer#5")
        #expect(live[5].name == "timer#4101")
        // The first backend has gone, and its chunk is free: the second borrows it as its next.
        let chunk = registry.lendChunk(to: second.scheduler, at: second.scheduler.storeChunkCount)
        #expect(chunk?.number == 0)
        #expect(registry.timer(named: endedName) == nil, "the ended \(endedName) resolved to a live timer of another backend")
        #expect(registry.timer(named: "timer#4101") === live[5])
        second.shutdown()
    }

    private final class Callback: TimerCallback {
        func timerFired(_ fire: TimerFire) {}
    }
}
