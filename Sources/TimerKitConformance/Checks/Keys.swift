import Dispatch
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit

/// What a callback of a timer scheduled with a key heard: its fires and its ends, each end
/// with the reason and count it was told. Released objects report through `onDeinit`.
final class KeyRecorder: TimerCallback {
    private let fires = Locked<[TimerFire]>([])
    private let ends = Locked<[(key: TimerKey, reason: TimerEndReason, fires: Int)]>([])
    private let firedAfterEnd = Locked(false)
    let onFire: @Sendable (TimerFire) -> Void
    let onEnd: @Sendable (TimerKey) -> Void
    let onDeinit: @Sendable () -> Void

    init(
        onFire: @escaping @Sendable (TimerFire) -> Void = { _ in }, onEnd: @escaping @Sendable (TimerKey) -> Void = { _ in },
        onDeinit: @escaping @Sendable () -> Void = {}
    ) {
        self.onFire = onFire
        self.onEnd = onEnd
        self.onDeinit = onDeinit
    }

    deinit { onDeinit() }

    func timerFired(_ fire: TimerFire) {
        if ends.current.contains(where: { $0.key == fire.key }) { firedAfterEnd.withLock { $0 = true } }
        fires.withLock { $0.append(fire) }
        onFire(fire)
    }

    func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) {
        ends.withLock { $0.append((key, reason, fires)) }
        onEnd(key)
    }

    var fireCount: Int { fires.current.count }
    var allFires: [TimerFire] { fires.current }
    func fires(of key: TimerKey) -> [TimerFire] { fires.current.filter { $0.key == key } }
    /// The ends told for `key`: one, once it has ended.
    func ends(of key: TimerKey) -> [(reason: TimerEndReason, fires: Int)] {
        ends.current.filter { $0.key == key }.map { ($0.reason, $0.fires) }
    }
    var endCount: Int { ends.current.count }
    /// Whether a fire came after its timer's end had been told.
    var heardAFireAfterAnEnd: Bool { firedAfterEnd.current }
}

/// The key path (`TimerBackend/schedule(_:name:tolerance:missedTicks:calling:)` and the controls
/// through a `TimerKey`): what a key answers, what its callback hears, and that its end is told
/// once, whatever ends it. The whole contract also runs through this path with
/// `BackendUnderTest/throughKeys`.
extension Checks {
    enum Keys {}
}

extension Checks.Keys {
    static func aKeyedOneShotFiresOnceThenItsCallbackHearsTheEnd(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let recorder = KeyRecorder()
        let before = h.backend.now()
        let key = try h.backend.schedule(.after(ms(20)), calling: recorder)
        // Active until its deadline: read before it (a thread descheduled for 20 ms between the
        // two calls, as under ThreadSanitizer on a busy machine, may find it fired and ended).
        let isActiveAtFirst = h.backend.isActive(key)
        #expect(isActiveAtFirst || h.backend.now() >= before + ms(20))
        #expect(h.waitUntil { recorder.ends(of: key).count == 1 })
        h.pass(ms(40))
        let fires = recorder.fires(of: key)
        #expect(fires.count == 1)
        let fire = try #require(fires.first)
        #expect(fire.key == key && fire.index == 0 && fire.missed == 0 && fire.interval == nil && fire.clock == .monotonic)
        #expect(fire.scheduled >= before + ms(20) && fire.actual >= fire.scheduled)
        let ends = recorder.ends(of: key)
        #expect(ends.count == 1 && ends.first?.reason == .completed && ends.first?.fires == 1)
        #expect(!h.backend.isActive(key))
        #expect(h.waitUntil { h.registry.count == 0 })
    }

    static func aKeyedRepeatWithACountFiresThatManyTimesOnItsGrid(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let recorder = KeyRecorder()
        let key = try h.backend.schedule(.every(ms(10), count: 3), calling: recorder)
        #expect(h.waitUntil { recorder.ends(of: key).count == 1 })
        let fires = recorder.fires(of: key)
        #expect(fires.map(\.index) == [0, 1, 2])
        #expect(fires.allSatisfy { $0.interval == ms(10) })
        for fire in fires.dropFirst() {
            // On the grid: a whole number of intervals after the first deadline (a late call
            // on a busy machine skips grid points under `.skip`).
            let intervals = (fire.scheduled - fires[0].scheduled) / ms(10)
            #expect(intervals >= 1 && intervals == intervals.rounded())
        }
        #expect(recorder.ends(of: key).first?.reason == .completed && recorder.ends(of: key).first?.fires == 3)
    }

    static func cancellingAKeyEndsItOnceAndLeavesOnlyTypedErrors(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let recorder = KeyRecorder()
        let key = try h.backend.schedule(.every(ms(10)), calling: recorder)
        h.backend.cancel(key)
        h.backend.cancel(key)  // idempotent
        #expect(!h.backend.isActive(key))
        #expect(h.waitUntil { recorder.endCount == 1 })
        h.pass(ms(30))
        // A test thread that stalls between the two calls sees fires first (one per 10 ms: a
        // CI run under ThreadSanitizer saw two): the end counts them, and nothing fires after it.
        let ends = recorder.ends(of: key)
        #expect(ends.count == 1 && ends.first?.reason == .cancelled)
        #expect(recorder.fireCount == ends.first?.fires)
        for attempt in [
            { try h.backend.reschedule(key, .after(ms(5))) }, { try h.backend.suspend(key) }, { try h.backend.resume(key) },
        ] as [() throws -> Void] {
            // The key names the value that was wrong: its slot may hold another timer by now.
            #expect(throws: TimerError.keyEnded(key)) { try attempt() }
        }
        #expect(h.registry.count == 0)
    }

    static func aKeyOfAnotherBackendIsRefusedAndChangesNothing(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let other = try kind.makeHarness()
        defer { other.shutdown() }
        let recorder = KeyRecorder()
        let key = try h.backend.schedule(.after(.seconds(3600)), calling: recorder)
        #expect(!other.backend.isActive(key))
        other.backend.cancel(key)
        #expect(h.backend.isActive(key))
        #expect {
            try other.backend.reschedule(key, .after(ms(5)))
        } throws: { error in
            guard case TimerError.invalidOption(let name, _, _) = error else { return false }
            return name == "key"
        }
        #expect(throws: TimerError.self) { try other.backend.suspend(key) }
        #expect(h.backend.isActive(key) && recorder.endCount == 0)
    }

    static func anEndedKeyNeverReachesItsSlotsNextTimer(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let recorder = KeyRecorder()
        let first = try h.backend.schedule(.after(.seconds(3600)), calling: recorder)
        h.backend.cancel(first)
        // The next timers take the freed slot (slots are reused last-freed first).
        let next = try (0..<4).map { _ in try h.backend.schedule(.after(.seconds(3600)), calling: recorder) }
        #expect(!next.contains(first))
        h.backend.cancel(first)
        #expect(throws: TimerError.self) { try h.backend.reschedule(first, .after(ms(1))) }
        #expect(!h.backend.isActive(first))
        #expect(next.allSatisfy { h.backend.isActive($0) })
        #expect(recorder.endCount == 1)
    }

    static func rescheduleSuspendAndResumeThroughAKey(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let recorder = KeyRecorder()
        let key = try h.backend.schedule(.every(.seconds(3600)), calling: recorder)
        try h.backend.reschedule(key, .every(ms(10)))
        #expect(h.waitUntil { recorder.fireCount >= 2 })
        try h.backend.suspend(key)
        let whenSuspended = recorder.fireCount
        h.pass(ms(50))
        // A call already begun when it was suspended may still land: at most one more.
        #expect(recorder.fireCount <= whenSuspended + 1)
        #expect(h.backend.isActive(key))
        let beforeResume = recorder.fireCount
        try h.backend.resume(key)
        #expect(h.waitUntil { recorder.fireCount >= beforeResume + 2 })
        h.backend.cancel(key)
        #expect(h.waitUntil { recorder.endCount == 1 })
        #expect(!recorder.heardAFireAfterAnEnd)
    }

    static func keyedTimersShareTheRegistry(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let recorder = KeyRecorder()
        let key = try h.backend.schedule(.after(.seconds(3600)), name: "idle-timeout", calling: recorder)
        #expect(h.registry.names.contains("idle-timeout"))
        #expect(throws: TimerError.duplicateName("idle-timeout")) {
            try h.backend.schedule(.after(.seconds(3600)), name: "idle-timeout", calling: recorder)
        }
        #expect(throws: TimerError.duplicateName("idle-timeout")) {
            try h.backend.schedule(.after(.seconds(3600)), name: "idle-timeout") { _ in }
        }
        try h.registry.cancel(named: "idle-timeout")
        #expect(h.waitUntil { recorder.endCount == 1 })
        #expect(recorder.ends(of: key).first?.reason == .cancelledByName)
        #expect(!h.backend.isActive(key) && !h.registry.names.contains("idle-timeout"))
    }

    static func shutdownEndsKeyedTimersAndTellsEachCallbackOnce(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        let recorder = KeyRecorder()
        let keys = try (0..<3).map { _ in try h.backend.schedule(.after(.seconds(3600)), calling: recorder) }
        h.shutdown()
        #expect(recorder.endCount == 3)
        for key in keys {
            #expect(recorder.ends(of: key).map(\.reason) == [.backendShutDown])
            #expect(!h.backend.isActive(key))
        }
        #expect(throws: TimerError.self) { try h.backend.schedule(.after(ms(1)), calling: recorder) }
    }

    static func aCallbackIsLetGoOfOnceItsTimerEnds(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let released = Counter()
        var key: TimerKey?
        var finishedKey: TimerKey?
        do {
            let cancelled = KeyRecorder(onDeinit: { released.increment() })
            key = try h.backend.schedule(.after(.seconds(3600)), calling: cancelled)
            let finished = KeyRecorder(onDeinit: { released.increment() })
            finishedKey = try h.backend.schedule(.after(ms(5)), calling: finished)
        }
        #expect(released.current == 0)  // the backend holds them while their timers live
        h.backend.cancel(try #require(key))
        #expect(h.waitUntil { released.current == 2 })
        #expect(!h.backend.isActive(try #require(finishedKey)))
    }

    static func aCallbacksEndAndReleaseMayCallBackIntoTheBackend(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let backend = h.backend
        let scheduledFromEnd = Locked<TimerKey?>(nil)
        let follower = KeyRecorder()
        let deinitScheduled = Counter()
        do {
            let recorder = KeyRecorder(
                onEnd: { _ in
                    // Told outside TimerKit's locks: scheduling and cancelling here must not hang.
                    let key = try? backend.schedule(.after(.seconds(3600)), calling: follower)
                    scheduledFromEnd.withLock { $0 = key }
                    if let key { backend.cancel(key) }
                },
                onDeinit: {
                    if (try? backend.schedule(.after(.seconds(3600))) { _ in })?.cancel() != nil { deinitScheduled.increment() }
                })
            let key = try backend.schedule(.after(ms(5)), calling: recorder)
            _ = key
        }
        #expect(h.waitUntil { deinitScheduled.current == 1 && follower.endCount == 1 })
        #expect(scheduledFromEnd.current != nil)
    }

    static func aCallbackMayCancelItsOwnTimer(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let backend = h.backend
        let recorder = KeyRecorder(onFire: { fire in if fire.index == 2 { backend.cancel(fire.key) } })
        let key = try backend.schedule(.every(ms(2)), calling: recorder)
        #expect(h.waitUntil { recorder.endCount == 1 })
        h.pass(ms(20))
        #expect(recorder.fires(of: key).count == 3)
        #expect(recorder.ends(of: key).first?.reason == .cancelled && recorder.ends(of: key).first?.fires == 3)
    }

    static func cancelsRacingFiresFromManyThreadsEndEachTimerOnce(_ kind: BackendUnderTest) throws {
        let h = try kind.makeHarness()
        defer { h.shutdown() }
        let recorder = KeyRecorder()
        let keys = try (0..<200).map { index in try h.backend.schedule(.every(.microseconds(500 + index % 7 * 100)), calling: recorder) }
        h.driveInBackground(for: ms(30))
        onThreads(4) { worker in
            for (index, key) in keys.enumerated() where index % 4 == worker { h.backend.cancel(key) }
        }
        #expect(h.waitUntil { recorder.endCount == keys.count })
        h.pass(ms(10))
        #expect(recorder.endCount == keys.count)
        for key in keys.prefix(20) { #expect(recorder.ends(of: key).count == 1) }
        #expect(!recorder.heardAFireAfterAnEnd)
    }
}
