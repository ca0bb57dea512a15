import Dispatch
import Foundation
import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

@Suite("RunLoop modes")
struct RunLoopModeTests {
    static let tracking = RunLoop.Mode("TimerKitTracking")

    struct Counts: Sendable {
        var defaultTicks: [Tick] = []
        var commonTicks: [Tick] = []
    }

    /// Runs the current run loop in `mode` in short slices until `done` holds (at most 10 s).
    static func run(_ mode: RunLoop.Mode, until done: () -> Bool) {
        let giveUp = MonotonicInstant.now() + .seconds(10)
        while !done() && MonotonicInstant.now() < giveUp {
            _ = RunLoop.current.run(mode: mode, before: Date(timeIntervalSinceNow: 0.01))
        }
    }

    @Test func aDefaultTimerWaitsInATrackingModeWhileACommonTimerFires() throws {
        let registry = TimerRegistry()
        let seen = Locked<(tracked: Counts, after: Counts)?>(nil)
        withWatchdog {
            onNewThread {
                let backend = RunLoopBackend(attachedTo: .current, registry: registry)
                defer { backend.shutdown() }
                backend.addCommonMode(Self.tracking)
                let counts = Locked(Counts())
                let start = MonotonicInstant.now()
                _ = try? backend.schedule(.every(.milliseconds(10))) { tick in counts.withLock { $0.defaultTicks.append(tick) } }
                _ = try? backend.mode(.common).schedule(.every(.milliseconds(10))) { tick in counts.withLock { $0.commonTicks.append(tick) }
                }
                // "Scrolling": the loop runs in the tracking mode for at least 60 ms and until
                // the common timer has fired three times, however busy the machine is.
                Self.run(Self.tracking) { counts.current.commonTicks.count >= 3 && MonotonicInstant.now() - start >= .milliseconds(60) }
                let tracked = counts.current
                // Back to the default mode until the default timer has fired twice.
                Self.run(.default) { counts.current.defaultTicks.count >= 2 }
                seen.withLock { $0 = (tracked, counts.current) }
            }
        }
        let (tracked, after) = try #require(seen.current)
        #expect(tracked.defaultTicks.isEmpty, "a default-mode timer must wait while the loop tracks")
        #expect(tracked.commonTicks.count >= 3, "a common-mode timer keeps firing while the loop tracks")
        try #require(after.defaultTicks.count >= 2)
        let first = after.defaultTicks[0]
        let second = after.defaultTicks[1]
        // At least five ticks came due while tracking: .skip fires the latest once, late...
        #expect(first.missed >= 5)
        // ...and then moves on: the next tick is a later grid point, not an old one burst out.
        #expect(second.scheduled - first.scheduled >= .milliseconds(10))
    }

    @Test func aCustomModeTimerFiresOnlyInItsMode() throws {
        let fired = Locked(0)
        let inDefault = Locked(-1)
        let registry = TimerRegistry()
        withWatchdog {
            onNewThread {
                let backend = RunLoopBackend(attachedTo: .current, registry: registry)
                defer { backend.shutdown() }
                _ = try? backend.mode(Self.tracking).schedule(.every(.milliseconds(5))) { _ in fired.withLock { $0 += 1 } }
                _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.05))
                inDefault.withLock { $0 = fired.current }
                Self.run(Self.tracking) { fired.current >= 2 }
            }
        }
        #expect(inDefault.current == 0)
        #expect(fired.current >= 2)
    }

    @Test func modeTimersShareTheRegistryAndNameTheirMode() throws {
        let registry = TimerRegistry()
        let backend = try RunLoopBackend(registry: registry)
        defer { backend.shutdown() }
        try backend.schedule(.after(.seconds(60)), name: "a") { _ in }
        try backend.mode(.common).schedule(.after(.seconds(60)), name: "b") { _ in }
        #expect(throws: TimerError.duplicateName("a")) { try backend.mode(.common).schedule(.after(.seconds(1)), name: "a") { _ in } }
        #expect(registry.snapshot().map(\.backend) == ["runloop", "runloop[kCFRunLoopCommonModes]"])
        backend.shutdown()
        #expect(registry.count == 0, "shutdown ends the timers of every mode")
        #expect(throws: TimerError.self) { try backend.mode(.default).schedule(.after(.seconds(1))) { _ in } }
    }
}
